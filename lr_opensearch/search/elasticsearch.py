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

Elasticsearch has no neural-search ``hybrid`` query, so hybrid search always fuses client
side (``_msearch`` + :mod:`lr_opensearch.search.fusion`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from elasticsearch import ApiError, TransportError

from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.options import ES_SPARSE_TYPES
from lr_opensearch.search.engine import (
    DENSE_FIELD,
    SPARSE_FIELD,
    EngineAdapter,
    Filter,
    filter_clauses,
    rank_feature_clauses,
    vector_list,
)
from lr_opensearch.search.fusion import FusionConfig
from lr_opensearch.search.templates import check_index_bundle, render_es_index_body

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

MAX_NUM_CANDIDATES = 10_000


def es_index_body(*, sparse_type: str = "sparse_vector", **opts: Any) -> dict[str, Any]:
    """The Elasticsearch index body: :func:`lr_opensearch.search.templates.render_es_index_body`
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


def create_es_index(client: Any, index: str, bundle: Bundle, **opts: Any) -> dict[str, Any]:
    """Create an Elasticsearch index for ``bundle`` (options: see :func:`es_index_body`)."""
    cfg = bundle.config
    body = es_index_body(
        dense_dim=int(cfg.served_dim),
        bundle_id=str(bundle.bundle_id),
        key_encoding=str(cfg.key_encoding),
        **opts,
    )
    try:
        client.indices.create(index=index, settings=body["settings"], mappings=body["mappings"])
    except (ApiError, TransportError) as exc:
        raise EngineError(f"could not create Elasticsearch index {index!r}: {exc}") from exc
    return body


class ElasticsearchAdapter(EngineAdapter):
    """Request bodies and transport for Elasticsearch (client fusion only).

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

    def dense_query(
        self, vector: np.ndarray, *, k: int, filter: Filter = None, ef_search: int | None = None
    ) -> dict[str, Any]:
        """``knn`` query; ``ef_search`` maps to ``num_candidates`` (default 1.5 k)."""
        candidates = ef_search if ef_search is not None else math.ceil(1.5 * k)
        knn: dict[str, Any] = {
            "field": self.dense_field,
            "query_vector": vector_list(vector),
            "k": int(k),
            "num_candidates": int(min(MAX_NUM_CANDIDATES, max(k, candidates))),
        }
        clauses = filter_clauses(filter)
        if clauses:
            knn["filter"] = clauses
        return {"knn": knn}

    def sparse_query(self, sparse: Mapping[str, float], *, filter: Filter = None) -> dict[str, Any]:
        """``term`` clauses on a ``sparse_vector`` field (or ``rank_feature`` clauses)."""
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

    def hybrid_query(self, *legs: Mapping[str, Any]) -> dict[str, Any]:
        raise ConfigError("Elasticsearch has no neural-search hybrid query; use fusion='client'")

    def capabilities(self) -> Any:
        return {"engine": "elasticsearch", "neural_search": False}

    def server_hybrid_available(self) -> bool:
        return False

    def hybrid_pipeline(self, config: FusionConfig) -> dict[str, Any]:
        raise ConfigError("Elasticsearch has no normalization search pipeline; use fusion='client'")

    def check_bundle(self, index: str, bundle: Bundle) -> None:
        """:func:`lr_opensearch.search.templates.check_index_bundle`, then read the sparse type."""
        try:
            check_index_bundle(self.client, index, bundle)
            resp = self.client.indices.get_mapping(index=index) if self._auto else {}
        except (ApiError, TransportError) as exc:
            raise EngineError(
                f"cannot read the mapping of Elasticsearch index {index!r}: {exc}"
            ) from exc
        for value in dict(resp).values():
            field = value.get("mappings", {}).get("properties", {}).get(self.sparse_field, {})
            if field.get("type") in ES_SPARSE_TYPES:
                self.sparse_type = field["type"]

    def _send_msearch(self, lines: list[Any]) -> Any:
        return self.client.msearch(searches=lines)

    def _send_mget(self, index: str, docs: list[dict[str, Any]]) -> Any:
        return self.client.mget(index=index, docs=docs)
