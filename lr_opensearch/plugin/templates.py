"""The legs' search bodies as templates for the plugin: the legs stay defined once, here in
Python, and the plugin fills in a query's inputs.

Each leg that searches with an input the plugin makes (the query vector, the token weights,
the text) is rendered by its own :class:`~lr_opensearch.legs.Leg` through the engine adapter
of the live cluster (so a version that needs ``ef_search`` in the knn clause gets it), with
sentinel inputs that :func:`leg_templates` then turns into markers:

* ``"@lr:size"`` / ``"@lr:k"``: the leg's ``size`` and knn ``k`` (the candidates);
* ``"@lr:vector"``: the dense query vector (float32 values);
* ``{"@lr:filter": {}}`` (:data:`FILTER_MARK`): the caller's filter clauses; in a list it
  stands for every clause (spliced in), elsewhere for one clause (one clause as is, several
  as ``{"bool": {"filter": [...]}}``: ``engine.clauses.one_filter``);
* a list element that holds ``"@lr:token"`` in a string: repeated once per sparse token
  (keys sorted, weights > 0), the marker replaced by the key and ``"@lr:weight"`` by the
  weight (``engine.clauses.rank_feature_clauses``);
* ``"@lr:text"``: the query text, cut where the adapter cuts it (``text_query_max_terms``
  terms: ``engine.clauses.text_query_cut``).

Every leg has a ``plain`` and a ``filtered`` body; a token-weight leg also ``empty`` and
``empty_filtered`` (no token left: the adapter's ``match_none``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from lr_opensearch import legs as leg_registry
from lr_opensearch.engine.clauses import TEXT_QUERY_MAX_TERMS
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import QUERY_TEXT, QUERY_VECTOR, TOKEN_WEIGHTS, LegContext
from lr_opensearch.legs.scores import inner_product_from_score

SIZE_MARK, K_MARK, VECTOR_MARK = "@lr:size", "@lr:k", "@lr:vector"
TOKEN_MARK, WEIGHT_MARK, TEXT_MARK = "@lr:token", "@lr:weight", "@lr:text"
FILTER_MARK: dict[str, Any] = {"@lr:filter": {}}
PLUGIN_INPUTS = (QUERY_VECTOR, TOKEN_WEIGHTS, QUERY_TEXT)  # what the plugin makes per query
# sentinels no real input takes (k and size are at most options.MAX_RESULT_WINDOW)
_SIZE, _K, _VALUE, _WEIGHT = 987_654_321, 987_654_322, 0.5, 1234.5


def _mark(node: Any, dim: int) -> Any:
    """``node`` with the sentinels replaced by markers."""
    if isinstance(node, Mapping):
        return {key: _mark(v, dim) for key, v in node.items()}
    if isinstance(node, list):
        if len(node) == dim and all(isinstance(v, float) and v == _VALUE for v in node):
            return VECTOR_MARK
        return [_mark_token(v, dim) if _holds(v, TOKEN_MARK) else _mark(v, dim) for v in node]
    if isinstance(node, int) and not isinstance(node, bool):
        return {_SIZE: SIZE_MARK, _K: K_MARK}.get(node, node)
    return node


def _mark_token(node: Any, dim: int) -> Any:
    """A clause of the sentinel token, its weight marked."""
    if isinstance(node, Mapping):
        return {key: _mark_token(v, dim) for key, v in node.items()}
    if isinstance(node, float) and node == _WEIGHT:
        return WEIGHT_MARK
    return _mark(node, dim)


def _holds(node: Any, text: str) -> bool:
    if isinstance(node, str):
        return text in node
    if isinstance(node, Mapping):
        return any(_holds(v, text) for v in node.values())
    if isinstance(node, list):
        return any(_holds(v, text) for v in node)
    return False


def _sentinel(kind: str, dim: int, empty: bool) -> Any:
    if kind == QUERY_VECTOR:
        return np.full(dim, _VALUE, dtype=np.float32)
    if kind == TOKEN_WEIGHTS:
        return {} if empty else {TOKEN_MARK: _WEIGHT}
    return TEXT_MARK


def leg_template(adapter: Any, name: str, dim: int) -> dict[str, Any]:
    """One leg's template record: its input, how its score reads, its bodies."""
    leg = leg_registry.get(name)
    if leg.input not in PLUGIN_INPUTS:
        raise ConfigError(f"leg {name!r} searches with {leg.input!r}, which the plugin does not "
                          f"make (it makes {', '.join(PLUGIN_INPUTS)})")
    variants = {"plain": (False, None), "filtered": (False, FILTER_MARK)}
    if leg.input == TOKEN_WEIGHTS:
        variants.update(empty=(True, None), empty_filtered=(True, FILTER_MARK))
    bodies = {}
    for variant, (empty, flt) in variants.items():
        query = leg.sub_query(adapter, _sentinel(leg.input, dim, empty),
                              LegContext(knn_depth=_K, filter=flt))
        body = adapter.body(query, size=_SIZE, source=False)
        bodies[variant] = _mark(body, dim)
    reads = "inner_product" if leg.score is inner_product_from_score else "engine"
    return {"input": leg.input, "score": reads, "linear_reads_score": leg.linear_reads_score,
            "bodies": bodies}


def leg_templates(adapter: Any, dim: int) -> dict[str, dict[str, Any]]:
    """Every registered leg the plugin can search, by name (sub-query order)."""
    return {name: leg_template(adapter, name, dim) for name in leg_registry.names()
            if leg_registry.get(name).input in PLUGIN_INPUTS}


TEMPLATE_LIMITS = {"text_query_max_terms": TEXT_QUERY_MAX_TERMS}
