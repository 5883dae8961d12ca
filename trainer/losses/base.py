"""Shared pieces of the training losses: the output type and the score helpers.

Every loss in this package has the same call signature::

    loss(query, docs, *, teacher=None, step=0) -> LossOutput

with ``query`` [B, D] (one row per training query), ``docs`` [B * G, D] laid out in
groups of ``G`` per query (position ``i * G`` is query ``i``'s positive, the rest of the
group its hard negatives), ``teacher`` an optional [B, D] query encoding of the same
queries by a teacher, and ``step`` the number of optimizer steps taken so far (used by
schedules such as the FLOPs warm-up).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from lr_opensearch.errors import TrainingError


@dataclass
class LossOutput:
    """A scalar loss and the named float values worth logging.

    Attributes:
        loss: scalar tensor (differentiable).
        logs: term name -> float, e.g. ``{"base": 1.2, "flops": 0.3, "flops_coef": 1e-4}``.
    """

    loss: torch.Tensor
    logs: dict[str, float] = field(default_factory=dict)


def group_size(query: torch.Tensor, docs: torch.Tensor) -> int:
    """Documents per query ``G`` of a grouped batch.

    Args:
        query: [B, D].
        docs: [B * G, D].

    Returns:
        G (>= 1).

    Raises:
        TrainingError: when the shapes do not form whole groups.
    """
    if query.dim() != 2 or docs.dim() != 2:
        raise TrainingError(
            f"losses expect 2-D query [B, D] and docs [B*G, D]; got {tuple(query.shape)} "
            f"and {tuple(docs.shape)}"
        )
    b, n = query.shape[0], docs.shape[0]
    if b == 0 or n % b != 0 or query.shape[1] != docs.shape[1]:
        raise TrainingError(
            f"docs {tuple(docs.shape)} are not whole groups for queries {tuple(query.shape)}: "
            "expected [B*G, D] with G documents (positive first) per query"
        )
    return n // b


def positive_targets(batch: int, group: int, device: torch.device) -> torch.Tensor:
    """Column of each query's positive in the [B, B*G] score matrix: ``i * G``. Shape [B]."""
    return torch.arange(batch, device=device, dtype=torch.long) * group


def similarity(query: torch.Tensor, docs: torch.Tensor, *, normalize: bool) -> torch.Tensor:
    """Inner products of every query with every document, in float32.

    Args:
        query: [B, D].
        docs: [N, D].
        normalize: L2-normalise both sides first (cosine similarity).

    Returns:
        [B, N] scores.
    """
    q, d = query.float(), docs.float()
    if normalize:
        q = F.normalize(q, p=2, dim=-1)
        d = F.normalize(d, p=2, dim=-1)
    return q @ d.T
