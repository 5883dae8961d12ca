"""The engines' transform of a max-inner-product knn score, and its inverse.

OpenSearch (Lucene ``MAXIMUM_INNER_PRODUCT``) and Elasticsearch (``max_inner_product``)
report an inner-product score transformed to stay positive::

    score = 1 + ip        if ip >= 0
    score = 1 / (1 - ip)  if ip < 0
"""

from __future__ import annotations


def inner_product_from_score(score: float) -> float:
    """Recover the inner product from an engine's transformed max-inner-product score."""
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


def score_from_inner_product(ip: float) -> float:
    """The engine's transform (the inverse of :func:`inner_product_from_score`)."""
    return 1.0 + ip if ip >= 0.0 else 1.0 / (1.0 - ip)
