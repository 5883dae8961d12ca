"""The one fusion of dense and sparse result lists (client-side hybrid search).

Two documented semantics:

``opensearch``
    Mirrors the neural-search ``normalization-processor`` / ``score-ranker-processor``
    (read from opensearch-project/neural-search, releases 2.10 to 3.x), in float32 like the
    server:

    * ``min_max``: per sub-query over its returned hits, ``(s - min) / (max - min)``; a
      normalised 0 becomes 0.001; when ``max == min`` every hit gets 1.0.
    * ``l2``: ``s / sqrt(sum of squares)`` per sub-query (0 when the norm is 0).
    * A document missing from a sub-query carries the score 0.0 for it. The combinations
      then treat that 0.0 differently, exactly as the server does:
      ``arithmetic_mean`` keeps every score ``>= 0`` (so a missing document's 0 *and* its
      weight stay in: with weights summing to 1 the result is ``sum(w_i * s_i)``);
      ``geometric_mean`` and ``harmonic_mean`` skip scores ``<= 0`` together with their
      weights (weighted mean over the sub-queries that found the document).
    * ``rrf``: a hit at 0-based position ``p`` of a sub-query scores
      ``1 / (rank_constant + p + 1)`` (rounded to 10 decimals, then float32); the fused
      score is ``sum(w_i * rrf_i)`` over the sub-queries that found it.
    * Weights must lie in [0, 1] and sum to 1 (+-0.01), as the server demands.

``linear``
    The LightRetriever reference (``fuse_scores_linear``): per sub-query
    ``(s - min) / (max - min + 1e-8)`` in float64, missing = 0, fused score
    ``sum(w_i * s_i)``. Note that a sub-query whose hits all share one score contributes
    0 for them (the reference's epsilon makes the numerator 0). ``l2`` and ``rrf`` are
    accepted too; geometric and harmonic means are not (they are not a weighted sum).

Ties are broken deterministically: fused score descending, then document id ascending.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np

from lr_opensearch import legs as leg_registry
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import DEFAULT_RANK_CONSTANT, FusionConfig, default_weights, fusion_config

MIN_SCORE = np.float32(0.001)  # what neural-search gives a min-max-normalised 0
LINEAR_EPS = 1e-8  # the reference implementation's denominator epsilon

HitList = Sequence[tuple[str, float]]


@dataclass(frozen=True)
class FusedHit:
    """One document of a fused list.

    Attributes:
        doc_id: the document's ``_id``.
        score: the fused score.
        scores: per leg that returned the document, its raw score as given to ``fuse``
            (for OpenSearch knn: the engine's transformed score).
        norms: per leg that returned it, the normalised score (RRF: the reciprocal-rank term).
        ranks: per leg that returned it, its 1-based position in that leg's list.

    ``<leg>_score`` / ``<leg>_norm`` / ``<leg>_rank`` read those mappings (None: the leg
    did not return the document, or was not searched).
    """

    doc_id: str
    score: float
    scores: Mapping[str, float] = field(default_factory=dict)
    norms: Mapping[str, float] = field(default_factory=dict)
    ranks: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("scores", "norms", "ranks"):
            object.__setattr__(self, name, dict(getattr(self, name)))



def bundle_weights(config: Any) -> dict[str, float]:
    """A bundle config's default weights per leg."""
    return dict(config.weights)


def _ranked(hits: HitList, side: str) -> tuple[list[str], np.ndarray]:
    """Doc ids and float64 scores in rank order (stable sort by score desc keeps engine ties)."""
    ids: list[str] = []
    scores: list[float] = []
    seen: set[str] = set()
    for doc_id, score in hits:
        if doc_id in seen:
            raise ConfigError(f"{side} hits list document {doc_id!r} twice; ids must be unique")
        if not math.isfinite(score):
            raise ConfigError(f"{side} hit {doc_id!r} has a non-finite score {score!r}")
        seen.add(doc_id)
        ids.append(str(doc_id))
        scores.append(float(score))
    order = sorted(range(len(ids)), key=lambda i: -scores[i])
    return [ids[i] for i in order], np.asarray([scores[i] for i in order], dtype=np.float64)


def _rrf_term(position: int, rank_constant: int) -> float:
    """neural-search's 1 / (rank_constant + position + 1), 10 decimals half-up."""
    value = Decimal(1) / Decimal(rank_constant + position + 1)
    return float(value.quantize(Decimal("1e-10"), rounding=ROUND_HALF_UP))


def _normalize_opensearch(scores: np.ndarray, method: str, rank_constant: int) -> np.ndarray:
    """float32 normalisation exactly as the server does it. scores: [n] in rank order."""
    s = scores.astype(np.float32)
    if s.size == 0:
        return s
    if method == "rrf":
        return np.asarray([_rrf_term(p, rank_constant) for p in range(s.size)], dtype=np.float32)
    if method == "l2":
        norm = np.float32(0.0)
        for v in s:  # float32 accumulation, like the Java loop
            norm = np.float32(norm + v * v)
        norm = np.float32(math.sqrt(float(norm)))
        return np.zeros_like(s) if norm == 0 else (s / norm).astype(np.float32)
    lo, hi = s.min(), s.max()
    if hi == lo:
        return np.ones_like(s)
    out = ((s - lo) / np.float32(hi - lo)).astype(np.float32)
    out[out == 0.0] = MIN_SCORE
    return out


def _normalize_linear(scores: np.ndarray, method: str, rank_constant: int) -> np.ndarray:
    """float64 normalisation of the LightRetriever reference. scores: [n] in rank order."""
    if scores.size == 0:
        return scores
    if method == "rrf":
        return np.asarray([1.0 / (rank_constant + p + 1) for p in range(scores.size)])
    if method == "l2":
        norm = float(np.sqrt(np.sum(scores * scores)))
        return np.zeros_like(scores) if norm == 0 else scores / norm
    lo, hi = scores.min(), scores.max()
    return (scores - lo) / (hi - lo + LINEAR_EPS)


def _combine_opensearch(row: np.ndarray, weights: np.ndarray, combination: str) -> float:
    """One document's server-side combination. row: [n_subqueries] float32, missing = 0."""
    total = np.float32(0.0)
    wsum = np.float32(0.0)
    if combination in ("arithmetic_mean", "rrf"):
        for s, w in zip(row, weights, strict=True):
            if s >= 0.0:
                total = np.float32(total + np.float32(s * w))
                wsum = np.float32(wsum + w)
        if wsum == 0.0:
            return 0.0
        return float(total) if combination == "rrf" else float(np.float32(total / wsum))
    if combination == "geometric_mean":
        for s, w in zip(row, weights, strict=True):
            if s > 0.0:
                wsum = np.float32(wsum + w)
                total = np.float32(float(total) + float(w) * math.log(float(s)))
        return 0.0 if wsum == 0.0 else float(np.float32(math.exp(float(np.float32(total / wsum)))))
    for s, w in zip(row, weights, strict=True):  # harmonic_mean
        if s > 0.0:
            wsum = np.float32(wsum + w)
            total = np.float32(total + np.float32(w / s))
    return float(np.float32(wsum / total)) if total > 0.0 else 0.0


def fuse_many(
    results: Sequence[HitList], config: FusionConfig, weights: Sequence[float] | None = None
) -> list[tuple[str, float, list[float | None], list[float | None], list[int | None]]]:
    """Fuse any number of sub-query result lists.

    Args:
        results: per sub-query, ``(doc_id, raw_score)`` pairs (engine order; re-sorted
            stably by score descending).
        config: validated settings (its ``leg_weights`` are used unless ``weights`` is
            given, one per sub-query; they are not re-validated here).
        weights: optional per-sub-query weights, len == len(results).

    Returns:
        ``(doc_id, fused, raw_scores, norm_scores, ranks)`` tuples, sorted by fused score
        descending then doc id; the three lists have one entry per sub-query (None: missing).
    """
    w = list(config.leg_weights if weights is None else weights)
    if len(w) != len(results):
        raise ConfigError(
            f"{len(w)} weights for {len(results)} sub-queries; give one per sub-query"
        )
    opensearch = config.semantics == "opensearch"
    method = "rrf" if config.combination == "rrf" else config.normalization
    table: dict[str, tuple[list[float | None], list[float | None], list[int | None]]] = {}
    n = len(results)
    for j, hits in enumerate(results):
        ids, raw = _ranked(hits, side=f"sub-query {j}")
        norm_fn = _normalize_opensearch if opensearch else _normalize_linear
        normed = norm_fn(raw, method, config.rank_constant)
        for pos, doc_id in enumerate(ids):
            entry = table.setdefault(doc_id, ([None] * n, [None] * n, [None] * n))
            entry[0][j] = float(raw[pos])
            entry[1][j] = float(normed[pos])
            entry[2][j] = pos + 1
    weights32 = np.asarray(w, dtype=np.float32)
    out = []
    for doc_id, (raw_s, norm_s, ranks) in table.items():
        if opensearch:
            row = np.asarray([0.0 if v is None else v for v in norm_s], dtype=np.float32)
            fused = _combine_opensearch(row, weights32, config.combination)
        else:
            fused = float(sum(wi * v for wi, v in zip(w, norm_s, strict=True) if v is not None))
        out.append((doc_id, fused, raw_s, norm_s, ranks))
    out.sort(key=lambda t: (-t[1], t[0]))
    return out


def fuse(
    *lists: HitList | Mapping[str, HitList],
    weights: Sequence[float] | Mapping[str, float] | None = None,
    semantics: str = "opensearch",
    normalization: str = "min_max",
    combination: str = "arithmetic_mean",
    rank_constant: int = DEFAULT_RANK_CONSTANT,
    k: int | None = None,
    **leg_hits: HitList | None,
) -> list[FusedHit]:
    """Fuse the legs' result lists into one ranked list.

    Args:
        lists: the legs' ``(doc_id, score)`` lists, best first: one mapping ``{leg: hits}``,
            or lists in leg order (dense, sparse, ...).
        weights: (dense, sparse), (dense, sparse, bm25) or ``{leg: weight}``; a leg of
            weight 0 takes no part (as on the server, where it is not sent). None: the
            legs' default weights (``legs.default_weights()``) of the lists given, scaled
            to sum to 1.
        semantics: ``opensearch`` or ``linear`` (see the module docstring).
        normalization: ``min_max`` or ``l2`` (ignored by ``rrf``).
        combination: ``arithmetic_mean``, ``geometric_mean``, ``harmonic_mean`` or ``rrf``.
        rank_constant: RRF's constant (1..10000).
        k: keep only the best ``k`` (None: all; larger than the union: all).
        leg_hits: ``<leg>_hits=`` lists by keyword (e.g. the BM25 leg's).

    Returns:
        FusedHit list sorted by fused score descending, then doc id.

    Raises:
        ConfigError: an unknown option (the message lists valid ones), bad weights,
            a weighted leg without hits, duplicate ids or non-finite scores.
    """
    given = _leg_lists(lists, leg_hits)
    if weights is None:
        weights = _given_defaults(given)
    config = fusion_config(weights, semantics, normalization, combination, rank_constant)
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
        raise ConfigError(f"k must be a non-negative integer or None, got {k!r}")
    for leg in config.legs:
        if given.get(leg) is None:
            raise ConfigError(f"a {leg} weight was given without {leg}_hits")
    fused = fuse_many([given[leg] or [] for leg in config.legs], config)
    hits = [FusedHit(doc_id, score, _present(config.legs, raw), _present(config.legs, norm),
                     _present(config.legs, ranks))
            for doc_id, score, raw, norm, ranks in fused]
    return hits if k is None else hits[:k]


def _given_defaults(given: Mapping[str, HitList | None]) -> dict[str, float]:
    """The legs' default weights, of the legs whose lists were given, summing to 1."""
    defaults = default_weights()
    present = {leg: defaults[leg] for leg, hits in given.items()
               if hits is not None and defaults[leg] > 0.0}
    total = sum(present.values())
    if total == 0.0:
        raise ConfigError(f"none of the given legs ({', '.join(given) or 'none'}) has a default "
                          "weight; pass weights={leg: weight}")
    return {leg: w / total for leg, w in present.items()}


def _present(legs: Sequence[str], values: Sequence[Any]) -> dict[str, Any]:
    """{leg: value} of the legs that returned the document (per-sub-query values)."""
    return {leg: v for leg, v in zip(legs, values, strict=True) if v is not None}


def _leg_lists(lists: Sequence[Any], named: Mapping[str, HitList | None]) -> dict[str, Any]:
    """{leg: hits} from fuse()'s positional lists / mapping and ``<leg>_hits`` keywords."""
    legs = leg_registry.names()
    if len(lists) == 1 and isinstance(lists[0], Mapping):
        given = dict(lists[0])
    else:
        if len(lists) > len(legs):
            raise ConfigError(f"{len(lists)} hit lists for {len(legs)} legs ({', '.join(legs)})")
        given = dict(zip(legs, lists, strict=False))
    for key, hits in named.items():
        leg = key.removesuffix("_hits")
        if not key.endswith("_hits") or leg not in legs:
            raise ConfigError(f"fuse() got an unknown argument {key!r}; give <leg>_hits with a "
                              f"leg of {', '.join(legs)}")
        given[leg] = hits
    unknown = sorted(set(given) - set(legs))
    if unknown:
        raise ConfigError(f"unknown leg(s) {unknown}; valid legs: {', '.join(legs)}")
    return given
