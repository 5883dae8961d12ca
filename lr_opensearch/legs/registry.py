"""The leg registry: one :class:`Leg` per search that hybrid retrieval can fuse.

A leg says everything the rest of the library needs to know about it, so that adding one
is one :func:`register` call:

* ``input``: which per-query input it searches with (:data:`QUERY_VECTOR`,
  :data:`TOKEN_WEIGHTS`, :data:`QUERY_TEXT`, or a new name that the caller supplies, e.g.
  through ``Retriever(encoding=QueryEncoding(input_encoders={name: fn}))``);
* ``sub_query``: how an engine adapter builds its sub-query from that input;
* ``score``: how its engine score reads for people (the dense leg's knn score is the
  engine's transform of the inner product; explain and ``Hit.scores`` show the inner
  product), and whether the ``linear`` fusion semantics normalises that reading;
* ``default_weight``: its weight in new bundles (0: searched only when asked for).

Every other part (fusion, hits, explain, the retriever, the CLI, the inspector, the
evaluation runs, the bundle config) iterates over :func:`names` and reads these fields.

An installed package registers a leg for every process and app (``lr search``, ``lr
eval``, the inspector, ingest) through the entry-point group :data:`ENTRY_POINT_GROUP`::

    [project.entry-points."lr_opensearch.legs"]
    title_bm25 = "my_package.legs:TITLE_BM25"   # a Leg, named as the entry point

They are read once, the first time the registry is asked (never at import), after the
built-in legs and before any :func:`register` call of the process.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from lr_opensearch.errors import ConfigError
from lr_opensearch.legs.builtin import BUILTIN
from lr_opensearch.legs.leg import HYBRID, Leg

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "lr_opensearch.legs"
_LEGS: dict[str, Leg] = {leg.name: leg for leg in BUILTIN}
_installed_read = False


def _registry() -> dict[str, Leg]:
    """The legs, with the installed packages' read in the first time."""
    global _installed_read
    if not _installed_read:
        _installed_read = True
        for leg in installed_legs():
            _add(leg)
    return _LEGS


def installed_legs() -> list[Leg]:
    """The legs installed packages register (:data:`ENTRY_POINT_GROUP`); one that does not
    load, is no ``Leg`` or is named otherwise than its entry point is left out with a
    warning that names its package and what to do."""
    from importlib.metadata import entry_points

    found = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {ep.name!r} ({ep.value}) of package {_package(ep)}"
        try:
            leg = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken package must not stop every app
            logger.warning("leg %s does not load (%s: %s); fix or uninstall that package",
                           where, type(exc).__name__, exc)
            continue
        if not isinstance(leg, Leg) or leg.name != ep.name:
            logger.warning("leg %s is left out: it must name a lr_opensearch.legs.Leg called "
                           "%r, got %r", where, ep.name, leg)
            continue
        found.append(leg)
    return found


def _package(ep: object) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else "?"


def _add(leg: Leg) -> Leg:
    if not leg.name.isidentifier() or leg.name == HYBRID:
        raise ConfigError(f"leg name {leg.name!r} must be an identifier and not {HYBRID!r}")
    if leg.name in _LEGS:
        raise ConfigError(f"leg {leg.name!r} is registered already")
    _LEGS[leg.name] = leg
    return leg


def register(leg: Leg) -> Leg:
    """Add a leg (after the built-in and installed ones, in sub-query order); its name must
    be new."""
    _registry()
    return _add(leg)


def unregister(name: str) -> None:
    """Remove a leg added by :func:`register` (tests; built-in legs stay)."""
    if any(b.name == name for b in BUILTIN):
        raise ConfigError(f"leg {name!r} is built in and cannot be removed")
    _registry().pop(name, None)


def names() -> tuple[str, ...]:
    """Every leg's name, in sub-query order."""
    return tuple(_registry())


def get(name: str) -> Leg:
    """The leg called ``name``; the error lists the legs."""
    try:
        return _registry()[name]
    except KeyError:
        raise ConfigError(f"unknown leg {name!r}; valid legs: {', '.join(_LEGS)}") from None


def baseline() -> Leg:
    """The leg that others are compared with (BM25)."""
    return next(leg for leg in _registry().values() if leg.baseline)


def reference_weights(weights: Mapping[str, float]) -> dict[str, float]:
    """``weights`` with each light leg's weight moved to the leg that computes the same
    query with the full model (``Leg.reference_for``): the same hybrid, full-model queries."""
    swap = {leg.reference_for: leg.name for leg in _registry().values() if leg.reference_for}
    out: dict[str, float] = {}
    for name, w in weights.items():
        out[swap.get(name, name)] = out.get(swap.get(name, name), 0.0) + w
    return out


def modes() -> tuple[str, ...]:
    """The search modes: :data:`HYBRID`, or one leg alone."""
    return (HYBRID, *_registry())


