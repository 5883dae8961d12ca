"""Matryoshka wrapper: the base loss on truncated dense vectors, averaged over dims."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from lr_opensearch.errors import ConfigError
from trainer.losses.base import LossOutput


class MatryoshkaLoss:
    """Average of a base loss over prefixes of the vectors (Kusupati et al., 2022).

    For each ``d`` in ``dims`` the base loss sees ``query[:, :d]`` and ``docs[:, :d]``
    (and ``teacher[:, :d]``); ``None`` or a value >= the width means the full vector.
    Prefixes are re-normalised when ``renormalize`` is set, so a cosine base loss
    scores what a truncated, normalised index would hold.

    Args:
        base: the wrapped loss.
        dims: the prefix widths, e.g. ``(128, 256, None)``.
        renormalize: L2-normalise each truncated vector.
    """

    def __init__(self, base, dims: Sequence[int | None], renormalize: bool = False):
        if not dims:
            raise ConfigError("matryoshka dims must not be empty (e.g. [128, 256, null])")
        for d in dims:
            if d is not None and int(d) <= 0:
                raise ConfigError(f"matryoshka dims must be positive or null, got {list(dims)}")
        self.base = base
        self.dims = tuple(None if d is None else int(d) for d in dims)
        self.renormalize = bool(renormalize)

    def _cut(self, x: torch.Tensor | None, dim: int | None) -> torch.Tensor | None:
        if x is None:
            return None
        if dim is not None and dim < x.shape[-1]:
            x = x[..., :dim]
        return F.normalize(x, p=2, dim=-1) if self.renormalize else x

    def __call__(
        self,
        query: torch.Tensor,
        docs: torch.Tensor,
        *,
        teacher: torch.Tensor | None = None,
        step: int = 0,
    ) -> LossOutput:
        """Mean of the base loss over the configured prefix widths.

        Args:
            query: [B, D].
            docs: [B * G, D].
            teacher: optional [B, D], truncated like ``query``.
            step: passed to the base loss.

        Returns:
            LossOutput; logs hold ``dim<d>`` (or ``dim_full``) -> that width's loss.
        """
        total = query.new_zeros((), dtype=torch.float32)
        logs: dict[str, float] = {}
        for d in self.dims:
            out = self.base(self._cut(query, d), self._cut(docs, d),
                            teacher=self._cut(teacher, d), step=step)
            total = total + out.loss
            width = d if d is not None and d < query.shape[-1] else None
            logs[f"dim{width}" if width else "dim_full"] = float(out.loss.detach())
        return LossOutput(total / len(self.dims), logs)
