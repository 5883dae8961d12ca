"""What the engine adapters share: field names, hits, filters, response parsing, and the
one chunked ``_msearch`` / ``_mget`` loop.

:class:`EngineAdapter` is the base of :class:`~lr_opensearch.search.opensearch.OpenSearchAdapter`
and :class:`~lr_opensearch.search.elasticsearch.ElasticsearchAdapter`, which add their query
DSL and the two transport calls (``_send_msearch``, ``_send_mget``) in their client's spelling.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lr_opensearch.errors import ConfigError, EngineError

logger = logging.getLogger(__name__)

# The index layout's field names (docs/ARCHITECTURE.md): the one definition.
DENSE_FIELD = "lr_dense"
SPARSE_FIELD = "lr_sparse"
TEXT_FIELDS = ("title", "text")  # BM25 leg, highlighting
METADATA_FIELD = "metadata"  # a record's extra keys
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


class EngineAdapter:
    """The engine-neutral half of an adapter: BM25 clause, search bodies, ``_msearch`` in
    chunks, ``_mget`` of a page's sources. Subclasses add the query DSL and transport.

    Args:
        client: the engine's client.
        dense_field / sparse_field: the index's LightRetriever fields.
    """

    engine = "?"
    transport_errors: tuple[type[BaseException], ...] = ()

    def __init__(
        self, client: Any, *, dense_field: str = DENSE_FIELD, sparse_field: str = SPARSE_FIELD
    ):
        self.client = client
        self.dense_field = dense_field
        self.sparse_field = sparse_field

    def text_query(self, text: str, *, filter: Filter = None) -> dict[str, Any]:
        """BM25 baseline: ``multi_match`` over title and text."""
        query: dict[str, Any] = {"multi_match": {"query": text, "fields": list(TEXT_FIELDS)}}
        clauses = filter_clauses(filter)
        return {"bool": {"must": [query], "filter": clauses}} if clauses else query

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
            return self._send_mget(index, docs)
        except self.transport_errors as exc:
            raise EngineError(f"_mget of {len(docs)} documents on {self.engine} index "
                              f"{index!r} failed: {exc}") from exc

    def msearch(
        self,
        index: str,
        bodies: Sequence[Mapping[str, Any]],
        *,
        what: str = "search",
    ) -> list[EngineResult]:
        """Run bodies through ``_msearch`` in chunks; one EngineResult per body, in order."""
        results: list[EngineResult] = []
        for start in range(0, len(bodies), MSEARCH_CHUNK):
            chunk = bodies[start : start + MSEARCH_CHUNK]
            lines: list[Any] = []
            for body in chunk:
                lines.extend(({"index": index}, dict(body)))
            try:
                resp = self._send_msearch(lines)
            except self.transport_errors as exc:
                raise EngineError(f"_msearch on {self.engine} index {index!r} failed: "
                                  f"{exc}") from exc
            for i, item in enumerate(resp["responses"]):
                results.append(parse_response(item, f"{what} #{start + i} on {index!r}"))
        return results

    def _send_msearch(self, lines: list[Any]) -> Any:
        raise NotImplementedError

    def _send_mget(self, index: str, docs: list[dict[str, Any]]) -> Any:
        raise NotImplementedError
