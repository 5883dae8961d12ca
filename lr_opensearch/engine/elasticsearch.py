"""The Elasticsearch adapter: same Retriever API, ``dense_vector`` knn + sparse features.

Index layout (see :func:`es_index_body`):

* ``lr_dense``: ``dense_vector`` (``index: true``, ``similarity: max_inner_product``,
  ``index_options.type: hnsw``). The 8.14+ default ``int8_hnsw`` quantises vectors and
  changes scores a lot, so float HNSW is asked for explicitly. Scores are transformed
  like OpenSearch's (``1 + ip`` / ``1 / (1 - ip)``).
* ``lr_sparse``: ``sparse_vector`` (Elasticsearch 8.11+, in the server core) or
  ``rank_features`` (needs the mapper-extras module, absent from minimal distributions).
  For ``sparse_vector`` the query is a ``bool.should`` of ``term`` queries with
  ``boost`` = query count, whose score is the sparse dot product (each term query on a
  ``sparse_vector`` field is a linear feature query); for ``rank_features`` it is the
  same ``rank_feature`` query as on OpenSearch.

Server-side fusion uses Elasticsearch's retrievers where the cluster has them: the
``linear`` retriever with the ``minmax`` normalizer for the ``linear`` semantics with
``min_max`` + ``arithmetic_mean``, the ``rrf`` retriever for ``rrf`` with equal leg weights.
Both live in the ``rank-rrf`` module and need an Enterprise (or trial) licence; a cluster
without them (the basic licence, or a distribution without the module, such as the
integ-test build ``lr node`` installs) fuses client side (``_msearch`` +
:mod:`lr_opensearch.search.fusion`), and the retriever says so in one log line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from elasticsearch import ApiError, TransportError

from lr_opensearch.engine.adapter import DENSE_FIELD, SPARSE_FIELD, EngineAdapter
from lr_opensearch.engine.clauses import Filter, filter_clauses, rank_feature_clauses, vector_list
from lr_opensearch.engine.seismic import RANK_FEATURES, check_layout
from lr_opensearch.engine.templates import render_es_index_body
from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.legs import FusionConfig
from lr_opensearch.options import ES_SPARSE_TYPES

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

MAX_NUM_CANDIDATES = 10_000


def es_index_body(*, sparse_type: str = "sparse_vector", **opts: Any) -> dict[str, Any]:
    """The Elasticsearch index body: :func:`lr_opensearch.engine.templates.render_es_index_body`
    (``index_templates/elasticsearch/index.json``) with ``lr_sparse`` of ``sparse_type``.

    ``sparse_vector`` (default) works on every Elasticsearch 8.11+; ``rank_features`` needs
    the mapper-extras module. ``opts`` go to ``render_es_index_body``.
    """
    if sparse_type not in ES_SPARSE_TYPES:
        raise ConfigError(
            f"unknown sparse_type {sparse_type!r}; valid options: {', '.join(ES_SPARSE_TYPES)}"
        )
    body = render_es_index_body(**opts)
    body["mappings"]["properties"][SPARSE_FIELD] = {"type": sparse_type}
    return body


RRF_MODULES = ("rank-rrf", "x-pack-rank-rrf")  # the module of the linear / rrf retrievers
RETRIEVER_LICENCES = ("enterprise", "trial")  # licence types that allow them


@dataclass(frozen=True)
class ESCapabilities:
    """What an Elasticsearch cluster offers for fusion.

    Attributes:
        version: server version, e.g. "9.1.0".
        modules: module and plugin names present on every node.
        licence: licence type (``basic``, ``trial``, ``enterprise``, ...; ``none`` when the
            cluster has no licence API) and whether it is active.
        retrievers: the fusion retrievers usable here (``linear``, ``rrf``), or none.
        why_not: why there are none (for the log line), else "".
    """

    version: str
    modules: tuple[str, ...]
    licence: str
    licence_active: bool
    retrievers: tuple[str, ...]
    why_not: str

    @property
    def server_hybrid(self) -> bool:
        return bool(self.retrievers)


def es_capabilities(client: Any) -> ESCapabilities:
    """Read modules (``_nodes/plugins``) and the licence (``_license``) of a cluster.

    Raises:
        EngineError: the cluster does not answer.
    """
    try:
        nodes = dict(client.nodes.info(metric="plugins"))["nodes"]
    except (ApiError, TransportError) as exc:
        raise EngineError(f"cannot read the modules of the Elasticsearch cluster: {exc}") from exc
    per_node = [
        {m["name"] for m in n.get("modules", []) + n.get("plugins", [])} for n in nodes.values()
    ]
    everywhere = tuple(sorted(set.intersection(*per_node))) if per_node else ()
    versions = sorted({str(n.get("version", "?")) for n in nodes.values()})
    try:
        lic = dict(client.license.get())["license"]
        licence, active = str(lic.get("type", "none")), lic.get("status") == "active"
    except (ApiError, TransportError):
        licence, active = "none", False
    has_module = any(m in everywhere for m in RRF_MODULES)
    why = ""
    if not has_module:
        why = ("its nodes lack the rank-rrf module that holds the linear and rrf retrievers "
               f"(modules: {', '.join(everywhere) or 'none'})")
    elif licence not in RETRIEVER_LICENCES or not active:
        why = (f"the linear and rrf retrievers need an Enterprise or trial licence; this "
               f"cluster's is {licence}{'' if active else ' (inactive)'}")
    retrievers = () if why else ("linear", "rrf")
    return ESCapabilities(",".join(versions), everywhere, licence, bool(active), retrievers, why)


class ElasticsearchAdapter(EngineAdapter):
    """Request bodies, transport and index administration for Elasticsearch.

    Args:
        client: an ``elasticsearch.Elasticsearch`` client.
        sparse_type: ``sparse_vector``, ``rank_features`` or ``auto`` (read from the index
            mapping by :meth:`check_bundle`; ``sparse_vector`` until then).
    """

    engine = "elasticsearch"
    transport_errors = (ApiError, TransportError)

    def __init__(
        self,
        client: Any,
        *,
        dense_field: str = DENSE_FIELD,
        sparse_field: str = SPARSE_FIELD,
        sparse_type: str = "auto",
    ):
        super().__init__(client, dense_field=dense_field, sparse_field=sparse_field)
        if sparse_type not in (*ES_SPARSE_TYPES, "auto"):
            raise ConfigError(
                f"unknown sparse_type {sparse_type!r}; valid options: auto, {', '.join(ES_SPARSE_TYPES)}"
            )
        self.sparse_type = "sparse_vector" if sparse_type == "auto" else sparse_type
        self._auto = sparse_type == "auto"
        self._capabilities: ESCapabilities | None = None

    def dense_query(
        self, vector: np.ndarray, *, knn_depth: int, filter: Filter = None,
        ef_search: int | None = None
    ) -> dict[str, Any]:
        """``knn`` query of ``knn_depth`` neighbours (the engine's ``k``); ``ef_search`` maps
        to ``num_candidates`` (default 1.5 x knn_depth)."""
        candidates = ef_search if ef_search is not None else math.ceil(1.5 * knn_depth)
        knn: dict[str, Any] = {
            "field": self.dense_field,
            "query_vector": vector_list(vector),
            "k": int(knn_depth),
            "num_candidates": int(min(MAX_NUM_CANDIDATES, max(knn_depth, candidates))),
        }
        clauses = filter_clauses(filter)
        if clauses:
            knn["filter"] = clauses
        return {"knn": knn}

    def sparse_query(self, sparse: Mapping[str, float], *, filter: Filter = None,
                     knn_depth: int | None = None, seismic: Any = None) -> dict[str, Any]:
        """``term`` clauses on a ``sparse_vector`` field (or ``rank_feature`` clauses); an
        exact dot product (``knn_depth`` and the SEISMIC knobs are OpenSearch's: unused)."""
        if self.sparse_type == "rank_features":
            should = rank_feature_clauses(sparse, self.sparse_field)
        else:
            should = [
                {"term": {self.sparse_field: {"value": key, "boost": float(sparse[key])}}}
                for key in sorted(sparse)
                if float(sparse[key]) > 0.0
            ]
        if not should:
            return {"match_none": {}}
        query: dict[str, Any] = {"bool": {"should": should, "minimum_should_match": 1}}
        clauses = filter_clauses(filter)
        if clauses:
            query["bool"]["filter"] = clauses
        return query

    # ---- server-side fusion: the linear / rrf retrievers -----------------------------
    def capabilities(self) -> ESCapabilities:
        """The cluster's modules, licence and fusion retrievers, read once."""
        if self._capabilities is None:
            self._capabilities = es_capabilities(self.client)
            logger.debug("Elasticsearch capabilities: %s", self._capabilities)
        return self._capabilities

    def server_fusion_blocker(self, config: FusionConfig) -> str | None:
        """Why ``config`` cannot be fused by this cluster's retrievers (None: it can)."""
        if config.semantics != "linear":
            return (f"semantics {config.semantics!r} has no Elasticsearch retriever (the "
                    "linear retriever matches semantics 'linear')")
        if config.combination == "rrf":
            if len(set(config.leg_weights)) > 1:
                return "the rrf retriever is unweighted; these legs have unequal weights"
        elif (config.normalization, config.combination) != ("min_max", "arithmetic_mean"):
            return (f"{config.normalization} + {config.combination} has no Elasticsearch "
                    "retriever (the linear retriever does min_max + arithmetic_mean)")
        caps = self.capabilities()
        if not caps.server_hybrid:
            return f"the Elasticsearch {caps.version} cluster cannot fuse: {caps.why_not}"
        return None

    def hybrid_body(self, sub_queries: Sequence[Mapping[str, Any]], config: FusionConfig, *,
                    size: int, per_leg: int | None = None, source: Any = None,
                    timeout: str | None = None) -> dict[str, Any]:
        """One search body fusing the legs' queries with a ``linear`` (min-max normalised,
        weighted sum) or ``rrf`` retriever; every leg keeps its ``per_leg`` (default
        ``size``) best hits (``rank_window_size``), ``size`` come back."""
        window = max(int(size), int(per_leg or size))
        children = [{"standard": {"query": dict(q)}} for q in sub_queries]
        if config.combination == "rrf":
            retriever: dict[str, Any] = {"rrf": {
                "retrievers": children, "rank_constant": int(config.rank_constant),
                "rank_window_size": window}}
        else:
            retriever = {"linear": {
                "retrievers": [{"retriever": child, "weight": float(w), "normalizer": "minmax"}
                               for child, w in zip(children, config.leg_weights, strict=True)],
                "rank_window_size": window}}
        body: dict[str, Any] = {"size": int(size), "retriever": retriever,
                                "track_total_hits": False}
        if source is not None:
            body["_source"] = source
        if timeout:
            body["timeout"] = timeout
        return body

    # ---- index administration ------------------------------------------------------
    def index_body(self, bundle: Bundle, *, m: int = 16, ef_construction: int = 128,
                   shards: int = 1, replicas: int = 0, sparse_type: str = "sparse_vector",
                   sparse_layout: str = RANK_FEATURES, **engine_opts: Any) -> dict[str, Any]:
        """:func:`es_index_body` for ``bundle`` (``sparse_type``: sparse_vector or
        rank_features; ``sparse_layout``: OpenSearch's, refused here unless the default)."""
        check_layout(sparse_layout, bundle, self.engine)
        if engine_opts:
            raise ConfigError(f"unknown Elasticsearch index option(s) {sorted(engine_opts)}")
        cfg = bundle.config
        return es_index_body(sparse_type=sparse_type, dense_dim=int(cfg.served_dim),
                             bundle_id=str(bundle.bundle_id), key_encoding=str(cfg.key_encoding),
                             m=m, ef_construction=ef_construction, shards=shards,
                             replicas=replicas)

    def _create(self, index: str, body: dict[str, Any]) -> Any:
        return self.client.indices.create(index=index, settings=body["settings"],
                                          mappings=body["mappings"])

    def _put_settings(self, index: str, body: dict[str, Any]) -> Any:
        return self.client.indices.put_settings(index=index, settings=body)

    def _put_meta(self, index: str, meta: dict[str, Any]) -> Any:
        return self.client.indices.put_mapping(index=index, meta=meta)

    def _create_doc(self, index: str, doc_id: str, doc: dict[str, Any]) -> Any:
        return self.client.create(index=index, id=doc_id, document=doc)

    def _create_plain(self, index: str, settings: dict[str, Any]) -> Any:
        return self.client.indices.create(index=index, settings=settings)

    def check_bundle(self, index: str, bundle: Bundle) -> dict[str, Any]:
        """The bundle check of every engine (every concrete index behind ``index``), then
        the sparse field type (``auto``; the indices must agree on it)."""
        mappings = self.index_mappings(index)  # one read for both checks
        meta = self._check_mappings(index, mappings, bundle)
        if self._auto:
            types = {name: mapping.get("properties", {}).get(self.sparse_field, {}).get("type")
                     for name, mapping in mappings.items()}
            found = {t for t in types.values() if t in ES_SPARSE_TYPES}
            if len(found) > 1:
                raise ConfigError(f"the indices behind {index!r} store {self.sparse_field} as "
                                  f"different types {types}; search them one at a time")
            if found:
                self.sparse_type = found.pop()
        return meta

    def bulk(self, actions: Sequence[Mapping[str, Any]], *,
             max_chunk_bytes: int) -> list[tuple[bool, dict[str, Any]]]:
        from elasticsearch import helpers

        out: list[tuple[bool, dict[str, Any]]] = []
        try:
            for ok, item in helpers.streaming_bulk(
                    self.client, [dict(a) for a in actions], chunk_size=max(1, len(actions)),
                    max_chunk_bytes=max_chunk_bytes, raise_on_error=False,
                    raise_on_exception=False, max_retries=0, yield_ok=True):
                out.append((bool(ok), dict(next(iter(item.values())))))
        except TransportError as exc:  # no answer: the helper lets these through
            for action in actions[len(out):]:
                out.append((False, {"_id": action.get("_id"), "status": "N/A",
                                    "error": str(exc), "exception": exc}))
        return out

    # ---- transport -----------------------------------------------------------------
    def _send_msearch(self, lines: list[Any]) -> Any:
        return self.client.msearch(searches=lines)

    def _send_mget(self, index: str | None, docs: list[dict[str, Any]]) -> Any:
        return self.client.mget(index=index, docs=docs)
