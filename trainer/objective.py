"""The training objective: the configured loss terms over one batch's representations.

Terms (each weighted by ``LossSettings``; weight 0 = off):

- ``dense``: contrastive, LightRetriever dense query (mean of per-token encodings) vs
  dense documents; Matryoshka-averaged when ``matryoshka_dims`` is set.
- ``sparse``: contrastive, token-count query vs sparse documents, wrapped by the FLOPs
  regulariser on the documents (quadratic warm-up).
- ``symmetric``: contrastive, full-model query encoding vs dense documents.
- ``kl``: KL alignment of the LightRetriever dense scores to the symmetric ones (teacher).

Dense scores are cosine similarities when the model L2-normalises its dense vectors
(ranking by cosine equals ranking by the served inner product, since the documents are
normalised and a query's scale does not change its ranking).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

import torch
import torch.distributed as dist

from lr_opensearch.errors import ConfigError
from trainer.config import LossSettings
from trainer.losses import LossOutput, build_loss


@dataclass
class Representations:
    """What the model produced for one batch.

    Attributes:
        query_dense: [B, H] LightRetriever dense queries.
        query_counts: [B, V] token counts.
        query_symmetric: [B, H] full-model query encodings, or None.
        doc_dense: [B*G, H].
        doc_sparse: [B*G, V].
    """

    query_dense: torch.Tensor
    query_counts: torch.Tensor
    query_symmetric: torch.Tensor | None
    doc_dense: torch.Tensor
    doc_sparse: torch.Tensor


def gather_across_ranks(local: torch.Tensor) -> torch.Tensor:
    """Rows of every rank concatenated in rank order, this rank's slice keeping its graph.

    ``all_gather`` carries no gradient, so the other ranks' rows are constants here; their
    gradients reach them on their own ranks, where the same global loss is computed. Every
    rank must hold the same shape (:func:`global_batch` checks that once per batch).
    """
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, local.detach().contiguous())
    parts[dist.get_rank()] = local
    return torch.cat(parts, dim=0)


def global_batch(reps: Representations) -> tuple[Representations, int]:
    """(the representations of the global batch, the loss scale) under DDP; as is otherwise.

    The scale is the world size: DDP averages gradients over ranks, and each rank's
    parameters receive the gradient of only its own rows, so ``world x loss`` makes the
    averaged gradient the one of the global batch's loss.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return reps, 1
    local = {f.name: getattr(reps, f.name) for f in fields(reps)}
    shapes = {k: None if t is None else list(t.shape) for k, t in local.items()}
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, shapes)  # one collective for all the shapes
    if any(s != shapes for s in every):
        raise ConfigError(f"cross-device negatives need equal micro-batch shapes on every rank, "
                          f"got {every}; set loss.cross_device_negatives: false or equal batches")
    gathered: dict[str, Any] = {k: None if t is None else gather_across_ranks(t) for k, t in local.items()}
    return replace(reps, **gathered), dist.get_world_size()


class Objective:
    """The weighted sum of the configured terms.

    Args:
        settings: the loss section of the training config.
        normalize: the model L2-normalises dense vectors (cosine scores).
    """

    def __init__(self, settings: LossSettings, normalize: bool):
        self.settings = settings
        dims = settings.matryoshka_dims

        def dense_loss(name: str, **kwargs):
            base = build_loss(name, **kwargs)
            return build_loss("matryoshka", base=base, dims=dims, renormalize=normalize) if dims else base

        self.dense = dense_loss("contrastive", temperature=settings.temperature, normalize=normalize)
        self.symmetric = self.dense
        self.sparse = build_loss(
            "flops", base=build_loss("contrastive", temperature=settings.sparse_temperature),
            max_coef=settings.flops_max, warmup_steps=settings.flops_warmup_steps)
        self.kl = dense_loss("kl_alignment", temperature=settings.kl_temperature or settings.temperature,
                             normalize=normalize)

    @property
    def needs_symmetric(self) -> bool:
        """Whether the full-model query encoding is needed at all."""
        return self.settings.symmetric_weight > 0 or self.settings.kl_weight > 0

    def __call__(self, reps: Representations, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        """Total loss (scalar) and a flat dict of every term and sub-term for logging.

        With ``cross_device_negatives`` under DDP the terms are those of the global batch
        (every rank's documents are negatives for every query) and the returned loss is
        scaled by the world size (see :func:`global_batch`); the logs hold the unscaled
        values.
        """
        scale = 1
        if self.settings.cross_device_negatives:
            reps, scale = global_batch(reps)
        s = self.settings
        terms: list[tuple[str, float, LossOutput]] = []
        if s.dense_weight > 0:
            terms.append(("dense", s.dense_weight, self.dense(reps.query_dense, reps.doc_dense, step=step)))
        if s.sparse_weight > 0:
            terms.append(("sparse", s.sparse_weight,
                          self.sparse(reps.query_counts, reps.doc_sparse, step=step)))
        if s.symmetric_weight > 0 and reps.query_symmetric is not None:
            terms.append(("symmetric", s.symmetric_weight,
                          self.symmetric(reps.query_symmetric, reps.doc_dense, step=step)))
        if s.kl_weight > 0 and reps.query_symmetric is not None:
            terms.append(("kl", s.kl_weight, self.kl(reps.query_dense, reps.doc_dense,
                                                     teacher=reps.query_symmetric, step=step)))
        total = reps.doc_dense.new_zeros((), dtype=torch.float32)
        logs: dict[str, float] = {}
        for name, weight, out in terms:
            total = total + weight * out.loss
            logs[name] = float(out.loss.detach())
            logs.update({f"{name}/{k}": v for k, v in out.logs.items()})
        logs["loss"] = float(total.detach())
        return total * scale if scale != 1 else total, logs
