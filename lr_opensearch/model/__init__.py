"""The torch side of lr-opensearch: the backbone wrapper and the document encoder.

Importing this package imports torch; the query side never does.

- ``LightRetrieverModel``: THE document forward (``encode_documents``), the block-masked
  training-side query forward (``encode_query_dense``) and the query table (``token_table``).
- ``DocEncoder``: texts -> index vectors, from a bundle (used by ingest).
- ``projection_max``: the fused vocabulary projection + max over positions.
- ``Framing`` / ``tokenize_texts`` / ``instruction_ids``: the one way sequences are framed.
"""

from __future__ import annotations

from lr_opensearch.model.doc_encoder import DocBatch, DocEncoder, DocSettings
from lr_opensearch.model.framing import Framing, instruction_ids, special_token_ids, tokenize_texts
from lr_opensearch.model.fused import naive_projection_max, projection_max, sparse_activation
from lr_opensearch.model.heads import SparseHead
from lr_opensearch.model.lightretriever import (
    ClsRetriever,
    DocOutput,
    LastTokenRetriever,
    LightRetrieverModel,
    MeanRetriever,
)
from lr_opensearch.model.settings import RetrieverSettings

__all__ = [
    "ClsRetriever",
    "DocBatch",
    "DocEncoder",
    "DocOutput",
    "DocSettings",
    "Framing",
    "LastTokenRetriever",
    "LightRetrieverModel",
    "MeanRetriever",
    "RetrieverSettings",
    "SparseHead",
    "instruction_ids",
    "naive_projection_max",
    "projection_max",
    "sparse_activation",
    "special_token_ids",
    "tokenize_texts",
]
