"""OpenSearch request bodies and transport for LightRetriever search (the engine adapter).

Query DSL (docs/ARCHITECTURE.md, "The query path"):

* dense: ``{"knn": {"lr_dense": {"vector": [...], "k": K, "filter": F,
  "method_parameters": {"ef_search": E}}}}`` - the filter inside ``knn`` is OpenSearch's
  efficient (pre-)filtering, so K hits survive the filter.
* sparse: ``{"bool": {"should": [{"rank_feature": {"field": "lr_sparse.<key>",
  "boost": count, "linear": {}}}, ...], "minimum_should_match": 1, "filter": F}}`` -
  the score is the sparse dot product ``sum(count * doc_weight)``.
* sparse on the ``sparse_vector`` layout (:mod:`lr_opensearch.engine.seismic`):
  ``{"neural_sparse": {"lr_sparse": {"query_tokens": {"<token id>": w}, "method_parameters":
  {"k": K, "top_n": N, "heap_factor": H}}}}`` (in a ``bool`` with the filter), on the
  companion index.
* hybrid (server side): ``{"hybrid": {"queries": [dense, sparse]}}`` with the
  ``normalization-processor`` pipeline rendered by :mod:`lr_opensearch.engine.templates` inline in
  the body (``_msearch`` has no ``search_pipeline`` parameter).

An :class:`Elasticsearch adapter <lr_opensearch.engine.elasticsearch.ElasticsearchAdapter>` offers the same
methods for Elasticsearch.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from opensearchpy.exceptions import OpenSearchException

from lr_opensearch import legs
from lr_opensearch.engine.adapter import DENSE_FIELD, SPARSE_FIELD, EngineAdapter, one_index_name
from lr_opensearch.engine.clauses import (
    Filter,
    filter_clauses,
    one_filter,
    rank_feature_clauses,
    vector_list,
)
from lr_opensearch.engine.meta import meta_of
from lr_opensearch.engine.results import EngineResult, refusal
from lr_opensearch.engine.seismic import (
    COMPANION_FORMAT,
    COMPANION_SUFFIX,
    LAYOUT_META,
    RANK_FEATURES,
    SPARSE_VECTOR,
    SeismicIndexParams,
    SeismicSearch,
    apply_layout,
    companion_body,
    companion_name,
    is_seismic_query,
    layout_of,
    seismic_query,
    token_ids,
)
from lr_opensearch.engine.templates import META_KEY
from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.legs import TOKEN_WEIGHTS, FusionConfig
from lr_opensearch.options import CLIENT_FUSION_MIN_DOCS, HYBRID_SKIPS_FROM, WEIGHTED_RRF_FROM

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

def pipeline_name(config: FusionConfig, prefix: str = "lr-hybrid") -> str:
    """A deterministic search-pipeline id per fusion settings, e.g.
    ``lr-hybrid-min_max-arithmetic_mean-4000-2000-4000`` (``prefix`` first)."""
    tag = "-".join(str(int(round(w * 10_000))) for w in config.leg_weights)
    if config.combination == "rrf":
        return f"{prefix}-rrf-{config.rank_constant}-{tag}"
    return f"{prefix}-{config.normalization}-{config.combination}-{tag}"


class OpenSearchAdapter(EngineAdapter):
    """Builds OpenSearch bodies and runs them through ``_msearch``.

    Args:
        client: an ``opensearchpy.OpenSearch`` (see :func:`lr_opensearch.engine.client.make_client`).
        dense_field / sparse_field: the index's LightRetriever fields.
    """

    engine = "opensearch"
    transport_errors = (OpenSearchException,)

    def __init__(
        self, client: Any, *, dense_field: str = DENSE_FIELD, sparse_field: str = SPARSE_FIELD
    ):
        super().__init__(client, dense_field=dense_field, sparse_field=sparse_field)
        self._capabilities: Any = None
        self._pipelines: dict[str, dict[str, Any]] = {}
        self.sparse_layout = RANK_FEATURES  # the index's, read by check_bundle
        self._token_ids: dict[str, str] = {}  # key -> token id, for the sparse_vector layout
        self._sparse_home: tuple[str, str] | None = None  # (index, its companion)

    # ---- query clauses -------------------------------------------------------------
    def dense_query(
        self, vector: np.ndarray, *, knn_depth: int, filter: Filter = None,
        ef_search: int | None = None
    ) -> dict[str, Any]:
        """``knn`` clause with efficient filtering, ``knn_depth`` neighbours (the engine's
        ``k``). vector: [served_dim]."""
        knn: dict[str, Any] = {"vector": vector_list(vector), "k": int(knn_depth)}
        flt = one_filter(filter_clauses(filter))
        if flt is not None:
            knn["filter"] = flt
        ef_search = ef_search if ef_search is not None else self._knn_ef_search()
        if ef_search is not None:
            knn["method_parameters"] = {"ef_search": int(ef_search)}
        return {"knn": {self.dense_field: knn}}

    def sparse_query(self, sparse: Mapping[str, float], *, filter: Filter = None,
                     knn_depth: int | None = None,
                     seismic: SeismicSearch | None = None) -> dict[str, Any]:
        """``bool.should`` of linear ``rank_feature`` clauses (match_none if no key); on the
        ``sparse_vector`` layout ``neural_sparse`` by token id, ``knn_depth`` hits (default
        10), with the ``seismic`` knobs."""
        if self.sparse_layout == SPARSE_VECTOR:
            return seismic_query(self.sparse_field, sparse, self._token_ids, k=knn_depth or 10,
                                 knobs=seismic or SeismicSearch(),
                                 filter=one_filter(filter_clauses(filter)))
        should = rank_feature_clauses(sparse, self.sparse_field)
        clauses = filter_clauses(filter)
        if not should:
            return {"match_none": {}}
        query: dict[str, Any] = {"bool": {"should": should, "minimum_should_match": 1}}
        if clauses:
            query["bool"]["filter"] = clauses
        return query

    def neural_query(self, text: str, *, model_id: str | None, knn_depth: int,
                     filter: Filter = None, ef_search: int | None = None) -> dict[str, Any]:
        """``neural`` on the dense field: the cluster's model embeds ``text`` (model_id None:
        the search pipeline's enricher names it); the same ``knn_depth`` and filter as
        :meth:`dense_query`."""
        neural: dict[str, Any] = {"query_text": text, "k": int(knn_depth)}
        if model_id is not None:
            neural["model_id"] = model_id
        flt = one_filter(filter_clauses(filter))
        if flt is not None:
            neural["filter"] = flt
        ef_search = ef_search if ef_search is not None else self._knn_ef_search()
        if ef_search is not None:
            neural["method_parameters"] = {"ef_search": int(ef_search)}
        return {"neural": {self.dense_field: neural}}

    def neural_sparse_query(self, text: str, *, model_id: str | None,
                            filter: Filter = None) -> dict[str, Any]:
        """``neural_sparse`` on the sparse field: the cluster's model weighs ``text``'s tokens."""
        sparse: dict[str, Any] = {"query_text": text}
        if model_id is not None:
            sparse["model_id"] = model_id
        query: dict[str, Any] = {"neural_sparse": {self.sparse_field: sparse}}
        clauses = filter_clauses(filter)
        return {"bool": {"must": [query], "filter": clauses}} if clauses else query

    def hybrid_query(self, *sub_queries: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side hybrid of the legs' sub-queries (filters are inside each)."""
        return {"hybrid": {"queries": [dict(q) for q in sub_queries]}}

    # ---- cluster -------------------------------------------------------------------
    def capabilities(self) -> Any:
        """The cluster's capabilities, detected once."""
        if self._capabilities is None:
            from lr_opensearch.engine.client import cluster_capabilities

            self._capabilities = cluster_capabilities(self.client)
            logger.debug("cluster capabilities: %s", self._capabilities)
        return self._capabilities

    def _knn_ef_search(self) -> int | None:
        """The ``ef_search`` of a knn clause whose caller names none
        (``Capabilities.knn_ef_search``: k-NN's default, sent only to clusters older than
        3.5). None without a client or a cluster that answers: bodies built offline
        (``Retriever.dsl``) follow the newer engines, and a search reports the cluster."""
        if self.client is None:
            return None
        try:
            return self.capabilities().knn_ef_search
        except EngineError:
            return None

    def server_hybrid_available(self) -> bool:
        return bool(getattr(self.capabilities(), "neural_search", False))

    def server_fusion_blocker(self, config: FusionConfig) -> str | None:
        """Why ``config`` cannot be fused by this cluster (None: it can): the ``hybrid``
        query needs neural-search and follows the ``opensearch`` semantics only."""
        if config.semantics != "opensearch":
            return f"semantics {config.semantics!r} exists only client side"
        if self._sparse_home is not None and any(
                legs.get(name).input == TOKEN_WEIGHTS for name in config.legs):
            return (f"the {SPARSE_VECTOR} layout keeps the sparse field in the companion index "
                    f"{self._sparse_home[1]!r}, and the hybrid query searches one index")
        if not self.server_hybrid_available():
            return "the OpenSearch cluster has no neural-search plugin (hybrid query)"
        caps = self.capabilities()
        if config.combination == "rrf" and not caps.weighted_rrf:
            return (f"OpenSearch {caps.version}'s RRF (score-ranker-processor) takes no "
                    f"weights (from {'.'.join(map(str, WEIGHTED_RRF_FROM))} on)")
        return None

    def one_query_blocker(self, config: FusionConfig) -> str | None:
        if self._sparse_home is not None and any(
                legs.get(name).input == TOKEN_WEIGHTS for name in config.legs):
            return (f"the {SPARSE_VECTOR} layout keeps the sparse field in the companion index "
                    f"{self._sparse_home[1]!r}, and one query searches one index")
        return None

    def server_fusion_slower(self, documents: int) -> str | None:
        release = self.capabilities().release
        if documents < CLIENT_FUSION_MIN_DOCS or release >= HYBRID_SKIPS_FROM:
            return None
        return (f"{documents:,} documents: OpenSearch {self.capabilities().version}'s hybrid "
                "query scores every match of every leg (no skipping before "
                f"{'.'.join(map(str, HYBRID_SKIPS_FROM))}); each leg searched alone skips")

    def hybrid_body(self, sub_queries: Sequence[Mapping[str, Any]], config: FusionConfig, *,
                    size: int, per_leg: int | None = None, source: Any = None,
                    timeout: str | None = None, inline_pipeline: bool = True) -> dict[str, Any]:
        """One search body: the ``hybrid`` query of the legs with its normalization
        pipeline inline; ``per_leg`` > ``size`` becomes the hybrid query's
        ``pagination_depth`` (hits each sub-query collects per shard). ``inline_pipeline``
        False leaves the pipeline out: the index's default search pipeline fuses (the
        text-only body of in-cluster encoding, whose pipeline also names the models)."""
        query = self.hybrid_query(*sub_queries)
        if per_leg is not None and per_leg > size:
            query["hybrid"]["pagination_depth"] = int(per_leg)
        return self.body(query, size=size, source=source, timeout=timeout,
                         pipeline=self.hybrid_pipeline(config) if inline_pipeline else None)

    def hybrid_pipeline(self, config: FusionConfig) -> dict[str, Any]:
        """The normalization search pipeline for these fusion settings, sent inline.

        Rendered by :func:`lr_opensearch.engine.templates.render_hybrid_pipeline` from
        ``index_templates/``. It travels inside each search body (a temporary pipeline)
        because ``_msearch`` accepts no ``search_pipeline`` parameter (OpenSearch 3.6
        answers 400), while a body-level pipeline works in ``_msearch`` and ``_search``
        alike and leaves no state on the cluster.
        """
        from lr_opensearch.engine.templates import render_hybrid_pipeline

        key = pipeline_name(config)
        if key not in self._pipelines:
            body = render_hybrid_pipeline(
                *config.leg_weights,
                technique=config.normalization,
                combination=config.combination,
                rank_constant=config.rank_constant,
            )
            body.pop("description", None)
            self._pipelines[key] = body
        return self._pipelines[key]

    # ---- transport -----------------------------------------------------------------
    def _send_msearch(self, lines: list[Any]) -> Any:
        return self.client.msearch(body=lines)

    def _send_mget(self, index: str | None, docs: list[dict[str, Any]]) -> Any:
        return self.client.mget(index=index, body={"docs": docs})

    # ---- index administration ------------------------------------------------------
    create_hint = (". Does it have the k-NN plugin (and, for the sparse_vector layout, "
                   "neural-search 3.3+) on every node (lr node status / _cat/plugins)?")

    def index_body(self, bundle: Bundle, *, m: int = 16, ef_construction: int = 128,
                   shards: int = 1, replicas: int = 0, knn_engine: str = "lucene",
                   sparse_layout: str = RANK_FEATURES, seismic: SeismicIndexParams | None = None,
                   **engine_opts: Any) -> dict[str, Any]:
        """``index_templates/opensearch/index.json`` for ``bundle``: ``knn_vector`` with
        ``knn_engine`` (lucene or faiss), HNSW ``m`` / ``ef_construction``, sharding, the
        sparse field's layout (``rank_features`` or ``sparse_vector`` with ``seismic``'s
        parameters; :mod:`lr_opensearch.engine.seismic`)."""
        from lr_opensearch.engine.templates import render_index_body

        if engine_opts:
            raise ConfigError(f"unknown OpenSearch index option(s) {sorted(engine_opts)}")

        body = render_index_body(dense_dim=int(bundle.config.served_dim),
                                 bundle_id=str(bundle.bundle_id),
                                 key_encoding=str(bundle.config.key_encoding), engine=knn_engine,
                                 m=m, ef_construction=ef_construction, shards=shards,
                                 replicas=replicas)
        return apply_layout(body, bundle, sparse_layout, seismic, field=self.sparse_field,
                            meta_key=META_KEY)

    def check_bundle(self, index: str, bundle: Bundle) -> dict[str, Any]:
        """The bundle check of every engine (every concrete index behind ``index``), then
        the sparse layout their ``_meta`` records (the indices must agree on it); the
        ``sparse_vector`` layout searches its companion index by token id (one index)."""
        mappings = self.index_mappings(index)  # one read for both checks
        meta = self._check_mappings(index, mappings, bundle)
        metas = {name: meta_of(mapping, META_KEY) or {}
                 for name, mapping in mappings.items()}
        companions = sorted(name for name, m in metas.items() if m.get("format") == COMPANION_FORMAT)
        if companions:
            raise ConfigError(f"{companions[0]!r} holds the sparse field of a {SPARSE_VECTOR} "
                              "layout index; search that index (the name without "
                              f"{COMPANION_SUFFIX!r})")
        layouts = {name: layout_of(meta) for name, meta in metas.items()}
        if len(set(layouts.values())) > 1:
            raise ConfigError(f"the indices behind {index!r} lay out {self.sparse_field} "
                              f"differently {layouts}; search them one at a time")
        self.sparse_layout = next(iter(layouts.values()))
        if self.sparse_layout == SPARSE_VECTOR:
            if len(layouts) > 1:
                raise ConfigError(f"{index!r} names {len(layouts)} indices with the "
                                  f"{SPARSE_VECTOR} layout; search them one at a time")
            name = next(iter(layouts))
            self._sparse_home = (name, companion_name(name))
            if not self._token_ids:
                self._token_ids = token_ids(bundle)
        return meta

    def _route(self, body: Mapping[str, Any]) -> str | None:
        """A SEISMIC sparse sub-query runs on the companion index."""
        if self._sparse_home is not None and is_seismic_query(body.get("query", {}),
                                                               self.sparse_field):
            return self._sparse_home[1]
        return None

    def _unroute(self, result: EngineResult) -> EngineResult:
        assert self._sparse_home is not None
        home = self._sparse_home[0]
        return EngineResult([dataclasses.replace(h, index=home) for h in result.hits],
                            result.took_ms, result.timed_out)

    def sync_sparse_index(self, index: str, *, poll_s: float = 2.0) -> int:
        """Copy ``index``'s documents, all fields but the dense one, into the companion
        index of its ``sparse_vector`` layout (a server-side ``_reindex``, waited for), then
        refresh it; returns the documents copied (0: the index has the other layout)."""
        if layout_of(self.index_meta(index)) != SPARSE_VECTOR:
            return 0
        target = companion_name(index)
        body = {"source": {"index": index, "_source": {"excludes": [self.dense_field]}},
                "dest": {"index": target}}
        task = self._admin(f"copying {index!r} into {target!r}", self.client.reindex,
                           body=body, wait_for_completion=False, refresh=True)["task"]
        while True:
            status = self._admin(f"waiting for the copy into {target!r}", self.client.tasks.get,
                                 task_id=task)
            if status.get("completed"):
                break
            time.sleep(poll_s)
        result = status.get("response", {})
        if status.get("error") or result.get("failures"):
            raise EngineError(f"copying {index!r} into {target!r} failed: "
                              f"{status.get('error') or result['failures'][:3]}")
        self.refresh(target)
        logger.info("copied %s documents of %s into %s", result.get("total"), index, target)
        return int(result.get("total", 0))

    def delete_index(self, index: str) -> None:
        """Delete ``index`` (and the companion index of a ``sparse_vector`` layout)."""
        one_index_name(index)
        layout = layout_of(self.index_meta(index))
        super().delete_index(index)
        if layout == SPARSE_VECTOR and self.index_exists(companion_name(index)):
            super().delete_index(companion_name(index))

    def _create(self, index: str, body: dict[str, Any]) -> Any:
        meta = body["mappings"]["_meta"][META_KEY]
        if meta.get(LAYOUT_META) == SPARSE_VECTOR:  # its companion first: a main index is whole
            try:
                self.client.indices.create(index=companion_name(index), body=companion_body(
                    body, field=self.sparse_field, dense_field=self.dense_field,
                    meta_key=META_KEY))
            except OpenSearchException as exc:
                if "resource_already_exists" not in str(exc):
                    raise
        return self.client.indices.create(index=index, body=body)

    def _put_settings(self, index: str, body: dict[str, Any]) -> Any:
        return self.client.indices.put_settings(index=index, body=body)

    def put_search_template(self, name: str, source: str) -> None:
        self._admin(f"storing search template {name}", self.client.put_script, id=name,
                    body={"script": {"lang": "mustache", "source": source}})

    def _put_meta(self, index: str, meta: dict[str, Any]) -> Any:
        return self.client.indices.put_mapping(index=index, body={"_meta": meta})

    def _create_doc(self, index: str, doc_id: str, doc: dict[str, Any]) -> Any:
        return self.client.create(index=index, id=doc_id, body=doc)

    def _create_plain(self, index: str, settings: dict[str, Any]) -> Any:
        return self.client.indices.create(index=index, body={"settings": settings})

    def bulk(self, actions: Sequence[Mapping[str, Any]], *,
             max_chunk_bytes: int) -> list[tuple[bool, dict[str, Any]]]:
        from opensearchpy import helpers

        out = []
        try:
            for ok, item in helpers.streaming_bulk(
                    self.client, actions, chunk_size=max(1, len(actions)),
                    max_chunk_bytes=max_chunk_bytes, raise_on_error=False,
                    raise_on_exception=False, max_retries=0, yield_ok=True):
                out.append((bool(ok), dict(next(iter(item.values())))))
        except OpenSearchException as exc:  # an answer the helper cannot read (not JSON)
            raise EngineError(f"a bulk request on {self.engine} failed: {refusal(exc)}") from exc
        return out
