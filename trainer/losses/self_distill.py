"""Self-distillation of a Medusa head to the original LM head (BRIDGE-Embed)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lr_opensearch.errors import TrainingError
from trainer.losses.base import LossOutput


class SelfDistillLoss:
    """``KL(p_original || p^(0))``: keeps Medusa head 0 aligned with the backbone's head.

    BRIDGE-Embed aligns its first Medusa head with the original model by self-distillation,
    ``KL(p_original,t^(0) || p_t^(0))``. Here ``t`` is the position the sparse vector is
    read from (the last real token), so no [B, T, V] tensor is built. The teacher side is
    detached. Zero when head 0 equals the original head (its start: W1 = 0, W2 = the head).

    Unlike the vector losses this one takes logits: ``loss(student [N, V], teacher [N, V])``.
    """

    def __call__(self, student: torch.Tensor, teacher: torch.Tensor | None = None, *,
                 step: int = 0) -> LossOutput:
        """Compute the mean KL over rows.

        Args:
            student: [N, V] head 0's logits.
            teacher: [N, V] the original head's logits (required; detached).
            step: unused.

        Returns:
            LossOutput with the mean KL (nats per document).
        """
        if teacher is None or teacher.shape != student.shape:
            raise TrainingError("self_distill needs teacher logits of the student's shape "
                                f"{tuple(student.shape)}; got "
                                f"{None if teacher is None else tuple(teacher.shape)}")
        loss = F.kl_div(F.log_softmax(student.float(), dim=-1),
                        F.log_softmax(teacher.detach().float(), dim=-1),
                        reduction="batchmean", log_target=True)
        return LossOutput(loss, {})
