"""Legs: the searches a hybrid query fuses, each defined once.

- ``leg``: :class:`Leg` (name, input, sub-query, score reading, default weight, run
  name), the per-query inputs, :class:`LegContext`.
- ``registry``: :func:`register`, :func:`get`, :func:`names`, :func:`modes`,
  :func:`baseline`, :func:`reference_weights`.
- ``builtin``: LR dense (knn with the table's query vector), LR sparse (token weights on
  the sparse field), BM25 (the engine's ``multi_match``), and the full model's dense query
  (``full``: the reference, weight 0 by default).
- ``weights``: :func:`validate_weights`, :func:`parse_weights`, :func:`default_weights`,
  :func:`weights_of` (weights as any version wrote them).
- ``fusion_config``: :class:`FusionConfig` / :func:`fusion_config`.
- ``scores``: the engines' max-inner-product knn score and its inverse (how the dense
  legs read their score).

Never imports torch, transformers, the engine room or the search package.
"""

from __future__ import annotations

from lr_opensearch.legs.fusion_config import DEFAULT_RANK_CONSTANT, FusionConfig, fusion_config
from lr_opensearch.legs.leg import (
    ENCODED_INPUTS,
    FULL_QUERY_VECTOR,
    HYBRID,
    QUERY_TEXT,
    QUERY_VECTOR,
    TOKEN_WEIGHTS,
    Leg,
    LegContext,
)
from lr_opensearch.legs.registry import (
    baseline,
    get,
    modes,
    names,
    reference_weights,
    register,
    unregister,
)
from lr_opensearch.legs.weights import (
    default_weights,
    move_weight,
    parse_weights,
    validate_weights,
    weights_of,
)

__all__ = ["DEFAULT_RANK_CONSTANT", "ENCODED_INPUTS", "FULL_QUERY_VECTOR", "HYBRID", "QUERY_TEXT", "QUERY_VECTOR",
           "TOKEN_WEIGHTS", "FusionConfig", "Leg", "LegContext", "baseline", "default_weights",
           "fusion_config", "get", "modes", "move_weight", "names", "parse_weights", "reference_weights", "register",
           "unregister", "validate_weights", "weights_of"]
