"""The text-only requests of an index whose query models run in the cluster (``lr models
deploy``, :mod:`lr_opensearch.cluster`): one sub-query per leg carrying only the text, and
the mustache source of the text-only calibrated one query stored as a search template.

From the index's in-cluster record (``_meta.lightretriever.cluster``), :func:`text_sub_queries`
builds one sub-query per hybrid leg, each carrying only the text:

* LR dense: ``{"neural": {"lr_dense": {"query_text": T, "model_id": D, "k": K}}}``
* LR sparse: ``{"neural_sparse": {"lr_sparse": {"query_text": T, "model_id": S}}}``
* BM25: the same ``multi_match`` the client path sends
(each leg's ``in_cluster``, :mod:`lr_opensearch.legs.builtin`).

These replace the client path's ``knn`` / ``rank_feature`` sub-queries one for one (same
fields, same ``k``, same filters), so a ``hybrid`` of them fused by the same normalization
pipeline ranks as the client path does. ``model_ids=False`` leaves the ids out: the index's
pipeline (``neural_query_enricher``) then supplies them, which is what a curl user sends.

They are OpenSearch bodies, so they live in the engine room: the calibration
(:func:`lr_opensearch.search.calibration.record_calibration`) renders the stored template
again whenever it writes new scales; the cluster room deploys the models they name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from lr_opensearch import legs
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import LegContext

CLUSTER_KEY = "cluster"  # _meta.lightretriever.cluster: the in-cluster record


def text_sub_queries(record: Mapping[str, Any], text: str, names: Sequence[str],
                     ctx: LegContext, *, model_ids: bool = True,
                     adapter: OpenSearchAdapter | None = None) -> list[dict[str, Any]]:
    """One text-only sub-query per leg, in ``names`` order, each built as the leg says
    (``Leg.in_cluster``) with the same :class:`~lr_opensearch.legs.LegContext` the client
    path builds its sub-queries with (knn ``k``, filter, ``ef_search``, BM25 fields).

    Args:
        record: the index's ``_meta.lightretriever.cluster``.
        text: the query text (sent as it is, inside JSON).
        names: the hybrid legs, as the client path orders them.
        ctx: the legs' context.
        model_ids: name the models (False: the index's enricher pipeline supplies them).
        adapter: the adapter whose fields the sub-queries use (default: the index layout's).
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"a query must be a non-empty string, got {text!r}")
    adapter = adapter if adapter is not None else OpenSearchAdapter(None)
    out: list[dict[str, Any]] = []
    for name in names:
        leg = legs.get(name)
        if leg.in_cluster is None:
            raise ConfigError(f"leg {name!r} cannot be encoded in the cluster; search it with "
                              "the client's encoding")
        model = record["models"].get(name) if model_ids else None
        out.append(leg.in_cluster(adapter, text, ctx, model))
    return out


TEMPLATE_PARAM = "query_text"  # the one parameter of the stored search template
_SLOT = "\u0000lr-query-text\u0000"  # where the text goes, replaced by the mustache tag


def template_id(index: str) -> str:
    """The stored search template of ``index``'s text-only calibrated query."""
    return f"lr-calibrated-{index}"


def calibrated_template(record: Mapping[str, Any], boosts: Mapping[str, float], *,
                        knn_depth: int, size: int = 10,
                        text_fields: tuple[str, ...] | None = None) -> str:
    """The mustache source of the text-only one query (``fusion="calibrated"``): the
    record's legs as ``neural`` / ``neural_sparse`` / ``match`` clauses boosted by
    ``boosts`` (weight / the leg's calibrated scale), the text the one parameter
    ``query_text`` (JSON-escaped by the engine's mustache), ``size`` hits (a ``size`` parameter
    overrides it). ``GET /<index>/_search/template {"id": ..., "params": {"query_text":
    ...}}`` runs it."""
    adapter = OpenSearchAdapter(None)
    subs = text_sub_queries(record, _SLOT, record["legs"],
                            LegContext(knn_depth=knn_depth, text_fields=text_fields),
                            adapter=adapter)
    body = adapter.calibrated_body(subs, [boosts[name] for name in record["legs"]], size=size,
                                   source={"excludes": [record["dense_field"],
                                                        record["sparse_field"]]})
    text = json.dumps(body)
    slot = json.dumps(_SLOT)
    if text.count(slot) != len(record["legs"]):
        raise ConfigError(f"the template's query text slot appears {text.count(slot)} times "
                          f"for {len(record['legs'])} legs")
    text = text.replace(f'"size": {int(size)}',
                        f'"size": {{{{#size}}}}{{{{size}}}}{{{{/size}}}}{{{{^size}}}}{int(size)}'
                        '{{/size}}', 1)
    # a mustache script of content type JSON escapes {{x}} for a JSON string (quotes,
    # backslashes, control characters); toJson would write a string unquoted
    return text.replace(slot, f'"{{{{{TEMPLATE_PARAM}}}}}"')
