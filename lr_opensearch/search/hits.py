"""Turning engine responses into ranked :class:`Hit` lists (fusion, pagination, explain).

Pure functions of the engine results, so they are unit-tested without a cluster; the
:class:`~lr_opensearch.search.Retriever` sends the requests and calls them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lr_opensearch.search.engine import EngineResult, Filter
from lr_opensearch.search.explain import Explanation, inner_product_from_score, token_contributions
from lr_opensearch.search.fusion import FusionConfig, fuse_many

EXPLAIN_TOP_TOKENS = 5

Legs = dict[str, Any]  # leg name ("dense", "sparse", "bm25") -> a value of that leg


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        doc_id: the document ``_id``.
        rank: 1-based rank in the full result list (``from_`` included).
        score: the ranking score (hybrid: fused; dense: inner product; sparse: dot
            product; bm25: BM25).
        dense_score: query-document inner product, when the dense sub-query returned the doc.
        sparse_score: sparse dot product, when the sparse sub-query returned the doc.
        source: the document ``_source`` as selected.
        explanation: filled when searched with ``explain=True``.
        bm25_score: BM25 score, when the BM25 leg returned the doc.
        first_stage_score: after a rerank stage, the score the first stage gave (``score``
            is then the reranker's); None without reranking.
    """

    doc_id: str
    rank: int
    score: float
    dense_score: float | None = None
    sparse_score: float | None = None
    source: Mapping[str, Any] | None = None
    explanation: Explanation | None = None
    bm25_score: float | None = None
    first_stage_score: float | None = None

    @property
    def title(self) -> str:
        return str((self.source or {}).get("title") or "")


@dataclass(frozen=True)
class SearchRequest:
    """Per-call settings, resolved once for a batch.

    ``path`` is ``server`` or ``client`` for hybrid search, ``single`` for one leg alone.
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

    @property
    def legs(self) -> tuple[str, ...]:
        """The legs searched, in sub-query order."""
        return self.config.legs if self.mode == "hybrid" else (self.mode,)


def client_fusion(res: Sequence[EngineResult], config: FusionConfig) -> list[Any]:
    """Fuse the legs' results, in ``config.legs`` order (see
    :func:`lr_opensearch.search.fusion.fuse_many`).

    ``opensearch`` semantics normalises the engine's (transformed) dense score, as the
    server does; ``linear`` (the reference) normalises the raw inner product.
    """
    lists = []
    for leg, r in zip(config.legs, res, strict=True):
        hits = [(h.doc_id, h.score) for h in r.hits]
        if leg == "dense" and config.semantics == "linear":
            hits = [(d, inner_product_from_score(s)) for d, s in hits]
        lists.append(hits)
    return fuse_many(lists, config)


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
    engine = _engine_scores(res, req.legs)
    legs = req.legs
    return [
        make_hit(
            doc_id,
            req.from_ + pos + 1,
            score,
            engine[doc_id],
            dict(zip(legs, norm, strict=True)),
            dict(zip(legs, ranks, strict=True)),
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
    legs = req.legs
    detail = {row[0]: row for row in client_fusion(parts, req.config)} if parts else {}
    engine = _engine_scores(parts, legs) if parts else {}
    hits = []
    for pos, h in enumerate(fused.hits[req.from_ : req.depth]):
        row = detail.get(h.doc_id)
        hits.append(
            make_hit(
                h.doc_id,
                req.from_ + pos + 1,
                h.score,
                engine.get(h.doc_id, {}),
                dict(zip(legs, row[3], strict=True)) if row else {},
                dict(zip(legs, row[4], strict=True)) if row else {},
                h.source if fetched is None else fetched.get(h.doc_id),
                query_sparse,
                req,
            )
        )
    return hits


def assemble_single(
    res: EngineResult, query_sparse: Mapping[str, float] | None, req: SearchRequest
) -> list[Hit]:
    """Hits of a one-leg search (score: inner product / sparse dot product / BM25)."""
    hits = []
    for pos, h in enumerate(res.hits[req.from_ : req.depth]):
        rank = req.from_ + pos + 1
        score = inner_product_from_score(h.score) if req.mode == "dense" else h.score
        hits.append(make_hit(h.doc_id, rank, score, {req.mode: h.score}, {},
                             {req.mode: rank}, h.source, query_sparse, req))
    return hits


def make_hit(
    doc_id: str,
    rank: int,
    score: float,
    engine: Legs,
    norm: Legs,
    ranks: Legs,
    source: Mapping[str, Any] | None,
    query_sparse: Mapping[str, float] | None,
    req: SearchRequest,
) -> Hit:
    """One Hit; ``engine`` holds each leg's score as the engine returned it."""
    dense_engine = engine.get("dense")
    sparse_raw, bm25_raw = engine.get("sparse"), engine.get("bm25")
    ip = inner_product_from_score(dense_engine) if dense_engine is not None else None
    explanation = None
    if req.explain:
        doc_sparse = (source or {}).get(req.sparse_field)
        contrib = token_contributions(query_sparse or {}, doc_sparse)
        explanation = Explanation(
            dense_ip=ip,
            dense_engine_score=dense_engine,
            sparse_score=sparse_raw,
            dense_norm=norm.get("dense"),
            sparse_norm=norm.get("sparse"),
            fused=score if req.mode == "hybrid" else None,
            dense_rank=ranks.get("dense"),
            sparse_rank=ranks.get("sparse"),
            sparse_from_tokens=sum(c.contribution for c in contrib) if doc_sparse else None,
            top_tokens=tuple(contrib[: req.top_tokens]),
            bm25_score=bm25_raw,
            bm25_norm=norm.get("bm25"),
            bm25_rank=ranks.get("bm25"),
        )
    if req.strip_sparse and source is not None:
        source = {key: v for key, v in source.items() if key != req.sparse_field}
    return Hit(doc_id, rank, score, ip, sparse_raw, source, explanation, bm25_raw)


def _engine_scores(results: Sequence[EngineResult], legs: Sequence[str]) -> dict[str, Legs]:
    """doc id -> {leg: engine score} from the legs' results (in ``legs`` order)."""
    out: dict[str, Legs] = {}
    for leg, res in zip(legs, results, strict=True):
        for h in res.hits:
            out.setdefault(h.doc_id, {})[leg] = h.score
    return out


def _sources(results: Sequence[EngineResult]) -> dict[str, Mapping[str, Any] | None]:
    """doc id -> _source, from whichever sub-query returned the document first."""
    out: dict[str, Mapping[str, Any] | None] = {}
    for res in results:
        for h in res.hits:
            out.setdefault(h.doc_id, h.source)
    return out
