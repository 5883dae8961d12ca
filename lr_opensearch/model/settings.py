"""``RetrieverSettings``: how a backbone becomes a ``LightRetrieverModel`` (one object where
``from_pretrained``, ``from_config`` and the constructor each listed the model's
hyper-parameters one by one); ``DocSettings``: what a document becomes, on torch or ONNX
Runtime. Imports no torch."""

from __future__ import annotations

from dataclasses import dataclass

from lr_opensearch.bundle.config import DEFAULT_SPARSE_TOP_K, BundleConfig
from lr_opensearch.options import POOLINGS, QUERY_NORMS, SPARSE_MODES, choice


@dataclass(frozen=True)
class RetrieverSettings:
    """How a backbone becomes a retriever; None: detected when the model is loaded.

    Attributes:
        kind: "encoder" (bidirectional) or "decoder" (causal); None: from the HF config.
        pooling: "cls" | "mean" | "last"; None: the directory's sentence-transformers
            setting, else "last" for decoders and "cls" for encoders.
        normalize: L2-normalise dense vectors (documents, and queries as ``query_norm``
            says); None (``from_pretrained``): the sentence-transformers setting.
        query_norm: with ``normalize``, where the light dense query is normalised: "rows"
            (each token's vector, then the plain mean) or "mean" (the plain mean of raw
            token vectors, then L2, as the reference: a row's norm acts as a learned
            token weight). See ``options.QUERY_NORMS``.
        sparse_head: "lm" | "mlm" | "tied"; None: the best head the model has.
        sparse_mode: "max" (LightRetriever) | "medusa_last" | "medusa_max" (BRIDGE-Embed's
            Medusa heads, see ``model.medusa``); ``options.SPARSE_MODES``.
        medusa_heads: N heads of the Medusa modes.
        soft_top_k_temperature: tau of the served ``Norm(SoftTopK(., k, tau))`` (Medusa modes).
    """

    kind: str | None = None
    pooling: str | None = None
    normalize: bool | None = False
    query_norm: str = "rows"
    sparse_head: str | None = None
    sparse_mode: str = "max"
    medusa_heads: int = 3
    soft_top_k_temperature: float = 0.05

    def __post_init__(self) -> None:
        if self.kind is not None:
            choice("backbone kind", self.kind, ("encoder", "decoder"))
        if self.pooling is not None:
            choice("pooling", self.pooling, POOLINGS)
        choice("query_norm", self.query_norm, QUERY_NORMS)
        choice("sparse_mode", self.sparse_mode, SPARSE_MODES)


@dataclass(frozen=True)
class DocSettings:
    """What a document becomes (a bundle's config says it: :meth:`of_bundle`), on either runtime (``DocEncoder``, ``OnnxDocEncoder``).

    Attributes:
        max_length: framed tokens per document at most.
        served_dim: leading dense dims kept (Matryoshka truncation); None: all.
        top_k: sparse terms kept per document.
        min_weight: sparse weights must be strictly above this (and above 0).
        document_prompt: text before every document (the bundle's ``document_prompt``,
            e5's "passage: "): framed as ``prefix + prompt + text + suffix``, pooled
            densely, kept out of the sparse max. Documents only: ``encode`` and
            ``encode_dense(..., documents=True)``; a query's prompt is part of its text.
    """

    max_length: int
    served_dim: int | None = None
    top_k: int = DEFAULT_SPARSE_TOP_K
    min_weight: float = 0.0
    document_prompt: str = ""

    @classmethod
    def of_bundle(cls, config: BundleConfig) -> DocSettings:
        """What the bundle's config says a document becomes."""
        return cls(config.max_length, config.served_dim, config.sparse_top_k,
                   config.sparse_min_weight, config.document_prompt)
