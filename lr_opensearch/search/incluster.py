"""Text-only LightRetriever requests: the cluster encodes the query (after ``lr models deploy``).

The index's ``_meta.lightretriever.cluster`` (written by :func:`lr_opensearch.cluster.deploy.
deploy_bundle`) names the two deployed models and the search pipeline: :func:`cluster_meta`
reads it, :func:`serving_record` / :func:`check_serving` say whether its models are served,
:func:`text_hybrid_body` is the whole text-only hybrid ``_search`` body a curl user sends.
The sub-queries themselves and the stored template's source are the engine room's
(:mod:`lr_opensearch.engine.text_queries`, whose :func:`text_sub_queries` is re-exported
here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lr_opensearch.engine import mlapi
from lr_opensearch.engine.adapter import EngineAdapter
from lr_opensearch.engine.clauses import Filter
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.engine.seismic import SPARSE_VECTOR
from lr_opensearch.engine.text_queries import CLUSTER_KEY, text_sub_queries
from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.legs import LegContext, fusion_config
from lr_opensearch.options import DEFAULT_CANDIDATES
from lr_opensearch.search.request import knn_depth as knn_depth_of


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


def text_hybrid_body(record: Mapping[str, Any], text: str, *, size: int = 10,
                     candidates: int = DEFAULT_CANDIDATES, filter: Filter = None,
                     model_ids: bool = False) -> dict[str, Any]:
    """The whole text-only ``_search`` body for the index's default pipeline (what any
    client sends: ``GET /<index>/_search`` with this body, or with ``?search_pipeline=``
    the record's pipeline when it is not the index default), with the candidates per leg
    ``lr search --in-cluster`` asks for by default."""
    adapter = OpenSearchAdapter(None)
    subs = text_sub_queries(record, text, record["legs"],
                            LegContext(knn_depth=knn_depth_of(candidates, size), filter=filter),
                            model_ids=model_ids, adapter=adapter)
    config = fusion_config(dict(zip(record["legs"], record["weights"], strict=True)))
    return adapter.hybrid_body(subs, config, size=size, per_leg=candidates, inline_pipeline=False,
                               source={"excludes": [record["dense_field"],
                                                    record["sparse_field"]]})
