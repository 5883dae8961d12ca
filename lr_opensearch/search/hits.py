"""Turning engine responses into ranked :class:`Hit` lists (fusion, pagination, explain).

Pure functions of the engine results, so they are unit-tested without a cluster; the
:class:`~lr_opensearch.search.Retriever` sends the requests and calls them. Every per-leg
value is a mapping keyed by leg name; each leg's score reads as its
:class:`~lr_opensearch.legs.Leg` says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lr_opensearch import legs as leg_registry
from lr_opensearch.engine.results import DocRef, EngineHit, EngineResult
from lr_opensearch.search.explain import Explanation, LegExplanation, token_contributions
from lr_opensearch.search.fusion import FusionConfig, fuse_many
from lr_opensearch.search.request import SearchRequest

Legs = dict[str, Any]  # leg name -> a value of that leg
FusedRow = tuple[str, float, list[Any], list[Any], list[Any]]  # fuse_many's rows


@dataclass(frozen=True)
class LegValues:
    """One document's per-leg values in one search: each leg's score as the engine returned
    it (``engine``), normalised (``norm``) and its rank in the leg's list (``ranks``)."""

    engine: Legs = field(default_factory=dict)
    norm: Legs = field(default_factory=dict)
    ranks: Legs = field(default_factory=dict)


@dataclass(frozen=True)
class Hit:
    """One search result.

    Attributes:
        doc_id: the document ``_id``.
        rank: 1-based rank in the full result list (``from_`` included).
        score: the ranking score (hybrid: fused; one leg: that leg's score as it reads,
            e.g. the dense inner product).
        scores: per leg that returned the document, its score as it reads (``Leg.score``:
            dense: inner product; sparse: dot product; bm25: BM25).
        source: the document ``_source`` as selected.
        explanation: filled when searched with ``explain=True``.
        first_stage_score: after a rerank stage, the score the first stage gave (``score``
            is then the reranker's); None without reranking.
        index: the concrete index that holds the document (a target of several indices may
            hold one ``_id`` in each: they are different hits).

    ``hit.<leg>_score`` reads ``scores`` (None: not returned by that leg).
    """

    doc_id: str
    rank: int
    score: float
    scores: Mapping[str, float] = field(default_factory=dict)
    source: Mapping[str, Any] | None = None
    explanation: Explanation | None = None
    first_stage_score: float | None = None
    index: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "scores", dict(self.scores))

    @property
    def title(self) -> str:
        return str((self.source or {}).get("title") or "")


def hit_key(h: EngineHit) -> str:
    """The fusion key of a hit: its ``_id``, qualified by its index when the engine names
    it (index names cannot hold ``#``), so that one ``_id`` in two indices stays two."""
    return f"{h.index}#{h.doc_id}" if h.index else h.doc_id


def refs_of(results: Sequence[EngineResult]) -> dict[str, DocRef]:
    """fusion key -> (index, _id) of every hit in ``results``."""
    return {hit_key(h): h.ref for r in results for h in r.hits}


def client_fusion(res: Sequence[EngineResult], config: FusionConfig) -> list[FusedRow]:
    """Fuse the legs' results, in ``config.legs`` order (see
    :func:`lr_opensearch.search.fusion.fuse_many`).

    ``opensearch`` semantics normalises the engine's scores, as the server does; ``linear``
    (the reference) normalises each leg's score as it reads (``Leg.linear_reads_score``:
    the dense leg's raw inner product).
    """
    lists = []
    for name, r in zip(config.legs, res, strict=True):
        hits = [(hit_key(h), h.score) for h in r.hits]
        leg = leg_registry.get(name)
        if leg.linear_reads_score and config.semantics == "linear":
            hits = [(d, leg.score(s)) for d, s in hits]
        lists.append(hits)
    return fuse_many(lists, config)


def assemble_client(
    res: Sequence[EngineResult],
    query_sparse: Mapping[str, float] | None,
    req: SearchRequest,
    fetched: Mapping[DocRef, Any] | None = None,
    table: list[FusedRow] | None = None,
) -> list[Hit]:
    """Hits of one query fused client side, cut to ``[from_, from_ + k)``.

    ``fetched``: the page's sources fetched after the search, by (index, _id) (else those
    of the results); ``table``: ``client_fusion(res, req.config)`` when the caller already
    has it.
    """
    table = client_fusion(res, req.config) if table is None else table
    refs = refs_of(res)
    sources = _sources(res) if fetched is None else fetched
    engine = _engine_scores(res, req.legs)
    legs = req.legs
    return [
        make_hit(
            refs[key],
            req.from_ + pos + 1,
            score,
            LegValues(engine[key], dict(zip(legs, norm, strict=True)),
                      dict(zip(legs, ranks, strict=True))),
            sources.get(refs[key]),
            query_sparse,
            req,
        )
        for pos, (key, score, _raw, norm, ranks) in enumerate(table[req.from_ : req.page_end])
    ]


def assemble_server(
    fused: EngineResult,
    parts: Sequence[EngineResult],
    query_sparse: Mapping[str, float] | None,
    req: SearchRequest,
    fetched: Mapping[DocRef, Any] | None = None,
) -> list[Hit]:
    """Hits of one query fused by the server; ``parts`` (the sub-query results, explain
    only) supply raw and normalised scores; ``fetched`` as in :func:`assemble_client`."""
    legs = req.legs
    detail = {row[0]: row for row in client_fusion(parts, req.config)} if parts else {}
    engine = _engine_scores(parts, legs) if parts else {}
    hits = []
    for pos, h in enumerate(fused.hits[req.from_ : req.page_end]):
        row = detail.get(hit_key(h))
        hits.append(
            make_hit(
                h.ref,
                req.from_ + pos + 1,
                h.score,
                LegValues(engine.get(hit_key(h), {}),
                          dict(zip(legs, row[3], strict=True)) if row else {},
                          dict(zip(legs, row[4], strict=True)) if row else {}),
                h.source if fetched is None else fetched.get(h.ref),
                query_sparse,
                req,
            )
        )
    return hits


def assemble_calibrated(
    res: EngineResult,
    parts: Sequence[EngineResult],
    boosts: Mapping[str, float],
    query_sparse: Mapping[str, float] | None,
    req: SearchRequest,
) -> list[Hit]:
    """Hits of one ``calibrated`` query (score: the engine's sum of boosted leg scores);
    ``parts`` (explain only: each leg's clause on the page's documents) supply each leg's
    engine score and its calibrated score (``norm`` = engine score / the leg's scale, so
    that ``sum(weight x norm)`` is the hit's score)."""
    legs = req.legs
    engine = _engine_scores(parts, legs) if parts else {}
    weights = req.config.weights
    hits = []
    for pos, h in enumerate(res.hits[req.from_ : req.page_end]):
        mine = engine.get(hit_key(h), {})
        norm = {name: s * boosts[name] / weights[name] for name, s in mine.items()}
        hits.append(make_hit(h.ref, req.from_ + pos + 1, h.score, LegValues(mine, norm),
                             h.source, query_sparse, req))
    return hits


def assemble_single(
    res: EngineResult, query_sparse: Mapping[str, float] | None, req: SearchRequest
) -> list[Hit]:
    """Hits of a one-leg search (score: that leg's score as it reads)."""
    leg = leg_registry.get(req.mode)
    hits = []
    for pos, h in enumerate(res.hits[req.from_ : req.page_end]):
        rank = req.from_ + pos + 1
        values = LegValues({req.mode: h.score}, ranks={req.mode: rank})
        hits.append(make_hit(h.ref, rank, leg.score(h.score), values, h.source, query_sparse,
                             req))
    return hits


def make_hit(
    ref: DocRef,
    rank: int,
    score: float,
    values: LegValues,
    source: Mapping[str, Any] | None,
    query_sparse: Mapping[str, float] | None,
    req: SearchRequest,
) -> Hit:
    """One Hit of the document ``ref`` (index, _id) from its per-leg ``values``."""
    engine, norm, ranks = values.engine, values.norm, values.ranks
    scores = {name: leg_registry.get(name).score(s) for name, s in engine.items()
              if s is not None}
    explanation = None
    if req.explain:
        doc_sparse = (source or {}).get(req.sparse_field)
        contrib = token_contributions(query_sparse or {}, doc_sparse)
        explanation = Explanation(
            legs={name: LegExplanation(engine.get(name), scores.get(name), norm.get(name),
                                       ranks.get(name)) for name in req.legs},
            fused=score if req.mode == leg_registry.HYBRID else None,
            sparse_from_tokens=sum(c.contribution for c in contrib) if doc_sparse else None,
            top_tokens=tuple(contrib[: req.top_tokens]),
        )
    if req.strip_sparse and source is not None:
        source = {key: v for key, v in source.items() if key != req.sparse_field}
    return Hit(ref[1], rank, score, scores, source, explanation, index=ref[0])


def _engine_scores(results: Sequence[EngineResult], legs: Sequence[str]) -> dict[str, Legs]:
    """fusion key -> {leg: engine score} from the legs' results (in ``legs`` order)."""
    out: dict[str, Legs] = {}
    for leg, res in zip(legs, results, strict=True):
        for h in res.hits:
            out.setdefault(hit_key(h), {})[leg] = h.score
    return out


def _sources(results: Sequence[EngineResult]) -> dict[DocRef, Mapping[str, Any] | None]:
    """(index, _id) -> _source, from whichever sub-query returned the document first."""
    out: dict[DocRef, Mapping[str, Any] | None] = {}
    for res in results:
        for h in res.hits:
            out.setdefault(h.ref, h.source)
    return out
