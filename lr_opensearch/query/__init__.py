"""The query side: a query is a tokenizer call plus a table lookup, no model.

- ``encoder``: ``QueryEncoder`` (dense: mean of table rows; sparse: token counts).
- ``tokens``: the tokenizer with an exact per-word cache (the hot path).
- ``stopwords``: the optional sparse stopword / punctuation mask.

Imports numpy, tokenizers and safetensors only: never torch or transformers.
"""

from __future__ import annotations

from lr_opensearch.query.encoder import (
    EncodedQuery,
    QueryBatch,
    QueryEncoder,
    SparseRows,
    bag_mean,
)

__all__ = ["EncodedQuery", "QueryBatch", "QueryEncoder", "SparseRows", "bag_mean"]
