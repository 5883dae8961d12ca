"""Sparsity-optimised Matryoshka loss (S-Matryoshka) of BRIDGE-Embed."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from lr_opensearch.errors import ConfigError
from lr_opensearch.model.medusa import soft_top_k, sparse_scores
from trainer.losses.base import LossOutput, group_size, positive_targets


class SMatryoshkaLoss:
    """Contrastive loss on the sparse documents cut to several sizes, plus an L1 term.

    BRIDGE-Embed (Ning, Wu, Liu): for every size k, ``h^k = Norm(SoftTopK(h, k, tau))``
    (softmax(h / tau), the k largest kept, L2-normalised: ``medusa.soft_top_k``, the same
    function ingest stores with), and::

        loss = sum_k w_k * InfoNCE(q . h^k / T) + lambda * mean_k mean_n ||h_n^k||_1

    The InfoNCE is the one of ``ContrastiveLoss`` (positive at column ``i * G``, every other
    document of the batch a negative); ``q`` is the token-count (or IDF) query vector. The
    L1 norm of a unit-L2 vector is smallest when its mass sits on few terms, so lambda
    sharpens each document's top k. Weights ``w_k`` default to 1 / len(sizes). Documents
    stay (values, indices) pairs of k entries; no [N, V] mask is built.

    Args:
        sizes: the k of each term (paper: 128, 256, 512); clipped to the vocabulary.
        size_weights: w_k per size (default uniform).
        tau: SoftTopK temperature (paper: 0.05).
        temperature: T of the contrastive softmax over sparse scores (> 0).
        l1: lambda (>= 0).
        excluded: token ids never kept (special tokens; ingest drops them too).
    """

    def __init__(self, sizes: Sequence[int] = (128, 256, 512), size_weights: Sequence[float] = (),
                 tau: float = 0.05, temperature: float = 0.05, l1: float = 0.0,
                 excluded: Sequence[int] = ()):
        if not sizes or any(int(k) < 1 for k in sizes):
            raise ConfigError(f"s_matryoshka sizes must be a non-empty list of k >= 1, got {list(sizes)}")
        if size_weights and len(size_weights) != len(sizes):
            raise ConfigError(f"s_matryoshka size_weights {list(size_weights)} must have one weight "
                              f"per size {list(sizes)} (or be empty: uniform)")
        if not (tau > 0 and temperature > 0 and l1 >= 0):
            raise ConfigError(f"s_matryoshka needs tau > 0, temperature > 0 and l1 >= 0; got "
                              f"{tau}, {temperature}, {l1}")
        self.sizes = tuple(int(k) for k in sizes)
        self.size_weights = tuple(float(w) for w in size_weights) or (1.0 / len(sizes),) * len(sizes)
        self.tau = float(tau)
        self.temperature = float(temperature)
        self.l1 = float(l1)
        self.excluded = tuple(int(i) for i in excluded)

    def cut(self, docs: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``Norm(SoftTopK(docs, k, tau))``: (values [N, k], indices [N, k])."""
        return soft_top_k(docs, k, self.tau, self.excluded)

    def scores(self, query: torch.Tensor, docs: torch.Tensor, k: int | None = None) -> torch.Tensor:
        """Sparse scores [B, N] of queries [B, V] against documents [N, V] cut to k
        (default: the largest size), before the temperature."""
        values, indices = self.cut(docs, k or max(self.sizes))
        return sparse_scores(query, values, indices)

    def __call__(self, query: torch.Tensor, docs: torch.Tensor, *,
                 teacher: torch.Tensor | None = None, step: int = 0) -> LossOutput:
        """Compute the loss.

        Args:
            query: [B, V] sparse query vectors (token counts).
            docs: [B * G, V] aggregated sparse documents (``h``), positive first per group.
            teacher: unused.
            step: unused.

        Returns:
            LossOutput; logs hold ``k<k>`` (that size's InfoNCE) and ``l1``.
        """
        g = group_size(query, docs)
        target = positive_targets(query.shape[0], g, docs.device)
        total = query.new_zeros((), dtype=torch.float32)
        l1 = query.new_zeros((), dtype=torch.float32)
        logs: dict[str, float] = {}
        for k, w in zip(self.sizes, self.size_weights, strict=True):
            values, indices = self.cut(docs, k)
            ce = F.cross_entropy(sparse_scores(query, values, indices) / self.temperature, target)
            total = total + w * ce
            l1 = l1 + values.abs().sum(-1).mean() / len(self.sizes)
            logs[f"k{k}"] = float(ce.detach())
        logs["l1"] = float(l1.detach())
        return LossOutput(total + self.l1 * l1, logs)
