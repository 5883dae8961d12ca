"""The RRF-shaped hybrid loss of BRIDGE-Embed: rank the positive first in the fused list."""

from __future__ import annotations

import torch

from lr_opensearch.errors import ConfigError, TrainingError
from trainer.losses.base import LossOutput, positive_targets


def soft_rank(scores: torch.Tensor, temperature: float) -> torch.Tensor:
    """Differentiable rank of every entry within its row (1 = best).

    ``rank_ij = 1 + sum_{l != j} sigmoid((s_il - s_ij) / tau)``: the count of entries above
    ``s_ij``, each counted softly. Tends to the hard rank as tau -> 0.

    Args:
        scores: [B, N].
        temperature: tau (> 0).

    Returns:
        [B, N] soft ranks in [1, N].
    """
    diff = (scores.unsqueeze(1) - scores.unsqueeze(2)) / temperature  # [B, j, l] = s_l - s_j
    above = torch.sigmoid(diff.float())
    # the l == j term is sigmoid(0) = 0.5: take it out
    return 0.5 + above.sum(-1)


class RRFHybridLoss:
    """Hinge on reciprocal-rank-fusion scores of the positive and each negative.

    BRIDGE-Embed: with soft ranks over the batch's documents of each query,
    ``RRF_j = 1 / (s + SoftRank(sparse)_j) + 1 / (s + SoftRank(dense)_j)`` (s = 60), and::

        loss = mean_i mean_{j != pos(i)} max(0, RRF_j - RRF_pos(i) + margin)

    The negatives are every other document of the batch (hard and in-batch), averaged;
    the paper names "the negative" without saying which. RRF values live near 1/61, so a
    rank step near the top moves RRF by about 2.7e-4: the margin (default 1e-3, about four
    such steps) and the term's weight are on that scale.

    Unlike the vector losses this one takes the two legs' score matrices:
    ``loss(sparse_scores [B, N], dense_scores [B, N], group=G)``.

    Args:
        temperature: SoftRank tau (paper: 0.05).
        rank_constant: s (60, as RRF).
        margin: the hinge margin (>= 0).
    """

    def __init__(self, temperature: float = 0.05, rank_constant: float = 60.0, margin: float = 1e-3):
        if not (temperature > 0 and rank_constant > 0 and margin >= 0):
            raise ConfigError(f"rrf_hybrid needs temperature > 0, rank_constant > 0, margin >= 0; "
                              f"got {temperature}, {rank_constant}, {margin}")
        self.temperature = float(temperature)
        self.rank_constant = float(rank_constant)
        self.margin = float(margin)

    def fused(self, sparse_scores: torch.Tensor, dense_scores: torch.Tensor) -> torch.Tensor:
        """[B, N] soft RRF scores of every document."""
        s = self.rank_constant
        return (1.0 / (s + soft_rank(sparse_scores, self.temperature))
                + 1.0 / (s + soft_rank(dense_scores, self.temperature)))

    def __call__(self, sparse_scores: torch.Tensor, dense_scores: torch.Tensor, *, group: int,
                 step: int = 0) -> LossOutput:
        """Compute the loss.

        Args:
            sparse_scores: [B, N] sparse similarities of each query with the batch's documents.
            dense_scores: [B, N] dense similarities (same layout).
            group: G, documents per query (query i's positive is column i * G).
            step: unused.

        Returns:
            LossOutput; logs hold ``violations`` (share of (query, negative) pairs whose hinge
            is active).
        """
        if sparse_scores.shape != dense_scores.shape or sparse_scores.dim() != 2:
            raise TrainingError(f"rrf_hybrid needs two [B, N] score matrices of one shape, got "
                                f"{tuple(sparse_scores.shape)} and {tuple(dense_scores.shape)}")
        b, n = sparse_scores.shape
        if group < 1 or n < b * group or n < 2:
            raise TrainingError(f"rrf_hybrid: {n} documents are not {b} groups of {group}")
        rrf = self.fused(sparse_scores, dense_scores)
        pos_col = positive_targets(b, group, rrf.device)
        pos = rrf.gather(1, pos_col.unsqueeze(1))  # [B, 1]
        negative = torch.ones_like(rrf, dtype=torch.bool).scatter_(1, pos_col.unsqueeze(1), False)
        hinge = torch.relu(rrf - pos + self.margin)[negative]
        return LossOutput(hinge.mean(), {"violations": float((hinge > 0).float().mean())})
