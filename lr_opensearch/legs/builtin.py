"""The built-in legs: LightRetriever dense, LightRetriever sparse, the engine's BM25, and
the full model's dense query (the reference, weight 0 unless asked for).

Default weights of new bundles, chosen on SciFact *train* queries (never on test
judgments): a grid in steps of 0.1 over the three legs with the table `lr bundle build
--fit-corpus` fits, IDF sparse query weights and OpenSearch min-max / arithmetic-mean
fusion; 0.4 / 0.2 / 0.4 was best (nDCG@10 0.715; 0.3/0.3/0.4 0.711, 0.3/0.2/0.5 0.710,
which had won with the first version of the fit). docs/RESULTS.md has the figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lr_opensearch.legs.leg import (
    FULL_QUERY_VECTOR,
    QUERY_TEXT,
    QUERY_VECTOR,
    TOKEN_WEIGHTS,
    ClusterSubQueryBuilder,
    Leg,
    LegContext,
    SubQueryBuilder,
)
from lr_opensearch.legs.scores import inner_product_from_score, score_from_inner_product


def knn_sub_query(adapter: SubQueryBuilder, vector: Any, ctx: LegContext) -> dict[str, Any]:
    """A knn sub-query on the dense field (any leg that searches with a query vector)."""
    return adapter.dense_query(vector, knn_depth=ctx.knn_depth, filter=ctx.filter, ef_search=ctx.ef_search)


def heaviest(weights: Mapping[str, float], n: int | None) -> Mapping[str, float]:
    """The ``n`` heaviest entries of a sparse query (ties by key; None: all of them)."""
    if n is None or len(weights) <= n:
        return weights
    keep = sorted(weights.items(), key=lambda kv: (-float(kv[1]), kv[0]))[:n]
    return dict(keep)


def _sparse(adapter: SubQueryBuilder, weights: Any, ctx: LegContext) -> dict[str, Any]:
    return adapter.sparse_query(heaviest(weights, ctx.sparse_tokens), filter=ctx.filter,
                                knn_depth=ctx.knn_depth, seismic=ctx.seismic)


def _text(adapter: SubQueryBuilder, text: Any, ctx: LegContext) -> dict[str, Any]:
    if ctx.text_fields is None:  # the adapter's default fields (and its older signature)
        return adapter.text_query(text, filter=ctx.filter)
    return adapter.text_query(text, filter=ctx.filter, fields=ctx.text_fields)


def _neural(adapter: ClusterSubQueryBuilder, text: str, ctx: LegContext,
            model_id: str | None) -> dict[str, Any]:
    return adapter.neural_query(text, model_id=model_id, knn_depth=ctx.knn_depth, filter=ctx.filter,
                                ef_search=ctx.ef_search)


def _neural_sparse(adapter: ClusterSubQueryBuilder, text: str, ctx: LegContext,
                   model_id: str | None) -> dict[str, Any]:
    return adapter.neural_sparse_query(text, model_id=model_id, filter=ctx.filter)


def _text_in_cluster(adapter: ClusterSubQueryBuilder, text: str, ctx: LegContext,
                     model_id: str | None) -> dict[str, Any]:
    return _text(adapter, text, ctx)  # the engine analyses the text anyway: no model


DENSE = Leg(
    name="dense", label="LR dense", input=QUERY_VECTOR, needs="dense query vectors",
    sub_query=knn_sub_query, default_weight=0.4, score=inner_product_from_score,
    engine_score=score_from_inner_product, score_label="ip", linear_reads_score=True,
    run="lr-dense", in_cluster=_neural,
)
SPARSE = Leg(
    name="sparse", label="LR sparse", input=TOKEN_WEIGHTS, needs="sparse query maps",
    sub_query=_sparse, default_weight=0.2, run="lr-sparse", in_cluster=_neural_sparse,
)
BM25 = Leg(
    name="bm25", label="BM25", input=QUERY_TEXT, needs="the query texts (texts=...)",
    sub_query=_text, default_weight=0.4, baseline=True, run="bm25", in_cluster=_text_in_cluster,
)
# The reference: the same knn with the full model's query vector (a model forward per query,
# given through ``QueryEncoding(input_encoders={FULL_QUERY_VECTOR: ...})``; see
# ``lr_opensearch.model.full_model.full_query_encoder``). Never weighted by default.
FULL = Leg(
    name="full_dense", label="full model, dense", input=FULL_QUERY_VECTOR,
    needs="the full model's query vectors (input_encoders)", sub_query=knn_sub_query,
    score=inner_product_from_score, engine_score=score_from_inner_product, score_label="ip",
    linear_reads_score=True, run="full-dense", reference_for=DENSE.name,
)

BUILTIN = (DENSE, SPARSE, BM25, FULL)  # in the hybrid query's sub-query order

# Hybrids with fixed legs, run by `lr eval` as lr-<leg>+<leg>...; weights chosen on SciFact
# train queries (grid of 0.1, fitted table, IDF sparse query weights), never on test
# judgments: docs/RESULTS.md.
FIXED_HYBRIDS: tuple[dict[str, float], ...] = (
    {DENSE.name: 0.6, SPARSE.name: 0.4},
    {DENSE.name: 0.4, BM25.name: 0.6},
    {leg.name: leg.default_weight for leg in BUILTIN if leg.default_weight},
)
