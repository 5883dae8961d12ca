"""One key of an index's ``_meta``, read or changed: the one place that edits ``_meta``.

The engines keep ``_meta`` as one object of the index mapping and replace it whole on every
``put_mapping``, with no version to make the write conditional; two writers that each read
``_meta``, change their own key and write it back would lose each other's key. So a change
runs under the index's ``_meta`` lease (:mod:`lr_opensearch.engine.lease`, key
``meta-<index>``), held for one read and one write; a writer that died holding it leaves it
for at most :data:`LOCK_TTL` seconds (at once on its own machine), and a live one is waited
for up to :data:`LOCK_WAIT` seconds.

Callers go through the adapter: :meth:`EngineAdapter.meta_value
<lr_opensearch.engine.adapter.EngineAdapter.meta_value>` and :meth:`EngineAdapter.update_meta
<lr_opensearch.engine.adapter.EngineAdapter.update_meta>`.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from lr_opensearch.engine.lease import LEASE_INDEX, LeaseAdapter, LeaseHeld, hold
from lr_opensearch.errors import EngineError

LOCK_INDEX = LEASE_INDEX  # the lease index holds the _meta locks too
LOCK_TTL = 60.0  # s: a lock older than this was left by a writer that died
LOCK_WAIT = 120.0  # s: how long a writer waits for a live lock before giving up


class EngineAdapter(LeaseAdapter, Protocol):
    """What this module uses of an :class:`~lr_opensearch.engine.adapter.EngineAdapter`
    (which imports this module)."""

    def index_mapping(self, index: str) -> dict[str, Any]: ...
    def put_index_meta(self, index: str, meta: Mapping[str, Any]) -> None: ...


def lock_key(index: str) -> str:
    """The key of the ``_meta`` lease of ``index`` in the lease index."""
    return f"meta-{index}"


def meta_of(mapping: Mapping[str, Any], key: str) -> Any:
    """``_meta[key]`` of an index's ``mappings`` object (None when absent)."""
    return (mapping.get("_meta") or {}).get(key)


def update(adapter: EngineAdapter, index: str, key: str,
           change: Callable[[Any], Any]) -> Any:
    """Set ``_meta[key]`` of ``index`` to ``change(current value or None)`` (a copy: change
    it freely) and return the new value; a new value of None removes the key, one equal to
    the current value writes nothing. Every other key is kept, also against a writer that
    changes another key at the same time (the lock above)."""
    with locked(adapter, index):
        meta = dict(adapter.index_mapping(index).get("_meta") or {})
        old = meta.get(key)
        new = change(copy.deepcopy(old))
        if new == old:
            return old
        if new is None:
            meta.pop(key, None)
        else:
            meta[key] = new
        adapter.put_index_meta(index, meta)
        return new


@contextlib.contextmanager
def locked(adapter: EngineAdapter, index: str, *, wait: float = LOCK_WAIT,
           ttl: float = LOCK_TTL) -> Iterator[None]:
    """Hold the ``_meta`` lock of ``index`` (see the module docstring)."""
    key = lock_key(index)
    lease = contextlib.ExitStack()
    try:
        lease.enter_context(hold(adapter, key, f"a _meta change of index {index!r}", ttl=ttl,
                                 wait=wait))
    except LeaseHeld as held:
        raise EngineError(
            f"the _meta of index {index!r} is being changed by "
            f"{held.holder.get('owner', '?')} (for {wait:.0f} s); if no lr-opensearch process "
            f"is running there, delete the stale lock: DELETE /{LOCK_INDEX}/_doc/{key}") from None
    with lease:
        yield
