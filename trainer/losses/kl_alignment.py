"""KL alignment of the asymmetric (LightRetriever) scores to the symmetric teacher's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lr_opensearch.errors import ConfigError, TrainingError
from trainer.losses.base import LossOutput, group_size, similarity


class KLAlignmentLoss:
    """Distil the teacher's score distribution over the batch's documents.

    The student is the LightRetriever dense query (mean of per-token encodings); the
    teacher is the full model's encoding of the same
    query (the symmetric retriever). Both score every document of the batch, and::

        loss = mean_i KL( softmax(t_i / T) || softmax(s_i / T) )

    with ``t_i = s(teacher_i, d)`` and ``s_i = s(query_i, d)``. The teacher side is
    detached: only the student learns. (LightRetriever's "scores distillation"; T is the
    contrastive temperature by default.)

    Args:
        temperature: softmax temperature (> 0) for both score lists.
        normalize: cosine similarity (L2-normalise queries and documents) on both sides.
    """

    def __init__(self, temperature: float = 0.02, normalize: bool = False):
        if not temperature > 0:
            raise ConfigError(f"kl_alignment temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)
        self.normalize = bool(normalize)

    def __call__(
        self,
        query: torch.Tensor,
        docs: torch.Tensor,
        *,
        teacher: torch.Tensor | None = None,
        step: int = 0,
    ) -> LossOutput:
        """Compute the KL divergence, teacher || student, averaged over queries.

        Args:
            query: [B, D] student query vectors.
            docs: [B * G, D] documents.
            teacher: [B, D] teacher query vectors (required; detached here).
            step: unused.

        Returns:
            LossOutput with the mean KL.
        """
        if teacher is None:
            raise TrainingError("kl_alignment needs the teacher's query vectors (teacher=...)")
        group_size(query, docs)
        group_size(teacher, docs)
        student = similarity(query, docs, normalize=self.normalize) / self.temperature
        with torch.no_grad():
            target = similarity(teacher.detach(), docs.detach(),
                                normalize=self.normalize) / self.temperature
        loss = F.kl_div(F.log_softmax(student, dim=-1), F.log_softmax(target, dim=-1),
                        reduction="batchmean", log_target=True)
        return LossOutput(loss, {})
