"""XTR's in-batch token alignment loss (Lee et al., 2023, "Rethinking the Role of Token
Retrieval in Multi-Vector Retrieval"), the retrieval objective of UR²N.

Training imitates retrieval over the mini-batch: each query token retrieves its top-k
document tokens among *all* the batch's document tokens; a document is scored only by the
tokens it got retrieved::

    A[i, j]   = 1 if document token j is in query token i's top-k over the batch, else 0
    f(q, d)   = 1/Z * sum_i max_{j in d, A[i, j] = 1} <q_i, d_j>
    Z         = |{i : A[i, j] = 1 for some token j of d}|  (query tokens that retrieved from d)

with ``f = 0`` when no query token retrieved anything from ``d`` (Z = 0). The max runs
over the aligned tokens only. The loss is the cross-entropy of ``f / temperature`` over the
batch's documents (in-batch and hard negatives), the positive being query ``b``'s first
document. The alignment is a selection: gradients flow through the aligned similarities.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from lr_opensearch.errors import ConfigError, TrainingError
from trainer.losses.base import LossOutput, positive_targets


def xtr_alignment_scores(query: torch.Tensor, docs: torch.Tensor, query_mask: torch.Tensor,
                         doc_mask: torch.Tensor, top_k: int) -> torch.Tensor:
    """XTR in-batch scores ``f(q_b, d_n)``.

    Args:
        query: [B, Tq, D] query token embeddings.
        docs: [N, Td, D] document token embeddings.
        query_mask: [B, Tq] bool, real query tokens.
        doc_mask: [N, Td] bool, real document tokens.
        top_k: document tokens each query token retrieves from the whole batch
            (capped at the batch's number of real document tokens).

    Returns:
        [B, N] float32 scores.
    """
    b, tq, _ = query.shape
    n, td, _ = docs.shape
    sims = torch.einsum("bqd,nsd->bqns", query.float(), docs.float())  # [B, Tq, N, Td]
    valid = doc_mask.bool()[None, None]
    flat = sims.masked_fill(~valid, float("-inf")).reshape(b, tq, n * td)
    k = min(int(top_k), int(doc_mask.sum()))
    aligned = torch.zeros_like(flat, dtype=torch.bool)
    if k > 0:
        aligned.scatter_(-1, flat.topk(k, dim=-1).indices, True)
    aligned = aligned.reshape(b, tq, n, td) & valid & query_mask.bool()[:, :, None, None]
    best = sims.masked_fill(~aligned, float("-inf")).amax(dim=-1)  # [B, Tq, N]
    hit = aligned.any(dim=-1)
    total = torch.where(hit, best, torch.zeros_like(best)).sum(dim=1)  # [B, N]
    z = hit.sum(dim=1).clamp(min=1)
    return total / z


class XTRLoss:
    """Cross-entropy over the batch's documents of XTR's in-batch alignment scores.

    Unlike the single-vector losses, it takes token embeddings and their masks; the call
    otherwise has the package's signature (``teacher`` and ``step`` are accepted, unused).

    Args:
        temperature: softmax temperature (> 0).
        top_k: document tokens each query token retrieves from the batch (XTR's k_train).
    """

    def __init__(self, temperature: float = 0.05, top_k: int = 32):
        if not temperature > 0 or top_k < 1:
            raise ConfigError(f"xtr loss needs temperature > 0 and top_k >= 1, got {temperature}, {top_k}")
        self.temperature = float(temperature)
        self.top_k = int(top_k)

    def __call__(self, query: torch.Tensor, docs: torch.Tensor, *,
                 query_mask: torch.Tensor | None = None, doc_mask: torch.Tensor | None = None,
                 teacher: torch.Tensor | None = None, step: int = 0) -> LossOutput:
        """Compute the loss.

        Args:
            query: [B, Tq, D] query token embeddings.
            docs: [B * G, Td, D] document token embeddings, G per query, positive first.
            query_mask / doc_mask: [B, Tq] / [B * G, Td] bool (None = every token is real).

        Returns:
            LossOutput with the mean cross-entropy and ``accuracy`` (share of queries whose
            positive scores highest).
        """
        if query.dim() != 3 or docs.dim() != 3 or docs.shape[0] % max(1, query.shape[0]):
            raise TrainingError(f"xtr loss expects query [B, Tq, D] and docs [B*G, Td, D]; got "
                                f"{tuple(query.shape)} and {tuple(docs.shape)}")
        qm = query_mask if query_mask is not None else torch.ones(query.shape[:2], dtype=torch.bool)
        dm = doc_mask if doc_mask is not None else torch.ones(docs.shape[:2], dtype=torch.bool)
        scores = xtr_alignment_scores(query, docs, qm.to(query.device), dm.to(docs.device), self.top_k)
        group = docs.shape[0] // query.shape[0]
        target = positive_targets(query.shape[0], group, scores.device)
        loss = F.cross_entropy(scores / self.temperature, target)
        with torch.no_grad():
            acc = (scores.argmax(dim=-1) == target).float().mean().item()
        return LossOutput(loss, {"accuracy": acc})
