"""Explain helpers: exact dense scores and the query tokens behind a sparse score.

OpenSearch (Lucene ``MAXIMUM_INNER_PRODUCT``) and Elasticsearch (``max_inner_product``)
report an inner-product score transformed to stay positive::

    score = 1 + ip        if ip >= 0
    score = 1 / (1 - ip)  if ip < 0

:func:`inner_product_from_score` inverts it. The sparse score of a ``bool.should`` of
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


def inner_product_from_score(score: float) -> float:
    """Recover the inner product from an engine's transformed max-inner-product score."""
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


def score_from_inner_product(ip: float) -> float:
    """The engine's transform (the inverse of :func:`inner_product_from_score`)."""
    return 1.0 + ip if ip >= 0.0 else 1.0 / (1.0 - ip)


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
class Explanation:
    """Why a hit scored what it scored.

    Attributes:
        dense_ip: inner product of query and document vectors (recovered from the
            engine's transformed score), None if the dense sub-query did not return it.
        dense_engine_score: the engine's (transformed) dense score.
        sparse_score: the engine's sparse score (approximately sum of contributions).
        dense_norm / sparse_norm: normalised scores used by the fusion.
        fused: the fused score (server or client).
        dense_rank / sparse_rank: 1-based rank within each sub-query, None if missing.
        sparse_from_tokens: sum of all token contributions (exact stored weights).
        top_tokens: the largest contributions, descending.
        bm25_score / bm25_norm / bm25_rank: the BM25 leg's score, normalised score and
            rank (None without a BM25 leg or when it did not return the document).
    """

    dense_ip: float | None
    dense_engine_score: float | None
    sparse_score: float | None
    dense_norm: float | None
    sparse_norm: float | None
    fused: float | None
    dense_rank: int | None
    sparse_rank: int | None
    sparse_from_tokens: float | None
    top_tokens: tuple[TokenContribution, ...]
    bm25_score: float | None = None
    bm25_norm: float | None = None
    bm25_rank: int | None = None


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
