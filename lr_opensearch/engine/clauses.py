"""The pieces of a search body both engines share, and the limits the engines set on them:
filters, the dense vector as JSON, linear ``rank_feature`` clauses, the BM25 text's cut.

The limits are named constants with a test at the limit (tests/apps/test_real_bundle.py,
tests/indexing/test_ingest_failures.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from lr_opensearch.errors import ConfigError

# The engines refuse a query whose rewritten tree holds more than this many clauses:
# OpenSearch's indices.query.bool.max_clause_count (default 1,024, Lucene's
# IndexSearcher.maxClauseCount; dynamic since 2.16). tests/apps/test_real_bundle.py reads it
# from the node and runs queries of exactly that many clauses and one more.
MAX_CLAUSE_COUNT = 1024
# The engines refuse (HTTP 413) a request body larger than http.max_content_length, 100mb
# (104,857,600 bytes) unless set in the node's config, OpenSearch and Elasticsearch alike;
# the ingest's bulk requests stay well below it (indexing.config.DEFAULT_MAX_CHUNK_BYTES).
# tests/indexing/test_ingest_failures.py sends a body of exactly this size and one byte more
# to a node as the engine ships (default heap and settings).
HTTP_MAX_CONTENT_LENGTH = 100 * 1024 * 1024
# Terms of a query text the BM25 clause keeps: multi_match makes one clause per analysed
# term and field, and the sparse leg one per distinct token of the query's first 512
# (query.tokens.DEFAULT_MAX_TOKENS): the two together stay within MAX_CLAUSE_COUNT
TEXT_QUERY_MAX_TERMS = 256
# At least as many pieces as the standard analyser makes terms (so counting them bounds the
# clauses): each CJK ideograph or kana alone (the standard tokenizer emits one term per
# ideograph and hiragana), a run of letters and digits (a hyphen, a dot, an underscore
# ends it, where the analyser may join), any other symbol alone (emoji are terms)
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_TERM_PIECE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+|[^\w\s!-/:-@\[-`{{-~\u2000-\u206f\u3000-\u303f]")
# queries whose spec is keyed by the field they search ({"match": {"text": {...}}}): a
# boost goes inside the field's object
FIELD_KEYED_QUERIES = ("match", "knn", "neural", "neural_sparse", "term")

Filter = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


def text_query_cut(text: str, max_terms: int = TEXT_QUERY_MAX_TERMS) -> int:
    """Where to cut ``text`` so that the engine's analyser makes at most ``max_terms`` terms
    of it (``len(text)``: keep it whole). Counts ``_TERM_PIECE``s, never fewer than the
    terms, so a text of hyphenated words or an unspaced CJK run is cut as a spaced one."""
    for n, piece in enumerate(_TERM_PIECE.finditer(text)):
        if n == max_terms:  # the first piece over the limit
            return piece.start()
    return len(text)


def filter_clauses(filter: Filter) -> list[dict[str, Any]]:
    """A user's filter (one query clause or a list of clauses) as a list of clauses."""
    if filter is None:
        return []
    if isinstance(filter, Mapping):
        return [dict(filter)]
    if isinstance(filter, Sequence) and all(isinstance(f, Mapping) for f in filter):
        return [dict(f) for f in filter]
    raise ConfigError(
        f"filter must be a query clause (dict) or a list of clauses, got {type(filter).__name__}"
    )


def one_filter(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"bool": {"filter": clauses}}


def vector_list(vector: np.ndarray | Sequence[float]) -> list[float]:
    """A float32 vector as JSON-ready floats. vector: [d]."""
    arr = np.asarray(vector, dtype=np.float32)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise ConfigError(f"a dense query vector must be 1-d and finite, got shape {arr.shape}")
    return arr.tolist()


def rank_feature_clauses(sparse: Mapping[str, float], field: str) -> list[dict[str, Any]]:
    """One linear ``rank_feature`` clause per key, boost = query count (sorted by key)."""
    clauses = []
    for key in sorted(sparse):
        count = float(sparse[key])
        if count <= 0.0:
            continue
        clauses.append({"rank_feature": {"field": f"{field}.{key}", "boost": count, "linear": {}}})
    return clauses


def boosted_clauses(query: Mapping[str, Any], boost: float,
                    filter: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
    """``query`` (one leg's sub-query) as ``should`` clauses of one ``bool`` that score
    ``boost`` x its score: a pure disjunction (the sparse leg's ``bool.should``) is
    flattened, and the ``bool`` a leg wraps around itself to apply ``filter`` is dropped
    (the one query applies it once), so the engine sees a flat disjunction it can skip
    through (block-max WAND). Anything else keeps its form with the boost multiplied in."""
    ((name, spec),) = query.items()
    if name == "match_none":
        return []
    if name == "bool":
        return _boosted_bool(dict(spec), boost, [dict(f) for f in filter])
    spec = dict(spec)
    if name in FIELD_KEYED_QUERIES and len(spec) == 1 and "field" not in spec:
        ((fld, inner),) = spec.items()
        inner = dict(inner) if isinstance(inner, Mapping) else {"query": inner}
        inner["boost"] = float(inner.get("boost", 1.0)) * boost
        return [{name: {fld: inner}}]
    spec["boost"] = float(spec.get("boost", 1.0)) * boost
    return [{name: spec}]

def _boosted_bool(spec: dict[str, Any], boost: float,
                  filter: list[dict[str, Any]]) -> list[dict[str, Any]]:
    whole = [{"bool": {**spec, "boost": float(spec.get("boost", 1.0)) * boost}}]
    inner = float(spec.pop("boost", 1.0)) * boost
    own = spec.pop("filter", [])
    own = [own] if isinstance(own, Mapping) else list(own)
    must, should = list(spec.pop("must", [])), list(spec.pop("should", []))
    msm = spec.pop("minimum_should_match", None)
    if spec or (own and own != filter):
        return whole
    if len(must) == 1 and not should:
        return boosted_clauses(must[0], inner, filter)
    if should and not must and msm in (None, 1, "1"):
        return [c for q in should for c in boosted_clauses(q, inner, filter)]
    return whole
