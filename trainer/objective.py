"""The training objective: the configured loss terms over one batch's representations.

Terms (each weighted by ``LossSettings``; weight 0 = off):

- ``dense``: contrastive, LightRetriever dense query (mean of per-token encodings) vs
  dense documents; Matryoshka-averaged when ``matryoshka_dims`` is set.
- ``sparse``: contrastive, token-count query vs sparse documents, wrapped by the FLOPs
  regulariser on the documents (quadratic warm-up).
- ``symmetric``: contrastive, full-model query encoding vs dense documents.
- ``kl``: KL alignment of the LightRetriever dense scores to the symmetric ones (teacher).
- ``s_matryoshka`` (BRIDGE-Embed): contrastive on Norm(SoftTopK(doc sparse, k, tau)) for
  every configured k, plus its L1 term (Medusa sparse modes).
- ``self_distill`` (BRIDGE-Embed): KL(original head || Medusa head 0) at the last position.
- ``rrf`` (BRIDGE-Embed): the RRF-shaped hinge over the sparse and the dense in-batch
  scores (sparse scores: the soft top-k at the largest k in Medusa modes, else counts . docs).

Dense scores are cosine similarities when the model L2-normalises its dense vectors
(ranking by cosine equals ranking by the served inner product, since the documents are
normalised and a query's scale does not change its ranking).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import torch
import torch.distributed as dist

from lr_opensearch.errors import ConfigError
from trainer.config import LossSettings
from trainer.losses import LossOutput, build_loss
from trainer.losses.base import group_size, similarity


@dataclass
class Representations:
    """What the model produced for one batch.

    Attributes:
        query_dense: [B, H] LightRetriever dense queries.
        query_counts: [B, V] token counts.
        query_symmetric: [B, H] full-model query encodings, or None.
        doc_dense: [B*G, H].
        doc_sparse: [B*G, V].
        doc_head_logits: [B*G, V] Medusa head 0's last-position logits (Medusa modes), or None.
        doc_base_logits: [B*G, V] the original head's logits there, or None.
    """

    query_dense: torch.Tensor
    query_counts: torch.Tensor
    query_symmetric: torch.Tensor | None
    doc_dense: torch.Tensor
    doc_sparse: torch.Tensor
    doc_head_logits: torch.Tensor | None = None
    doc_base_logits: torch.Tensor | None = None


def sparse_excluded(tokenizer: Any, vocab_size: int) -> list[int]:
    """Ids no sparse document term may take, as ingest (``DocEncoder``) drops them: the
    tokenizer's special tokens and the model's vocabulary beyond the tokenizer's."""
    from lr_opensearch.model import special_token_ids

    limit = int(tokenizer.get_vocab_size(with_added_tokens=True))
    return sorted({*special_token_ids(tokenizer), *range(limit, vocab_size)})


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
        excluded: token ids the sparse soft top-k never keeps (special tokens and padded
            vocabulary: what ingest drops).
        soft_top_k_temperature: tau of SoftTopK (the model's; the bundle records it).
    """

    def __init__(self, settings: LossSettings, normalize: bool, *, excluded: Sequence[int] = (),
                 soft_top_k_temperature: float = 0.05):
        self.settings = settings
        self.normalize = normalize
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
        self.s_matryoshka = build_loss(
            "s_matryoshka", sizes=settings.s_matryoshka_sizes,
            size_weights=settings.s_matryoshka_size_weights, tau=soft_top_k_temperature,
            temperature=settings.s_matryoshka_temperature, l1=settings.s_matryoshka_l1,
            excluded=excluded)
        self.self_distill = build_loss("self_distill")
        self.rrf = build_loss("rrf_hybrid", temperature=settings.rrf_temperature,
                              rank_constant=settings.rrf_constant, margin=settings.rrf_margin)

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
        terms.extend(self._bridge_terms(reps, step))
        total = reps.doc_dense.new_zeros((), dtype=torch.float32)
        logs: dict[str, float] = {}
        for name, weight, out in terms:
            total = total + weight * out.loss
            logs[name] = float(out.loss.detach())
            logs.update({f"{name}/{k}": v for k, v in out.logs.items()})
        logs["loss"] = float(total.detach())
        return total * scale if scale != 1 else total, logs

    def _bridge_terms(self, reps: Representations, step: int) -> list[tuple[str, float, LossOutput]]:
        """The BRIDGE-Embed terms with a weight > 0 (none by default)."""
        s = self.settings
        medusa = reps.doc_head_logits is not None
        terms: list[tuple[str, float, LossOutput]] = []
        if s.s_matryoshka_weight > 0:
            terms.append(("s_matryoshka", s.s_matryoshka_weight,
                          self.s_matryoshka(reps.query_counts, reps.doc_sparse, step=step)))
        if s.self_distill_weight > 0 and medusa:
            terms.append(("self_distill", s.self_distill_weight,
                          self.self_distill(reps.doc_head_logits, reps.doc_base_logits, step=step)))
        if s.rrf_weight > 0:
            group = group_size(reps.query_dense, reps.doc_dense)
            sparse = (self.s_matryoshka.scores(reps.query_counts, reps.doc_sparse) if medusa
                      else similarity(reps.query_counts, reps.doc_sparse, normalize=False))
            dense = similarity(reps.query_dense, reps.doc_dense, normalize=self.normalize)
            terms.append(("rrf", s.rrf_weight, self.rrf(sparse, dense, group=group, step=step)))
        return terms
