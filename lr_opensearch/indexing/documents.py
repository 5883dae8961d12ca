"""From a corpus record and its encoder output to the ``_source`` the index stores.

Fields (see docs/ARCHITECTURE.md, index layout): ``lr_dense`` (served-dim float list),
``lr_sparse`` (token -> weight: the encoded token key on the ``rank_features`` layout, the
token id on the ``sparse_vector`` layout), ``title``, ``text`` and
``metadata`` (only when the record has extra keys).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.engine.adapter import DENSE_FIELD, METADATA_FIELD, SPARSE_FIELD, TEXT_FIELDS
from lr_opensearch.engine.seismic import RANK_FEATURES
from lr_opensearch.errors import BundleError
from lr_opensearch.options import SPARSE_LAYOUTS, choice

from .reader import Record

# Lucene's FeatureField accepts only positive *normal* floats; smaller weights cannot be
# represented (and would contribute nothing to a score anyway).
MIN_FEATURE_VALUE = float(np.finfo(np.float32).tiny)


class SparseKeys:
    """token id -> the sparse field's key, cached: ``encode_key(tokenizer.id_to_token(id))``
    on the ``rank_features`` layout, the id itself on ``sparse_vector``
    (:mod:`lr_opensearch.engine.seismic`).

    Args:
        tokenizer: the bundle's ``tokenizers.Tokenizer``.
        layout: the index's sparse layout (its ``_meta`` records it).
    """

    def __init__(self, tokenizer: Any, layout: str = RANK_FEATURES) -> None:
        self._tokenizer = tokenizer
        self._cache: dict[int, str] = {}
        self.layout = choice("sparse layout", layout, SPARSE_LAYOUTS)

    def key(self, token_id: int) -> str:
        key = self._cache.get(token_id)
        if key is None:
            token = self._tokenizer.id_to_token(int(token_id))
            if token is None:
                raise BundleError(f"the doc encoder produced token id {token_id}, which the "
                                  "bundle's tokenizer does not know: the bundle is inconsistent")
            key = encode_key(token) if self.layout == RANK_FEATURES else str(int(token_id))
            self._cache[token_id] = key
        return key


def sparse_features(weights: dict[int, float], keys: SparseKeys) -> dict[str, float]:
    """{key: weight} keeping only finite weights Lucene can store (positive, normal floats)."""
    out = {}
    for token_id, weight in weights.items():
        w = float(weight)
        if math.isfinite(w) and w >= MIN_FEATURE_VALUE:
            out[keys.key(token_id)] = w
    return out


def build_source(record: Record, dense: np.ndarray, sparse: dict[int, float],
                 keys: SparseKeys) -> dict[str, Any]:
    """The ``_source`` of one document.

    Args:
        record: the corpus record.
        dense: [served_dim] float32, finite (checked by the caller).
        sparse: {token id: weight} from the doc encoder (top-k / min-weight already applied).
        keys: the key cache of the bundle.
    """
    source: dict[str, Any] = {
        TEXT_FIELDS[0]: record.title,
        TEXT_FIELDS[1]: record.text,
        DENSE_FIELD: dense.astype(np.float32).tolist(),
        SPARSE_FIELD: sparse_features(sparse, keys),
    }
    if record.metadata:
        source[METADATA_FIELD] = record.metadata
    return source
