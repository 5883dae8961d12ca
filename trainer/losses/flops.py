"""FLOPs regulariser for sparse document vectors, wrapping a base loss."""

from __future__ import annotations

import torch

from lr_opensearch.errors import ConfigError
from trainer.losses.base import LossOutput


def flops(sparse: torch.Tensor) -> torch.Tensor:
    """The FLOPs penalty (Paria et al., 2020): ``sum_v (mean_n |w[n, v]|) ** 2``.

    Args:
        sparse: [N, V] sparse vectors (documents).

    Returns:
        Scalar tensor (float32).
    """
    return sparse.float().abs().mean(dim=0).pow(2).sum()


def quadratic_warmup(step: int, max_coef: float, warmup_steps: int) -> float:
    """Coefficient ``max_coef * min(1, step / warmup_steps) ** 2``.

    Args:
        step: optimizer steps taken so far (0 at the first step).
        max_coef: the coefficient reached at ``warmup_steps`` and kept afterwards.
        warmup_steps: length of the warm-up; 0 means ``max_coef`` from the start.
    """
    if warmup_steps <= 0:
        return float(max_coef)
    ratio = min(1.0, max(0, step) / warmup_steps)
    return float(max_coef) * ratio * ratio


class FlopsLoss:
    """A base loss plus the FLOPs penalty on the document side, warmed up quadratically.

    ``loss = base(query, docs) + coef(step) * flops(docs)`` with
    ``coef(step) = max_coef * min(1, step / warmup_steps) ** 2``. The LightRetriever
    recipe uses ``max_coef = 1e-3`` reached after 4,000 steps. The penalty applies to
    ``docs`` only: the LightRetriever sparse query is a count vector with no parameters.

    Args:
        base: the wrapped loss (same call signature), e.g. a ContrastiveLoss.
        max_coef: the final coefficient (>= 0).
        warmup_steps: steps until ``max_coef`` is reached (>= 0).
    """

    def __init__(self, base, max_coef: float = 1e-3, warmup_steps: int = 4000):
        if max_coef < 0:
            raise ConfigError(f"flops max_coef must be >= 0, got {max_coef}")
        if warmup_steps < 0:
            raise ConfigError(f"flops warmup_steps must be >= 0, got {warmup_steps}")
        self.base = base
        self.max_coef = float(max_coef)
        self.warmup_steps = int(warmup_steps)

    def coefficient(self, step: int) -> float:
        """The penalty coefficient at optimizer step ``step``."""
        return quadratic_warmup(step, self.max_coef, self.warmup_steps)

    def __call__(
        self,
        query: torch.Tensor,
        docs: torch.Tensor,
        *,
        teacher: torch.Tensor | None = None,
        step: int = 0,
    ) -> LossOutput:
        """Compute ``base + coef(step) * flops(docs)``.

        Args:
            query: [B, D] passed to the base loss.
            docs: [B * G, D] passed to the base loss and regularised.
            teacher: passed to the base loss.
            step: optimizer steps taken so far.

        Returns:
            LossOutput; logs hold the base loss's logs, ``base``, ``flops`` (unscaled
            penalty) and ``flops_coef``.
        """
        out = self.base(query, docs, teacher=teacher, step=step)
        penalty = flops(docs)
        coef = self.coefficient(step)
        logs = dict(out.logs)
        logs.update(base=float(out.loss.detach()), flops=float(penalty.detach()), flops_coef=coef)
        return LossOutput(out.loss + coef * penalty, logs)
