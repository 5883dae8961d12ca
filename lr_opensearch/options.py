"""The option lists and checks that several parts share, defined once.

Model: ``KINDS``, ``POOLINGS``, ``SPARSE_HEADS`` (bundle manifest, model classes, heads).
Index: ``KNN_ENGINES`` (OpenSearch), ``ES_SPARSE_TYPES`` (Elasticsearch).
Fusion: ``LEGS``, ``SEMANTICS``, ``NORMALIZATIONS``, ``COMBINATIONS`` and :func:`validate_weights` /
:func:`parse_weights` (bundle defaults, client fusion, the server's search pipeline). :func:`choice` is the one
"value must be one of these" check; its error lists the valid options.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

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

KNN_ENGINES = ("lucene", "faiss")  # OpenSearch k-NN engines of the dense field
ES_SPARSE_TYPES = ("sparse_vector", "rank_features")  # Elasticsearch sparse field types
SEARCH_ENGINES = ("opensearch", "elasticsearch")  # what a cluster URL may point at
ENGINE_CHOICES = ("auto", *SEARCH_ENGINES)  # --engine: auto = ask the cluster

LEGS = ("dense", "sparse", "bm25")  # fusion legs, in the hybrid query's sub-query order
# Default weights of new bundles, per leg. Chosen on SciFact *train* queries (never on test
# judgments): a grid in steps of 0.1 over the three legs with the table `lr bundle build
# --fit-corpus` fits, IDF sparse query weights and OpenSearch min-max / arithmetic-mean
# fusion; 0.4/0.2/0.4 was best (nDCG@10 0.715; 0.3/0.3/0.4 0.711, 0.3/0.2/0.5 0.710, which
# had won with the first version of the fit). docs/RESULTS.md has the figures.
DEFAULT_WEIGHTS = (0.4, 0.2, 0.4)
SEMANTICS = ("opensearch", "linear")
NORMALIZATIONS = ("min_max", "l2")
COMBINATIONS = ("arithmetic_mean", "geometric_mean", "harmonic_mean", "rrf")
WEIGHT_SUM_TOLERANCE = 0.01  # neural-search's tolerance on sum(weights) == 1


def choice(name: str, value: str, valid: Sequence[str],
           error: type[LRError] = ConfigError) -> str:
    """``value`` if it is one of ``valid``; else ``error`` naming ``name`` and the options."""
    if value not in valid:
        raise error(f"unknown {name} {value!r}; valid options: {', '.join(valid)}")
    return value


def validate_weights(
    weights: Sequence[float] | Mapping[str, float], semantics: str = "opensearch"
) -> tuple[float, float, float]:
    """Check fusion weights and return them per leg: (dense, sparse, bm25).

    ``weights`` is a mapping ``{leg: weight}`` (legs from :data:`LEGS`; a leg left out weighs
    0), or a sequence in leg order: ``(dense, sparse)`` (no BM25 leg) or
    ``(dense, sparse, bm25)``. A leg of weight 0 is not searched at all.

    Raises:
        ConfigError: an unknown leg, a wrong length, non-finite or negative values, all 0;
            for ``opensearch`` also a weight above 1 or a sum that is not 1 (+-0.01), which
            the server rejects.
    """
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(LEGS))
        if unknown:
            raise ConfigError(f"unknown fusion leg(s) {unknown}; valid legs: {', '.join(LEGS)}")
        values: Any = [weights.get(leg, 0.0) for leg in LEGS]
    else:
        values = list(weights) if not isinstance(weights, (str, bytes)) else [weights]
    try:
        legs = tuple(float(w) for w in values)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"weights must be numbers per leg ({', '.join(LEGS)}), "
                          f"got {weights!r}") from exc
    if len(legs) not in (2, 3):
        raise ConfigError(f"weights must be (dense, sparse) or (dense, sparse, bm25), got "
                          f"{len(legs)}: {legs!r}")
    legs = (*legs, 0.0) if len(legs) == 2 else legs
    if not all(math.isfinite(w) and w >= 0.0 for w in legs):
        raise ConfigError(f"weights must be finite and >= 0, got {legs!r}")
    if sum(legs) == 0.0:
        raise ConfigError(f"weights must not all be 0, got {legs!r}")
    if semantics == "opensearch":
        if any(w > 1.0 for w in legs):
            raise ConfigError(f"opensearch semantics: each weight must be in [0, 1], got {legs!r}")
        if abs(sum(legs) - 1.0) > WEIGHT_SUM_TOLERANCE:
            raise ConfigError(
                f"opensearch semantics: weights must sum to 1 (the normalization-processor "
                f"rejects others), got {legs!r} (sum {sum(legs):g}); e.g. dense=0.3,sparse=0.2,"
                "bm25=0.5"
            )
    return legs[0], legs[1], legs[2]


def parse_weights(text: str) -> tuple[float, float, float]:
    """Weights as written on a command line: ``dense=0.3,sparse=0.2,bm25=0.5`` (legs left
    out weigh 0) or plain numbers in leg order (``0.7,0.3`` or ``0.3,0.2,0.5``). The sum is
    checked when the fusion semantics is known (:func:`validate_weights`)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if parts and all("=" in p for p in parts):
        named: dict[str, float] = {}
        for part in parts:
            leg, _, value = part.partition("=")
            try:
                named[leg.strip()] = float(value)
            except ValueError:
                raise ConfigError(f"weight {part!r}: {value!r} is not a number") from None
        return validate_weights(named, semantics="any")
    try:
        return validate_weights([float(p) for p in parts], semantics="any")
    except ValueError:
        raise ConfigError(f"weights {text!r}: write dense=0.3,sparse=0.2,bm25=0.5 or "
                          "0.3,0.2,0.5") from None
