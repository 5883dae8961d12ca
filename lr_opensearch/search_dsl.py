"""OpenSearch request bodies and transport for LightRetriever search (the engine adapter).

Query DSL (DESIGN section 5):

* dense: ``{"knn": {"lr_dense": {"vector": [...], "k": K, "filter": F,
  "method_parameters": {"ef_search": E}}}}`` - the filter inside ``knn`` is OpenSearch's
  efficient (pre-)filtering, so K hits survive the filter.
* sparse: ``{"bool": {"should": [{"rank_feature": {"field": "lr_sparse.<key>",
  "boost": count, "linear": {}}}, ...], "minimum_should_match": 1, "filter": F}}`` -
  the score is the sparse dot product ``sum(count * doc_weight)``.
* hybrid (server side): ``{"hybrid": {"queries": [dense, sparse]}}`` with the
  ``normalization-processor`` pipeline rendered by :mod:`lr_opensearch.templates` inline in
  the body (``_msearch`` has no ``search_pipeline`` parameter).

An :class:`Elasticsearch adapter <lr_opensearch.es.ElasticsearchAdapter>` offers the same
methods for Elasticsearch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from opensearchpy.exceptions import OpenSearchException

from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.fusion import FusionConfig

logger = logging.getLogger(__name__)

DENSE_FIELD = "lr_dense"
SPARSE_FIELD = "lr_sparse"
TEXT_FIELDS = ("title", "text")
MSEARCH_CHUNK = 64  # searches per _msearch request

Filter = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


@dataclass(frozen=True)
class EngineHit:
    """One hit as the engine returned it."""

    doc_id: str
    score: float
    source: Mapping[str, Any] | None


@dataclass(frozen=True)
class EngineResult:
    """One search response: hits in engine order, time taken, whether it timed out."""

    hits: list[EngineHit]
    took_ms: int
    timed_out: bool


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


def _one_filter(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
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


def pipeline_name(config: FusionConfig) -> str:
    """A deterministic search-pipeline id per fusion settings, e.g. lr-hybrid-min_max-arithmetic_mean-7000-3000."""
    dw, sw = (int(round(w * 10_000)) for w in config.weights)
    if config.combination == "rrf":
        return f"lr-hybrid-rrf-{config.rank_constant}-{dw}-{sw}"
    return f"lr-hybrid-{config.normalization}-{config.combination}-{dw}-{sw}"


def parse_response(resp: Mapping[str, Any], what: str) -> EngineResult:
    """Turn one (m)search response into an EngineResult, or raise EngineError."""
    if "error" in resp:
        raise EngineError(f"{what} failed: {_reason(resp['error'])}")
    shards = resp.get("_shards") or {}
    if shards.get("failed"):
        reasons = "; ".join(_reason(f.get("reason", f)) for f in shards.get("failures", [])[:3])
        raise EngineError(f"{what}: {shards['failed']} shard(s) failed: {reasons}")
    hits = [
        EngineHit(str(h["_id"]), float(h["_score"]), h.get("_source"))
        for h in resp.get("hits", {}).get("hits", [])
    ]
    timed_out = bool(resp.get("timed_out"))
    if timed_out:
        logger.warning("%s timed out; results are partial", what)
    return EngineResult(hits, int(resp.get("took", 0)), timed_out)


def _reason(error: Any) -> str:
    if isinstance(error, Mapping):
        root = error.get("root_cause") or []
        detail = root[0] if root else error
        caused = error.get("caused_by", {})
        text = f"{detail.get('type', '?')}: {detail.get('reason', error)}"
        if isinstance(caused, Mapping) and caused.get("reason"):
            text += f" (caused by {caused.get('type')}: {caused['reason']})"
        return text
    return str(error)


class OpenSearchAdapter:
    """Builds OpenSearch bodies and runs them through ``_msearch``.

    Args:
        client: an ``opensearchpy.OpenSearch`` (see :func:`lr_opensearch.client.make_client`).
        dense_field / sparse_field: the index's LightRetriever fields.
    """

    engine = "opensearch"

    def __init__(
        self, client: Any, *, dense_field: str = DENSE_FIELD, sparse_field: str = SPARSE_FIELD
    ):
        self.client = client
        self.dense_field = dense_field
        self.sparse_field = sparse_field
        self._capabilities: Any = None
        self._pipelines: dict[str, dict[str, Any]] = {}

    # ---- query clauses -------------------------------------------------------------
    def dense_query(
        self, vector: np.ndarray, *, k: int, filter: Filter = None, ef_search: int | None = None
    ) -> dict[str, Any]:
        """``knn`` clause with efficient filtering. vector: [served_dim]."""
        knn: dict[str, Any] = {"vector": vector_list(vector), "k": int(k)}
        flt = _one_filter(filter_clauses(filter))
        if flt is not None:
            knn["filter"] = flt
        if ef_search is not None:
            knn["method_parameters"] = {"ef_search": int(ef_search)}
        return {"knn": {self.dense_field: knn}}

    def sparse_query(self, sparse: Mapping[str, float], *, filter: Filter = None) -> dict[str, Any]:
        """``bool.should`` of linear ``rank_feature`` clauses (match_none if no key)."""
        should = rank_feature_clauses(sparse, self.sparse_field)
        clauses = filter_clauses(filter)
        if not should:
            return {"match_none": {}}
        query: dict[str, Any] = {"bool": {"should": should, "minimum_should_match": 1}}
        if clauses:
            query["bool"]["filter"] = clauses
        return query

    def text_query(self, text: str, *, filter: Filter = None) -> dict[str, Any]:
        """BM25 baseline: ``multi_match`` over title and text."""
        query: dict[str, Any] = {"multi_match": {"query": text, "fields": list(TEXT_FIELDS)}}
        clauses = filter_clauses(filter)
        return {"bool": {"must": [query], "filter": clauses}} if clauses else query

    def hybrid_query(self, dense: Mapping[str, Any], sparse: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side hybrid of the two sub-queries (filters are inside each)."""
        return {"hybrid": {"queries": [dict(dense), dict(sparse)]}}

    @staticmethod
    def body(
        query: Mapping[str, Any],
        *,
        size: int,
        source: Any = None,
        timeout: str | None = None,
        explain: bool = False,
        pipeline: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A search body: query, size, ``_source`` selection, timeout, inline pipeline."""
        body: dict[str, Any] = {"size": int(size), "query": dict(query), "track_total_hits": False}
        if source is not None:
            body["_source"] = source
        if timeout:
            body["timeout"] = timeout
        if explain:
            body["explain"] = True
        if pipeline is not None:
            body["search_pipeline"] = dict(pipeline)
        return body

    # ---- cluster -------------------------------------------------------------------
    def capabilities(self) -> Any:
        """The cluster's capabilities, detected once."""
        if self._capabilities is None:
            from lr_opensearch.client import cluster_capabilities

            self._capabilities = cluster_capabilities(self.client)
            logger.debug("cluster capabilities: %s", self._capabilities)
        return self._capabilities

    def server_hybrid_available(self) -> bool:
        return bool(getattr(self.capabilities(), "neural_search", False))

    def check_bundle(self, index: str, bundle: Any) -> None:
        from lr_opensearch.templates import check_index_bundle

        check_index_bundle(self.client, index, bundle)

    def hybrid_pipeline(self, config: FusionConfig) -> dict[str, Any]:
        """The normalization search pipeline for these fusion settings, sent inline.

        Rendered by :func:`lr_opensearch.templates.render_hybrid_pipeline` from
        ``index_templates/``. It travels inside each search body (a temporary pipeline)
        because ``_msearch`` accepts no ``search_pipeline`` parameter (OpenSearch 3.6
        answers 400), while a body-level pipeline works in ``_msearch`` and ``_search``
        alike and leaves no state on the cluster.
        """
        from lr_opensearch.templates import render_hybrid_pipeline

        key = pipeline_name(config)
        if key not in self._pipelines:
            body = render_hybrid_pipeline(
                config.weights[0],
                config.weights[1],
                technique=config.normalization,
                combination=config.combination,
                rank_constant=config.rank_constant,
            )
            body.pop("description", None)
            self._pipelines[key] = body
        return self._pipelines[key]

    def fetch_sources(self, index: str, ids: Sequence[str], source: Any) -> dict[str, Any]:
        """``_source`` (as selected by ``source``) of the given documents, one ``_mget``.

        Hybrid search retrieves many candidates per sub-query but returns a page of k; it
        asks for the candidates without ``_source`` and fetches the page's here.
        """
        unique = list(dict.fromkeys(ids))
        if not unique:
            return {}
        resp = self._mget(index, [{"_id": i, "_source": source} for i in unique])
        return {str(d["_id"]): d.get("_source") for d in resp["docs"] if d.get("found")}

    def _mget(self, index: str, docs: list[dict[str, Any]]) -> Any:
        try:
            return self.client.mget(index=index, body={"docs": docs})
        except OpenSearchException as exc:
            raise EngineError(f"_mget of {len(docs)} documents on index {index!r} failed: "
                              f"{exc}") from exc

    def msearch(
        self,
        index: str,
        bodies: Sequence[Mapping[str, Any]],
        *,
        what: str = "search",
    ) -> list[EngineResult]:
        """Run bodies through ``_msearch`` in chunks; one EngineResult per body, in order."""
        results: list[EngineResult] = []
        header: dict[str, Any] = {"index": index}
        for start in range(0, len(bodies), MSEARCH_CHUNK):
            chunk = bodies[start : start + MSEARCH_CHUNK]
            lines: list[Any] = []
            for body in chunk:
                lines.extend((header, body))
            try:
                resp = self.client.msearch(body=lines)
            except OpenSearchException as exc:
                raise EngineError(f"_msearch on index {index!r} failed: {exc}") from exc
            for i, item in enumerate(resp["responses"]):
                results.append(parse_response(item, f"{what} #{start + i} on {index!r}"))
        return results
