"""Listwise contrastive loss (InfoNCE) with in-batch and hard negatives."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lr_opensearch.errors import ConfigError
from trainer.losses.base import LossOutput, group_size, positive_targets, similarity


class ContrastiveLoss:
    """InfoNCE over every document of the batch.

    For query ``i`` the candidates are all ``B * G`` documents of the batch: its own
    positive (column ``i * G``), its ``G - 1`` hard negatives and every other query's
    positive and negatives (in-batch negatives)::

        loss = mean_i [ -log softmax_j( s(q_i, d_j) / temperature )[i * G] ]

    Used for the dense side (query = mean of per-token encodings, or the symmetric full
    encoding; ``normalize=True`` gives cosine similarity) and the sparse side (query =
    token counts [B, V], documents = sparse vectors [B*G, V], plain dot product).
    LightRetriever (Ma et al., 2025) trains dense at temperature 0.02.

    Args:
        temperature: softmax temperature (> 0).
        normalize: L2-normalise query and document vectors before the dot product.
    """

    def __init__(self, temperature: float = 0.02, normalize: bool = False):
        if not temperature > 0:
            raise ConfigError(f"contrastive temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)
        self.normalize = bool(normalize)

    def scores(self, query: torch.Tensor, docs: torch.Tensor) -> torch.Tensor:
        """Temperature-scaled logits. query [B, D], docs [N, D] -> [B, N] (float32)."""
        return similarity(query, docs, normalize=self.normalize) / self.temperature

    def __call__(
        self,
        query: torch.Tensor,
        docs: torch.Tensor,
        *,
        teacher: torch.Tensor | None = None,
        step: int = 0,
    ) -> LossOutput:
        """Compute the loss.

        Args:
            query: [B, D] query vectors.
            docs: [B * G, D] document vectors, G per query, positive first.
            teacher: unused (same signature as the other losses).
            step: unused.

        Returns:
            LossOutput with the mean cross-entropy and ``logs["accuracy"]`` (share of
            queries whose positive scores highest).
        """
        g = group_size(query, docs)
        logits = self.scores(query, docs)
        target = positive_targets(query.shape[0], g, logits.device)
        loss = F.cross_entropy(logits, target)
        with torch.no_grad():
            acc = (logits.argmax(dim=-1) == target).float().mean().item()
        return LossOutput(loss, {"accuracy": acc})
