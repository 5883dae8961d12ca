"""Text-only LightRetriever requests: the cluster encodes the query (after ``lr models deploy``).

The index's ``_meta.lightretriever.cluster`` (written by :func:`lr_opensearch.cluster.deploy.
deploy_bundle`) names the two deployed models and the search pipeline. From it,
:func:`text_sub_queries` builds one sub-query per hybrid leg, each carrying only the text:

* LR dense: ``{"neural": {"lr_dense": {"query_text": T, "model_id": D, "k": K}}}``
* LR sparse: ``{"neural_sparse": {"lr_sparse": {"query_text": T, "model_id": S}}}``
* BM25: the same ``multi_match`` the client path sends
(each leg's ``in_cluster``, :mod:`lr_opensearch.legs.builtin`).

These replace the client path's ``knn`` / ``rank_feature`` sub-queries one for one (same
fields, same ``k``, same filters), so a ``hybrid`` of them fused by the same normalization
pipeline ranks as the client path does. ``model_ids=False`` leaves the ids out: the index's
pipeline (``neural_query_enricher``) then supplies them, which is what a curl user sends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lr_opensearch import legs
from lr_opensearch.engine import mlapi
from lr_opensearch.engine.adapter import EngineAdapter
from lr_opensearch.engine.clauses import Filter
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.engine.seismic import SPARSE_VECTOR
from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.legs import LegContext, fusion_config
from lr_opensearch.search.request import knn_depth as knn_depth_of

CLUSTER_KEY = "cluster"  # _meta.lightretriever.cluster


def cluster_meta(adapter: EngineAdapter, index: str,
                 meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The index's in-cluster record, read from its ``_meta.lightretriever`` through the
    adapter (``meta``: that block when the caller has read it already); a one-line
    EngineError when it has none."""
    if meta is None:
        meta = adapter.index_meta(index)
    record = meta.get(CLUSTER_KEY)
    if not record:
        mlapi.require_ml(adapter.client)  # without the plugin, deploying would fail too: say that
        raise EngineError(f"index {index!r} has no in-cluster query models; run `lr models deploy "
                          f"--bundle BUNDLE --index {index}` first, or search without --in-cluster")
    return dict(record)


def serving_record(adapter: EngineAdapter, index: str,
                   meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What a text-only search of ``index`` needs: its in-cluster record (from ``meta``, its
    ``_meta.lightretriever``, when already read), every model of it served, and an index
    whose sparse field the cluster's sparse model writes (not the ``sparse_vector`` layout,
    keyed by token id; the adapter knows the layout once ``check_bundle`` has read it)."""
    if not isinstance(adapter, OpenSearchAdapter):
        raise ConfigError(f"encode='cluster' needs OpenSearch with ml-commons; this cluster is "
                          f"{adapter.engine} (docs/IN_CLUSTER.md says what Elasticsearch offers)")
    record = cluster_meta(adapter, index, meta)
    check_serving(adapter.client, record, index)
    if adapter.sparse_layout == SPARSE_VECTOR:
        raise ConfigError(f"index {index!r} lays out its sparse field as {SPARSE_VECTOR} (token "
                          "ids), which the in-cluster query models do not write; search it "
                          "with encode='client'")
    return record


def check_serving(client: Any, record: Mapping[str, Any], index: str) -> None:
    """Raise a one-line EngineError unless every query model of ``record`` is deployed."""
    for leg, model_id in record["models"].items():
        try:
            state = mlapi.state_of(client, model_id)
        except EngineError as exc:
            raise EngineError(f"the query model {model_id} of leg {leg} of index {index!r} is "
                              f"gone ({exc}); run `lr models deploy --bundle BUNDLE --index "
                              f"{index}`") from None
        if state != mlapi.DEPLOYED:
            raise EngineError(f"the query model {model_id} of leg {leg} of index {index!r} is "
                              f"{state} (undeployed, failed, or not yet redeployed after a node "
                              f"restart); run `lr models deploy --bundle BUNDLE --index {index}` "
                              "again")


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


def text_hybrid_body(record: Mapping[str, Any], text: str, *, size: int = 10,
                     candidates: int = 100, filter: Filter = None,
                     model_ids: bool = False) -> dict[str, Any]:
    """The whole text-only ``_search`` body for the index's default pipeline (what any
    client sends: ``GET /<index>/_search`` with this body, or with ``?search_pipeline=``
    the record's pipeline when it is not the index default)."""
    adapter = OpenSearchAdapter(None)
    subs = text_sub_queries(record, text, record["legs"],
                            LegContext(knn_depth=knn_depth_of(candidates, size), filter=filter),
                            model_ids=model_ids, adapter=adapter)
    config = fusion_config(dict(zip(record["legs"], record["weights"], strict=True)))
    return adapter.hybrid_body(subs, config, size=size, per_leg=candidates, inline_pipeline=False,
                               source={"excludes": [record["dense_field"],
                                                    record["sparse_field"]]})


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
    import json

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
