"""How the legs are fused: :class:`FusionConfig`, validated once by :func:`fusion_config`.

The one fusion implementation (client side) is :mod:`lr_opensearch.search.fusion`; the
engines' server-side fusion (:mod:`lr_opensearch.engine`) reads the same config.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from lr_opensearch.errors import ConfigError
from lr_opensearch.legs.weights import default_weights, validate_weights
from lr_opensearch.options import COMBINATIONS, NORMALIZATIONS, SEMANTICS, choice

DEFAULT_RANK_CONSTANT = 60


@dataclass(frozen=True)
class FusionConfig:
    """How to fuse: validated once by :func:`fusion_config`.

    ``weights`` holds one entry per registered leg (in sub-query order); the legs of weight
    0 are not searched (``legs`` / ``leg_weights``: the others, in sub-query order).
    """

    weights: Mapping[str, float] = field(default_factory=dict)
    semantics: str = "opensearch"
    normalization: str = "min_max"
    combination: str = "arithmetic_mean"
    rank_constant: int = DEFAULT_RANK_CONSTANT

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", MappingProxyType(dict(self.weights)))

    @property
    def legs(self) -> tuple[str, ...]:
        return tuple(leg for leg, w in self.weights.items() if w > 0.0)

    @property
    def leg_weights(self) -> tuple[float, ...]:
        return tuple(w for w in self.weights.values() if w > 0.0)


def fusion_config(
    weights: Sequence[float] | Mapping[str, float] | None = None,
    semantics: str = "opensearch",
    normalization: str = "min_max",
    combination: str = "arithmetic_mean",
    rank_constant: int = DEFAULT_RANK_CONSTANT,
) -> FusionConfig:
    """Validate fusion settings; every error lists the valid options. ``weights`` None:
    each registered leg's ``default_weight`` (:func:`~lr_opensearch.legs.weights.default_weights`)."""
    choice("fusion semantics", semantics, SEMANTICS)
    choice("normalization", normalization, NORMALIZATIONS)
    choice("combination", combination, COMBINATIONS)
    if semantics == "linear" and combination in ("geometric_mean", "harmonic_mean"):
        raise ConfigError(
            f"semantics 'linear' is a weighted sum; combination must be 'arithmetic_mean' or "
            f"'rrf', got {combination!r} (use semantics 'opensearch' for {combination})"
        )
    if (
        isinstance(rank_constant, bool)
        or not isinstance(rank_constant, int)
        or not (1 <= rank_constant <= 10_000)
    ):
        raise ConfigError(f"rank_constant must be an integer in [1, 10000], got {rank_constant!r}")
    if weights is None:
        weights = default_weights()
    return FusionConfig(validate_weights(weights, semantics), semantics, normalization,
                        combination, rank_constant)
