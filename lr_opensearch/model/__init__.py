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
    "DocBatch": "batching",
    "DocEncoder": "doc_encoder",
    "OnnxDocEncoder": "onnx_encoder",
    "open_doc_encoder": "runtime",
    "Framing": "framing",
    "instruction_ids": "framing",
    "special_token_ids": "framing",
    "tokenize_texts": "framing",
    "naive_projection_max": "fused",
    "projection_max": "fused",
    "sparse_activation": "fused",
    "SparseHead": "heads",
    "ClsRetriever": "lightretriever",
    "DocOutput": "lightretriever",
    "LastTokenRetriever": "lightretriever",
    "LightRetrieverModel": "lightretriever",
    "MeanRetriever": "lightretriever",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
