"""Turning engine responses into ranked :class:`Hit` lists (fusion, pagination, explain).

Pure functions of the engine results, so they are unit-tested without a cluster; the
:class:`~lr_opensearch.search.Retriever` sends the requests and calls them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lr_opensearch.fusion import FusionConfig, fuse_many
from lr_opensearch.search_dsl import EngineResult, Filter
from lr_opensearch.search_explain import Explanation, inner_product_from_score, token_contributions

EXPLAIN_TOP_TOKENS = 5

Pair = tuple[Any, Any]  # (dense, sparse) values of one document


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        doc_id: the document ``_id``.
        rank: 1-based rank in the full result list (``from_`` included).
        score: the ranking score (hybrid: fused; dense: inner product; sparse: dot product).
        dense_score: query-document inner product, when the dense sub-query returned the doc.
        sparse_score: sparse dot product, when the sparse sub-query returned the doc.
        source: the document ``_source`` as selected.
        explanation: filled when searched with ``explain=True``.
    """

    doc_id: str
    rank: int
    score: float
    dense_score: float | None = None
    sparse_score: float | None = None
    source: Mapping[str, Any] | None = None
    explanation: Explanation | None = None

    @property
    def title(self) -> str:
        return str((self.source or {}).get("title") or "")


@dataclass(frozen=True)
class SearchRequest:
    """Per-call settings, resolved once for a batch.

    ``path`` is ``server`` or ``client`` for hybrid search, ``single`` for dense / sparse.
    """

    k: int
    from_: int
    mode: str
    path: str
    config: FusionConfig
    filter: Filter
    source: Any
    strip_sparse: bool
    timeout: str | None
    explain: bool
    sparse_field: str = "lr_sparse"
    top_tokens: int = EXPLAIN_TOP_TOKENS

    @property
    def depth(self) -> int:
        return self.from_ + self.k


def client_fusion(res: Sequence[EngineResult], config: FusionConfig) -> list[Any]:
    """Fuse a [dense, sparse] result pair (see :func:`lr_opensearch.fusion.fuse_many`).

    ``opensearch`` semantics normalises the engine's (transformed) dense score, as the
    server does; ``linear`` (the reference) normalises the raw inner product.
    """
    dense_hits = [(h.doc_id, h.score) for h in res[0].hits]
    if config.semantics == "linear":
        dense_hits = [(d, inner_product_from_score(s)) for d, s in dense_hits]
    return fuse_many([dense_hits, [(h.doc_id, h.score) for h in res[1].hits]], config)


def assemble_client(
    res: Sequence[EngineResult],
    query_sparse: Mapping[str, float] | None,
    req: SearchRequest,
    fetched: Mapping[str, Any] | None = None,
    table: list[Any] | None = None,
) -> list[Hit]:
    """Hits of one query fused client side, cut to ``[from_, from_ + k)``.

    ``fetched``: the page's sources fetched after the search (else those of the results);
    ``table``: ``client_fusion(res, req.config)`` when the caller already has it.
    """
    table = client_fusion(res, req.config) if table is None else table
    sources = _sources(res) if fetched is None else fetched
    engine = _engine_scores(res)
    return [
        make_hit(
            doc_id,
            req.from_ + pos + 1,
            score,
            engine[doc_id],
            (norm[0], norm[1]),
            (ranks[0], ranks[1]),
            sources.get(doc_id),
            query_sparse,
            req,
        )
        for pos, (doc_id, score, _raw, norm, ranks) in enumerate(table[req.from_ : req.depth])
    ]


def assemble_server(
    fused: EngineResult,
    parts: Sequence[EngineResult],
    query_sparse: Mapping[str, float] | None,
    req: SearchRequest,
    fetched: Mapping[str, Any] | None = None,
) -> list[Hit]:
    """Hits of one query fused by the server; ``parts`` (the sub-query results, explain
    only) supply raw and normalised scores; ``fetched`` as in :func:`assemble_client`."""
    detail = {row[0]: row for row in client_fusion(parts, req.config)} if parts else {}
    engine = _engine_scores(parts) if parts else {}
    hits = []
    for pos, h in enumerate(fused.hits[req.from_ : req.depth]):
        row = detail.get(h.doc_id)
        norm: Pair = (row[3][0], row[3][1]) if row else (None, None)
        ranks: Pair = (row[4][0], row[4][1]) if row else (None, None)
        hits.append(
            make_hit(
                h.doc_id,
                req.from_ + pos + 1,
                h.score,
                engine.get(h.doc_id, (None, None)),
                norm,
                ranks,
                h.source if fetched is None else fetched.get(h.doc_id),
                query_sparse,
                req,
            )
        )
    return hits


def assemble_single(
    res: EngineResult, query_sparse: Mapping[str, float] | None, req: SearchRequest
) -> list[Hit]:
    """Hits of a dense-only or sparse-only search (score: inner product / dot product)."""
    hits = []
    for pos, h in enumerate(res.hits[req.from_ : req.depth]):
        rank = req.from_ + pos + 1
        if req.mode == "dense":
            engine: Pair = (h.score, None)
            ranks: Pair = (rank, None)
            score = inner_product_from_score(h.score)
        else:
            engine, ranks, score = (None, h.score), (None, rank), h.score
        hits.append(
            make_hit(
                h.doc_id, rank, score, engine, (None, None), ranks, h.source, query_sparse, req
            )
        )
    return hits


def make_hit(
    doc_id: str,
    rank: int,
    score: float,
    engine: Pair,
    norm: Pair,
    ranks: Pair,
    source: Mapping[str, Any] | None,
    query_sparse: Mapping[str, float] | None,
    req: SearchRequest,
) -> Hit:
    """One Hit; ``engine`` holds the (dense, sparse) scores as the engine returned them."""
    dense_engine, sparse_raw = engine
    ip = inner_product_from_score(dense_engine) if dense_engine is not None else None
    explanation = None
    if req.explain:
        doc_sparse = (source or {}).get(req.sparse_field)
        contrib = token_contributions(query_sparse or {}, doc_sparse)
        explanation = Explanation(
            dense_ip=ip,
            dense_engine_score=dense_engine,
            sparse_score=sparse_raw,
            dense_norm=norm[0],
            sparse_norm=norm[1],
            fused=score if req.mode == "hybrid" else None,
            dense_rank=ranks[0],
            sparse_rank=ranks[1],
            sparse_from_tokens=sum(c.contribution for c in contrib) if doc_sparse else None,
            top_tokens=tuple(contrib[: req.top_tokens]),
        )
    if req.strip_sparse and source is not None:
        source = {key: v for key, v in source.items() if key != req.sparse_field}
    return Hit(doc_id, rank, score, ip, sparse_raw, source, explanation)


def _engine_scores(results: Sequence[EngineResult]) -> dict[str, Pair]:
    """doc id -> (dense engine score, sparse score) from a [dense, sparse] result pair."""
    dense = {h.doc_id: h.score for h in results[0].hits}
    sparse = {h.doc_id: h.score for h in results[1].hits}
    return {d: (dense.get(d), sparse.get(d)) for d in dense.keys() | sparse.keys()}


def _sources(results: Sequence[EngineResult]) -> dict[str, Mapping[str, Any] | None]:
    """doc id -> _source, from whichever sub-query returned the document first."""
    out: dict[str, Mapping[str, Any] | None] = {}
    for res in results:
        for h in res.hits:
            out.setdefault(h.doc_id, h.source)
    return out
