"""The document side of lr-opensearch: the backbone wrapper and the document encoders.

Names are imported on first use (PEP 562), so that the ONNX Runtime encoder
(``onnx_encoder.OnnxDocEncoder``, ``runtime.open_doc_encoder``) imports no torch; the torch
names below import torch. The query side never imports this package.

- ``LightRetrieverModel``: THE document forward (``encode_documents``), the block-masked
  training-side query forward (``encode_query_dense``) and the query table (``token_table``).
- ``DocEncoder``: texts -> index vectors, from a bundle, on torch; ``OnnxDocEncoder`` the
  same on ONNX Runtime; ``open_doc_encoder`` chooses (``--runtime``).
- ``projection_max``: the fused vocabulary projection + max over positions.
- ``Framing`` / ``tokenize_texts`` / ``instruction_ids``: the one way sequences are framed.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "DocBatch": "lr_opensearch.model.batching",
    "DocEncoder": "lr_opensearch.model.doc_encoder",
    "DocSettings": "lr_opensearch.model.settings",
    "RetrieverSettings": "lr_opensearch.model.settings",
    "OnnxDocEncoder": "lr_opensearch.model.onnx_encoder",
    "open_doc_encoder": "lr_opensearch.model.runtime",
    "Framing": "lr_opensearch.model.framing",
    "instruction_ids": "lr_opensearch.model.framing",
    "special_token_ids": "lr_opensearch.model.framing",
    "tokenize_texts": "lr_opensearch.model.framing",
    "naive_projection_max": "lr_opensearch.model.fused",
    "projection_max": "lr_opensearch.model.fused",
    "sparse_activation": "lr_opensearch.model.fused",
    "SparseHead": "lr_opensearch.model.heads",
    "ClsRetriever": "lr_opensearch.model.lightretriever",
    "DocOutput": "lr_opensearch.model.lightretriever",
    "LastTokenRetriever": "lr_opensearch.model.lightretriever",
    "LightRetrieverModel": "lr_opensearch.model.lightretriever",
    "MeanRetriever": "lr_opensearch.model.lightretriever",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
