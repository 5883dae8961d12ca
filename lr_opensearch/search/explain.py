"""Explanations: each leg's score, normalised score and rank, and the query tokens behind
a sparse score.

Each leg's score reads as its :class:`~lr_opensearch.legs.Leg` says (the dense leg's knn
score is turned back into the inner product, :mod:`lr_opensearch.legs.scores`). The sparse score of a ``bool.should`` of
``rank_feature`` (linear, boost = query count) clauses is ``sum(count * doc_weight)``
over the shared keys; :func:`token_contributions` rebuilds that sum per token from the
document's stored ``lr_sparse`` map (exact values; the engine scores with values rounded
to about 9 significant bits, so the sum matches the engine's score only approximately).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lr_opensearch.bundle.keys import decode_key

LUCENE_FEATURE_REL_TOL = 2.0**-8
"""Relative error bound of a rank_feature value: Lucene keeps 9 significant bits."""


@dataclass(frozen=True)
class TokenContribution:
    """One query token's share of a document's sparse score.

    Attributes:
        token: the vocabulary token (decoded key).
        key: the encoded ``lr_sparse`` sub-field name.
        query_count: how often the token occurs in the query (the clause boost).
        doc_weight: the document's stored weight for the token.
        contribution: ``query_count * doc_weight``.
    """

    token: str
    key: str
    query_count: float
    doc_weight: float
    contribution: float


@dataclass(frozen=True)
class LegExplanation:
    """One leg's part in a hit.

    Attributes:
        engine_score: the score as the engine returned it (dense: the transformed knn score).
        score: how it reads (dense: the inner product; see ``Leg.score``).
        norm: the normalised score the fusion used (RRF: the reciprocal-rank term).
        rank: 1-based rank within the leg's list.
    """

    engine_score: float | None = None
    score: float | None = None
    norm: float | None = None
    rank: int | None = None


@dataclass(frozen=True)
class Explanation:
    """Why a hit scored what it scored.

    Attributes:
        legs: per searched leg (in sub-query order), its :class:`LegExplanation` (all None
            when that leg did not return the document).
        fused: the fused score (server or client); None for a one-leg search.
        sparse_from_tokens: sum of all token contributions (exact stored weights).
        top_tokens: the largest contributions, descending.

    A leg's parts are read through ``legs[name]`` (the pre-registry ``<leg>_score`` /
    ``<leg>_norm`` / ``<leg>_rank`` attributes of this class, ``Hit``, ``FusedHit`` and
    ``BundleConfig``'s ``<leg>_weight`` were removed on 2026-11-27: use the mappings).
    """

    legs: Mapping[str, LegExplanation]
    fused: float | None
    sparse_from_tokens: float | None
    top_tokens: tuple[TokenContribution, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "legs", dict(self.legs))

    def leg(self, name: str) -> LegExplanation:
        """The named leg's part (all None if it was not searched)."""
        return self.legs.get(name) or LegExplanation()



def token_contributions(
    query_sparse: Mapping[str, float], doc_sparse: Mapping[str, float] | None
) -> list[TokenContribution]:
    """Every shared key's ``count * weight``, largest first (ties by token).

    Args:
        query_sparse: encoded key -> query count.
        doc_sparse: encoded key -> document weight (the ``lr_sparse`` source map).
    """
    if not doc_sparse:
        return []
    out = []
    for key, count in query_sparse.items():
        weight = doc_sparse.get(key)
        if weight is None:
            continue
        out.append(
            TokenContribution(
                token=decode_key(key),
                key=key,
                query_count=float(count),
                doc_weight=float(weight),
                contribution=float(count) * float(weight),
            )
        )
    out.sort(key=lambda c: (-c.contribution, c.token))
    return out
