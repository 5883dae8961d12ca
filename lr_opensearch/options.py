"""The option lists and checks that several parts share, defined once.

Model: ``KINDS``, ``POOLINGS``, ``SPARSE_HEADS`` (bundle manifest, model classes, heads).
Index: ``KNN_ENGINES``, ``SPARSE_LAYOUTS`` (OpenSearch), ``ES_SPARSE_TYPES`` (Elasticsearch).
Fusion: ``SEMANTICS``, ``NORMALIZATIONS``, ``COMBINATIONS`` (the legs and their weights are
:mod:`lr_opensearch.legs`). Search: ``FUSION_PATHS``, ``DEFAULT_CANDIDATES``,
``DEFAULT_RERANK_DEPTH``, ``MAX_RESULT_WINDOW``. :func:`choice` is the one "value must be one of these" check; its
error lists the valid options.
"""

from __future__ import annotations

from collections.abc import Sequence

from lr_opensearch.errors import ConfigError, LRError

KINDS = ("encoder", "decoder")
POOLINGS = ("cls", "mean", "last")
#: where a normalising model normalises the light dense query: each token row, or the mean
QUERY_NORMS = ("rows", "mean")
SPARSE_HEADS = ("lm", "mlm", "tied")
#: where the sparse document vector comes from: "max" (LightRetriever: the head's logits
#: max-pooled over content positions, log(1 + relu)); "medusa_last" (BRIDGE-Embed: N Medusa
#: heads' next-token distributions at the last position, weighted by 1 - p_eos);
#: "medusa_max" (the Medusa heads' logits max-pooled as LightRetriever, weighted alike)
SPARSE_MODES = ("max", "medusa_last", "medusa_max")
#: how the document encoder computes (ingest, ``lr bundle build``'s fit): "fp32" (the
#: default: float32 vectors), "mixed" (the backbone's matrix products in bfloat16, its
#: residual stream, LayerNorm and softmax in float32), "bf16" (the whole backbone body in
#: bfloat16); ``lr_opensearch.model.precision``, measured in docs/RESULTS.md
ENCODE_PRECISIONS = ("fp32", "mixed", "bf16")
DEFAULT_ENCODE_PRECISION = "fp32"
#: where the document encoder's backbone runs (ingest, ``lr bundle build``'s fit, the full
#: model): "onnx" (ONNX Runtime, CPU, no torch), "torch" (any ``--device``), "auto" (ONNX
#: Runtime on a CPU when it is installed and the model runs there, else torch);
#: ``lr_opensearch.model.runtime``
RUNTIMES = ("auto", "onnx", "torch")
DEFAULT_RUNTIME = "auto"

KNN_ENGINES = ("lucene", "faiss")  # OpenSearch k-NN engines of the dense field
ES_SPARSE_TYPES = ("sparse_vector", "rank_features")  # Elasticsearch sparse field types
#: the LR sparse field's layout on OpenSearch: rank_features (default), or the neural-search
#: sparse_vector field searched by SEISMIC (lr_opensearch.engine.seismic)
SPARSE_LAYOUTS = ("rank_features", "sparse_vector")
SEARCH_ENGINES = ("opensearch", "elasticsearch")  # what a cluster URL may point at
ENGINE_CHOICES = ("auto", *SEARCH_ENGINES)  # --engine: auto = ask the cluster

SEMANTICS = ("opensearch", "linear")
NORMALIZATIONS = ("min_max", "l2")
COMBINATIONS = ("arithmetic_mean", "geometric_mean", "harmonic_mean", "rrf")
ENCODINGS = ("client", "cluster")  # who encodes the query: this process, or the cluster's models
# who fuses a hybrid search (auto: see below); "calibrated": no fusion step at all - one
# ordinary `bool` query whose clauses are the legs' sub-queries, each boosted by weight /
# the leg's scale that `lr index calibrate` measured on the index
# (lr_opensearch.search.calibration), so the engine can skip as for one leg
CALIBRATED = "calibrated"
FUSION_PATHS = ("auto", "server", "client", CALIBRATED)
# "auto" fuses on the client, although the server could, from this many documents in the
# searched index(es) where the engine's hybrid query cannot skip: OpenSearch's `hybrid`
# sets no minimum competitive score for its sub-queries before 3.7, so each leg scores
# every document that matches it, while a leg searched alone (client fusion, one _msearch)
# skips with Lucene's dynamic pruning. Same ranking either way (tested); chosen by
# bench/scale.py (docs/RESULTS.md, "Cost as the corpus grows").
# (quiet machine: client fusion won every shape from 30k documents, one client and 8; at
# 10k it won one client's latency but not 8 clients' throughput at 100 candidates)
CLIENT_FUSION_MIN_DOCS = 20_000
# The calibrated fusion (one bool query): which per-leg statistic of the index's
# calibration (lr_opensearch.search.calibration) divides the leg's weight into its boost:
# the mean or median top-1 engine score over the pseudo-queries, or the mean of their top
# 10 scores; chosen on SciFact train (docs/RESULTS.md, "One query")
CALIBRATION_FORMS = ("top1_mean", "top1_median", "top10_mean")
DEFAULT_CALIBRATION_FORM = "top1_mean"
# its default query shape, cut so the engine can skip: the query's heaviest sparse tokens
# and the text field(s) of the BM25 clause (a one-field `match` instead of the two-field
# `multi_match`, a dis_max); chosen on SciFact train (docs/RESULTS.md, "One query")
CALIBRATED_SPARSE_TOKENS: int | None = 5
CALIBRATED_TEXT_FIELDS: tuple[str, ...] | None = ("text",)
HYBRID_SKIPS_FROM = (3, 7)  # the first OpenSearch whose hybrid query lets sub-queries skip
# k-NN's default HNSW ef_search (index.knn.algo_param.ef_search). From k-NN 3.5 (#3037) a
# lucene-engine knn query explores max(k, ef_search) candidates by default; before it,
# only k (recall@10 of 400 random vectors: 0.90 on OpenSearch 2.19.1 against 1.0 with
# ef_search 100). On older clusters the library sends this ef_search itself when the
# caller names none, so every version searches as many candidates.
KNN_DEFAULT_EF_SEARCH = 100
KNN_EF_SEARCH_DEFAULT_FROM = (3, 5)  # the first OpenSearch whose lucene knn applies it
# The first OpenSearch whose RRF (score-ranker-processor) takes weights (neural-search
# 3.1); 2.19's refuses them, so weighted RRF is fused client side there.
WEIGHTED_RRF_FROM = (3, 1)
# hits each leg retrieves for fusion: 50, chosen by bench/scale.py and SciFact *train*
# (nDCG@10 0.7139 against 0.7159 at 100 on the real index; at a million documents the
# hybrid costs 1.7x BM25's p50 instead of 2.2-2.9x; docs/RESULTS.md)
DEFAULT_CANDIDATES = 50
DEFAULT_EVAL_DEPTH = 100  # hits per query `lr eval` retrieves (R@100), hybrid candidates alike
DEFAULT_RERANK_DEPTH = 20  # hits a second stage rescores per query
# The most hits one search may ask for: OpenSearch's and Elasticsearch's default
# index.max_result_window (from + size) and the k-NN plugin's largest knn k
MAX_RESULT_WINDOW = 10_000


def choice(name: str, value: str, valid: Sequence[str],
           error: type[LRError] = ConfigError) -> str:
    """``value`` if it is one of ``valid``; else ``error`` naming ``name`` and the options."""
    if value not in valid:
        raise error(f"unknown {name} {value!r}; valid options: {', '.join(valid)}")
    return value

