"""The leg registry: one :class:`Leg` per search that hybrid retrieval can fuse.

A leg says everything the rest of the library needs to know about it, so that adding one
is one :func:`register` call:

* ``input``: which per-query input it searches with (:data:`QUERY_VECTOR`,
  :data:`TOKEN_WEIGHTS`, :data:`QUERY_TEXT`, or a new name that the caller supplies, e.g.
  through ``Retriever(input_encoders={name: fn})``);
* ``sub_query``: how an engine adapter builds its sub-query from that input;
* ``score``: how its engine score reads for people (the dense leg's knn score is the
  engine's transform of the inner product; explain and ``Hit.scores`` show the inner
  product), and whether the ``linear`` fusion semantics normalises that reading;
* ``default_weight``: its weight in new bundles (0: searched only when asked for).

Every other part (fusion, hits, explain, the retriever, the CLI, the inspector, the
evaluation runs, the bundle config) iterates over :func:`names` and reads these fields.
"""

from __future__ import annotations

from collections.abc import Mapping

from lr_opensearch.errors import ConfigError
from lr_opensearch.legs.builtin import BUILTIN
from lr_opensearch.legs.leg import HYBRID, Leg

_LEGS: dict[str, Leg] = {leg.name: leg for leg in BUILTIN}


def register(leg: Leg) -> Leg:
    """Add a leg (after the built-in ones, in sub-query order); its name must be new."""
    if not leg.name.isidentifier() or leg.name == HYBRID:
        raise ConfigError(f"leg name {leg.name!r} must be an identifier and not {HYBRID!r}")
    if leg.name in _LEGS:
        raise ConfigError(f"leg {leg.name!r} is registered already")
    _LEGS[leg.name] = leg
    return leg


def unregister(name: str) -> None:
    """Remove a leg added by :func:`register` (tests; built-in legs stay)."""
    if any(b.name == name for b in BUILTIN):
        raise ConfigError(f"leg {name!r} is built in and cannot be removed")
    _LEGS.pop(name, None)


def names() -> tuple[str, ...]:
    """Every leg's name, in sub-query order."""
    return tuple(_LEGS)


def get(name: str) -> Leg:
    """The leg called ``name``; the error lists the legs."""
    try:
        return _LEGS[name]
    except KeyError:
        raise ConfigError(f"unknown leg {name!r}; valid legs: {', '.join(_LEGS)}") from None


def baseline() -> Leg:
    """The leg that others are compared with (BM25)."""
    return next(leg for leg in _LEGS.values() if leg.baseline)


def reference_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """``weights`` with each light leg's weight moved to the leg that computes the same
    query with the full model (``Leg.reference_for``): the same hybrid, full-model queries."""
    swap = {leg.reference_for: leg.name for leg in _LEGS.values() if leg.reference_for}
    out: dict[str, float] = {}
    for name, w in weights.items():
        out[swap.get(name, name)] = out.get(swap.get(name, name), 0.0) + w
    return out


def modes() -> tuple[str, ...]:
    """The search modes: :data:`HYBRID`, or one leg alone."""
    return (HYBRID, *_LEGS)


