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
from lr_opensearch.cluster import mlapi
from lr_opensearch.engine.adapter import Filter
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.legs import LegContext

CLUSTER_KEY = "cluster"  # _meta.lightretriever.cluster


def cluster_meta(client: Any, index: str) -> dict[str, Any]:
    """The index's in-cluster record; a one-line EngineError when it has none."""
    mapping: dict[str, Any] = mlapi.request(client, "GET", f"/{index}/_mapping",
                                            what=f"mapping of {index}")
    body: dict[str, Any] = next(iter(mapping.values()), {})
    meta = body.get("mappings", {}).get("_meta", {})
    record = meta.get("lightretriever", {}).get(CLUSTER_KEY)
    if not record:
        mlapi.require_ml(client)  # without the plugin, deploying would fail too: say that
        raise EngineError(f"index {index!r} has no in-cluster query models; run `lr models deploy "
                          f"--bundle BUNDLE --index {index}` first, or search without --in-cluster")
    return dict(record)


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


def text_sub_queries(record: Mapping[str, Any], text: str, names: Sequence[str], *, k: int,
                     filter: Filter = None, ef_search: int | None = None,
                     model_ids: bool = True,
                     adapter: OpenSearchAdapter | None = None) -> list[dict[str, Any]]:
    """One text-only sub-query per leg, in ``names`` order, each built as the leg says
    (``Leg.in_cluster``).

    Args:
        record: the index's ``_meta.lightretriever.cluster``.
        text: the query text (sent as it is, inside JSON).
        names: the hybrid legs, as the client path orders them.
        k: hits of knn legs (the client path's knn ``k``).
        filter: a query clause (or list) applied to every leg.
        ef_search: HNSW ``ef_search`` of knn legs.
        model_ids: name the models (False: the index's enricher pipeline supplies them).
        adapter: the adapter whose fields the sub-queries use (default: the index layout's).
    """
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"a query must be a non-empty string, got {text!r}")
    adapter = adapter if adapter is not None else OpenSearchAdapter(None)
    ctx = LegContext(k=int(k), filter=filter, ef_search=ef_search)
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
    legs = record["legs"]
    subs = text_sub_queries(record, text, legs, k=max(candidates, size), filter=filter,
                            model_ids=model_ids)
    query: dict[str, Any] = {"hybrid": {"queries": subs}}
    if candidates > size:
        query["hybrid"]["pagination_depth"] = int(candidates)
    return {"size": int(size), "query": query,
            "_source": {"excludes": [record["dense_field"], record["sparse_field"]]}}
