"""Training losses, one class per file, each returning a ``LossOutput``.

Two call signatures (each file's docstring has the shapes):

- query / document embeddings: ``loss(query [B, D], docs [B*G, D], *, teacher=None,
  step=0)``: ``contrastive``, ``flops``, ``matryoshka``, ``kl_alignment``,
  ``s_matryoshka``; ``xtr`` takes per-token embeddings in the same two slots;
- score or logit matrices: ``rrf_hybrid(sparse_scores, dense_scores, *, group, ...)`` and
  ``self_distill(student, teacher=None, ...)``.

``build_loss(name, **kwargs)`` looks a loss up by name; an unknown name is a
ConfigError listing the valid ones.
"""

from __future__ import annotations

from typing import Any

from lr_opensearch.errors import ConfigError
from trainer.losses.base import LossOutput
from trainer.losses.contrastive import ContrastiveLoss
from trainer.losses.flops import FlopsLoss, flops, quadratic_warmup
from trainer.losses.kl_alignment import KLAlignmentLoss
from trainer.losses.matryoshka import MatryoshkaLoss
from trainer.losses.rrf_hybrid import RRFHybridLoss, soft_rank
from trainer.losses.s_matryoshka import SMatryoshkaLoss
from trainer.losses.self_distill import SelfDistillLoss
from trainer.losses.xtr import XTRLoss

LOSSES: dict[str, type] = {
    "contrastive": ContrastiveLoss,
    "flops": FlopsLoss,
    "matryoshka": MatryoshkaLoss,
    "kl_alignment": KLAlignmentLoss,
    # BRIDGE-Embed (issue 19); rrf_hybrid and self_distill take score / logit matrices
    "s_matryoshka": SMatryoshkaLoss,
    "rrf_hybrid": RRFHybridLoss,
    "self_distill": SelfDistillLoss,
    # UR²N (issue 18): token embeddings [B, Tq, D] / [B*G, Td, D] with their masks
    "xtr": XTRLoss,
}


def build_loss(name: str, **kwargs: Any):
    """Instantiate the loss registered as ``name`` with ``kwargs``.

    Raises:
        ConfigError: unknown name (the message lists the valid names) or bad arguments.
    """
    cls = LOSSES.get(name)
    if cls is None:
        raise ConfigError(f"unknown loss {name!r}; valid losses: {', '.join(sorted(LOSSES))}")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"bad arguments for loss {name!r}: {exc}") from exc


__all__ = [
    "LOSSES", "ContrastiveLoss", "FlopsLoss", "KLAlignmentLoss", "LossOutput",
    "MatryoshkaLoss", "build_loss", "flops", "quadratic_warmup",
    "RRFHybridLoss", "SMatryoshkaLoss", "SelfDistillLoss", "soft_rank",
    "XTRLoss",
]
