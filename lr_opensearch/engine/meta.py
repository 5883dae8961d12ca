"""One key of an index's ``_meta``, read or changed: the one place that edits ``_meta``.

The engines keep ``_meta`` as one object of the index mapping and replace it whole on every
``put_mapping``, with no version to make the write conditional; two writers that each read
``_meta``, change their own key and write it back would lose each other's key. So a change
runs under a lock: a document per index in the hidden index :data:`LOCK_INDEX`, created
with ``op_type=create`` (the engine lets one create win; the others wait and retry). The
lock is held for one read and one write; a writer that died holding it leaves it for at
most :data:`LOCK_TTL` seconds, then the next writer takes it over (a delete conditional on
the lock document's sequence number, so two writers cannot both take it over).

Callers go through the adapter: :meth:`EngineAdapter.meta_value
<lr_opensearch.engine.adapter.EngineAdapter.meta_value>` and :meth:`EngineAdapter.update_meta
<lr_opensearch.engine.adapter.EngineAdapter.update_meta>`.
"""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from lr_opensearch.engine.results import refusal, status_of
from lr_opensearch.errors import EngineError

LOCK_INDEX = "lightretriever-meta-locks"  # hidden; one document per index being changed
LOCK_TTL = 60.0  # s: a lock older than this was left by a writer that died
LOCK_WAIT = 120.0  # s: how long a writer waits for a live lock before giving up
BUSY = (429, 503)  # the node refused the lock's write for now (write queue full, unavailable)
RELEASE_TRIES = 8  # a release refused as busy is tried again (else the lock waits out LOCK_TTL)
LOCK_SETTINGS = {"index": {"number_of_shards": 1, "auto_expand_replicas": "0-1",
                           "hidden": True}}


class EngineAdapter(Protocol):
    """What this module uses of an :class:`~lr_opensearch.engine.adapter.EngineAdapter`
    (which imports this module)."""

    engine: str
    client: Any
    transport_errors: tuple[type[BaseException], ...]

    def index_mapping(self, index: str) -> dict[str, Any]: ...
    def put_index_meta(self, index: str, meta: Mapping[str, Any]) -> None: ...
    def _create_doc(self, index: str, doc_id: str, doc: dict[str, Any]) -> Any: ...
    def _create_plain(self, index: str, settings: dict[str, Any]) -> Any: ...


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
    owner = {"owner": f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}",
             "since": time.time()}
    deadline, pause = time.monotonic() + wait, 0.02
    while not _acquire(adapter, index, owner, ttl):
        if time.monotonic() > deadline:
            holder = _holder(adapter, index) or {}
            raise EngineError(
                f"the _meta of index {index!r} is being changed by {holder.get('owner', '?')} "
                f"(for {wait:.0f} s); if no lr-opensearch process is running there, delete "
                f"the stale lock: DELETE /{LOCK_INDEX}/_doc/{index}")
        time.sleep(pause)
        pause = min(pause * 2, 0.5)
    try:
        yield
    finally:
        _release(adapter, index, str(owner["owner"]))


def _release(adapter: EngineAdapter, index: str, owner: str) -> None:
    """Delete this writer's lock document; a refusal as busy is tried again, any other
    failure leaves it to expire (LOCK_TTL)."""
    pause = 0.05
    errors: tuple[type[BaseException], ...] = (EngineError, *adapter.transport_errors)
    for _ in range(RELEASE_TRIES):
        try:
            mine = _holder(adapter, index)
            if mine is not None and mine.get("owner") == owner:
                adapter.client.delete(index=LOCK_INDEX, id=index, if_seq_no=mine["_seq_no"],
                                      if_primary_term=mine["_primary_term"])
            return
        except errors as exc:
            if status_of(exc.__cause__ or exc) not in BUSY:
                return
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def _acquire(adapter: EngineAdapter, index: str, owner: dict[str, Any], ttl: float) -> bool:
    """One try: True if this writer now holds the lock."""
    # the index first, with its settings: a document write would auto-create it with the
    # engine's defaults (one replica: a lone node stays yellow, and hidden no more)
    _create_lock_index(adapter)
    try:
        adapter._create_doc(LOCK_INDEX, index, {**owner, "since": time.time()})
        return True
    except adapter.transport_errors as exc:
        if status_of(exc) in BUSY:  # a saturated write queue: try again, as for a held lock
            return False
        if status_of(exc) != 409:
            raise EngineError(f"taking the _meta lock of index {index!r} on "
                              f"{adapter.engine} failed: {refusal(exc)}") from exc
    held = _holder(adapter, index)
    if held is not None and time.time() - float(held.get("since", 0)) > ttl:
        with contextlib.suppress(*adapter.transport_errors):  # another writer took it over
            adapter.client.delete(index=LOCK_INDEX, id=index, if_seq_no=held["_seq_no"],
                                  if_primary_term=held["_primary_term"])
    return False


def _holder(adapter: EngineAdapter, index: str) -> dict[str, Any] | None:
    """The lock document of ``index`` with its ``_seq_no`` / ``_primary_term``, or None."""
    try:
        found = dict(adapter.client.get(index=LOCK_INDEX, id=index))
    except adapter.transport_errors as exc:
        if status_of(exc) == 404:
            return None
        raise EngineError(f"reading the _meta lock of index {index!r} on {adapter.engine} "
                          f"failed: {refusal(exc)}") from exc
    return {**dict(found.get("_source") or {}), "_seq_no": found["_seq_no"],
            "_primary_term": found["_primary_term"]}


def _create_lock_index(adapter: EngineAdapter) -> None:
    try:
        adapter._create_plain(LOCK_INDEX, LOCK_SETTINGS)
    except adapter.transport_errors as exc:
        if "resource_already_exists" not in str(exc):
            raise EngineError(f"creating the lock index {LOCK_INDEX!r} on {adapter.engine} "
                              f"failed: {refusal(exc)}") from exc
