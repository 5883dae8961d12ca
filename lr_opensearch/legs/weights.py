"""Fusion weights per leg: the one check, the command-line form, the bundle defaults."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from lr_opensearch.errors import ConfigError
from lr_opensearch.legs.registry import names

WEIGHT_SUM_TOLERANCE = 0.01  # neural-search's tolerance on sum(weights) == 1
POSITIONAL_LEGS = 3  # a weight sequence names the first legs in order: 2 or 3 values

Weights = Mapping[str, float]


def default_weights() -> dict[str, float]:
    """The weights of new bundles: each leg's ``default_weight``."""
    from lr_opensearch.legs.registry import get

    return {name: get(name).default_weight for name in names()}


def move_weight(weights: Mapping[str, float], leg: str, weight: float) -> dict[str, float]:
    """``weights`` with ``leg`` at ``weight`` (clipped to [0, 1]) and the other weighted legs
    sharing ``1 - weight`` in their own proportions (dense 0.4 / sparse 0.2 / BM25 0.4 with
    BM25 at 0.7: dense 0.2, sparse 0.1). With no other weighted leg, the others' default
    weights give the proportions. The weight sweep of ``lr eval`` and the inspector's slider."""
    weight = min(1.0, max(0.0, float(weight)))
    others = {name: w for name, w in weights.items() if name != leg and w > 0.0}
    if not others:
        others = {name: w for name, w in default_weights().items() if name != leg and w > 0.0}
    total = sum(others.values())
    out = {name: (1.0 - weight) * w / total for name, w in others.items()} if total else {}
    out[leg] = weight
    return out


def _as_mapping(weights: Sequence[float] | Mapping[str, float]) -> dict[str, Any]:
    legs = names()
    if isinstance(weights, Mapping):
        unknown = sorted(set(weights) - set(legs))
        if unknown:
            raise ConfigError(f"unknown fusion leg(s) {unknown}; valid legs: {', '.join(legs)}")
        return dict(weights)
    values = list(weights) if not isinstance(weights, (str, bytes)) else [weights]
    positional = legs[:POSITIONAL_LEGS]
    if len(values) not in (2, 3):
        raise ConfigError(f"weights must be ({', '.join(positional[:2])}), "
                          f"({', '.join(positional)}) or {{leg: weight}}, got "
                          f"{len(values)}: {weights!r}")
    return dict(zip(positional, values, strict=False))


def validate_weights(
    weights: Sequence[float] | Mapping[str, float], semantics: str = "opensearch"
) -> dict[str, float]:
    """Check fusion weights and return them per leg, every registered leg in order.

    ``weights`` is a mapping ``{leg: weight}`` (a leg left out weighs 0), or a sequence
    naming the first legs in order: (dense, sparse) or (dense, sparse, bm25). A leg of
    weight 0 is not searched at all.

    Raises:
        ConfigError: an unknown leg, a wrong length, non-finite or negative values, all 0;
            for ``opensearch`` also a weight above 1 or a sum that is not 1 (+-0.01), which
            the server rejects.
    """
    given = _as_mapping(weights)
    try:
        out = {leg: float(given.get(leg, 0.0)) for leg in names()}
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"weights must be numbers per leg ({', '.join(names())}), "
                          f"got {weights!r}") from exc
    shown = {leg: w for leg, w in out.items() if leg in given or w}
    if not all(math.isfinite(w) and w >= 0.0 for w in out.values()):
        raise ConfigError(f"weights must be finite and >= 0, got {shown!r}")
    total = sum(out.values())
    if total == 0.0:
        raise ConfigError(f"weights must not all be 0, got {shown!r}")
    if semantics == "opensearch":
        if any(w > 1.0 for w in out.values()):
            raise ConfigError(f"opensearch semantics: each weight must be in [0, 1], got {shown!r}")
        if abs(total - 1.0) > WEIGHT_SUM_TOLERANCE:
            example = ",".join(f"{leg}={w:g}" for leg, w in default_weights().items() if w)
            raise ConfigError(
                f"opensearch semantics: weights must sum to 1 (the normalization-processor "
                f"rejects others), got {shown!r} (sum {total:g}); e.g. {example}"
            )
    return out


def parse_weights(text: str) -> dict[str, float]:
    """Weights as written on a command line: ``dense=0.3,sparse=0.2,bm25=0.5`` (legs left
    out weigh 0) or plain numbers in leg order (``0.7,0.3`` or ``0.3,0.2,0.5``). The sum is
    checked when the fusion semantics is known (:func:`validate_weights`)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    example = ",".join(f"{leg}={w:g}" for leg, w in default_weights().items() if w)
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
        raise ConfigError(f"weights {text!r}: write {example}") from None


def weights_of(record: Mapping[str, Any], key: str = "weights",
               legs_key: str = "legs") -> dict[str, float]:
    """Weights as any version wrote them into a record (a bundle config, a report):
    ``{key: {leg: w}}``; a list under ``key`` in the order of ``record[legs_key]`` (reports
    before the leg registry); or one ``<leg>_weight`` field per leg (bundles before it;
    those written before the BM25 leg have none for it: 0)."""
    value = record.get(key)
    if isinstance(value, Mapping):
        return {str(leg): float(w) for leg, w in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        order = record.get(legs_key) or names()[: len(value)]
        return {str(leg): float(w) for leg, w in zip(order, value, strict=True)}
    return {leg: float(record[f"{leg}_weight"]) for leg in names()
            if f"{leg}_weight" in record}
