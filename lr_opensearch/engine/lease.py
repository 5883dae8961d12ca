"""Leases held in the cluster itself: one holder at a time of a named thing, on one machine
or several. The one lease mechanism of the library: the ``_meta`` lock of an index
(:mod:`lr_opensearch.engine.meta`, held for one read and one write) and the lease of ``lr
models deploy`` (:mod:`lr_opensearch.cluster.lease`, held for a whole deploy) are both
leases here, told apart by their keys.

A lease is one document in the small hidden index :data:`LEASE_INDEX`, created with
``op_type=create`` (the engine's atomic "create if absent": one creator wins), naming its
holder (what, host, pid, owner, since, expires). The holder deletes it on every way out,
only while it is still its own. A holder that died without (SIGKILL, power loss) leaves it
behind: on its machine a dead pid is noticed at once, anywhere it expires after its ``ttl``;
a stale lease is taken over by a delete conditional on its sequence number, so two takers
cannot both win. A live holder is waited for up to ``wait`` seconds, then named
(:class:`LeaseHeld`: each caller says what to do); a write refused as busy (429/503: a
saturated write queue during an ingest) is waited out like a held lease.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any, Protocol

from lr_opensearch.engine.results import refusal, status_of
from lr_opensearch.errors import EngineError

logger = logging.getLogger(__name__)

LEASE_INDEX = "lr-leases"  # hidden; one document per lease held
LEASE_SETTINGS = {"index": {"number_of_shards": 1, "auto_expand_replicas": "0-1",
                            "hidden": True}}
BUSY = (429, 503)  # the node refused the lease's write for now (write queue full, unavailable)
BUSY_WAIT = 120.0  # s: how long writes refused as busy are waited out
RELEASE_TRIES = 8  # a release refused as busy is tried again (else the lease waits out its ttl)


class LeaseAdapter(Protocol):
    """What this module uses of an :class:`~lr_opensearch.engine.adapter.EngineAdapter`."""

    engine: str
    client: Any
    transport_errors: tuple[type[BaseException], ...]

    def _create_doc(self, index: str, doc_id: str, doc: dict[str, Any]) -> Any: ...
    def _create_plain(self, index: str, settings: dict[str, Any]) -> Any: ...


class LeaseHeld(EngineError):
    """The lease ``key`` is held by a live ``holder`` (its document), after the wait."""

    def __init__(self, key: str, holder: dict[str, Any]) -> None:
        super().__init__(f"the lease {key} is held by {holder.get('owner', '?')} "
                         f"({holder.get('what', '?')}); DELETE {LEASE_INDEX}/_doc/{key} "
                         "if that process is gone")
        self.key = key
        self.holder = holder


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def stale(holder: dict[str, Any], now: float) -> str | None:
    """Why ``holder``'s lease no longer holds (None: it holds)."""
    if float(holder.get("expires", 0)) < now:
        return "it expired"
    if holder.get("host") == socket.gethostname() and \
            not process_alive(int(holder.get("pid", 0))):
        return f"pid {holder.get('pid')} on this machine is gone"
    return None


@contextlib.contextmanager
def hold(adapter: LeaseAdapter, key: str, what: str, *, ttl: float,
         wait: float = 0.0) -> Iterator[dict[str, Any]]:
    """Hold the lease ``key`` for ``what`` (e.g. "lr models deploy of bundle X") while the
    block runs; yields the lease document.

    Args:
        ttl: seconds after which the lease counts as left by a holder that died.
        wait: seconds to wait for a live holder before giving up.

    Raises:
        LeaseHeld: a live holder still has it after ``wait``.
        EngineError: the engine refused the lease index or document otherwise.
    """
    host, pid = socket.gethostname(), os.getpid()
    mine = {"what": what, "host": host, "pid": pid,
            "owner": f"{host}:{pid}:{uuid.uuid4().hex[:8]}"}
    _acquire(adapter, key, mine, ttl, wait)
    try:
        yield mine
    finally:
        _release(adapter, key, str(mine["owner"]))


def _acquire(adapter: LeaseAdapter, key: str, mine: dict[str, Any], ttl: float,
             wait: float) -> None:
    # the index first, with its settings: a document write would auto-create it with the
    # engine's defaults (one replica: a lone node stays yellow, and hidden no more)
    create_lease_index(adapter)
    start, pause = time.monotonic(), 0.02
    while True:
        now = time.time()
        mine.update(since=now, expires=now + ttl)
        status = None
        try:
            adapter._create_doc(LEASE_INDEX, key, dict(mine))
            return
        except adapter.transport_errors as exc:
            status = status_of(exc)
            if status not in (*BUSY, 409):
                raise EngineError(f"taking the lease {key} ({mine['what']}) on {adapter.engine} "
                                  f"failed: {refusal(exc)}") from exc
            if status in BUSY and time.monotonic() - start > max(wait, BUSY_WAIT):
                raise EngineError(f"the cluster refused the lease {key} ({mine['what']}) as busy "
                                  f"for {max(wait, BUSY_WAIT):.0f} s: {refusal(exc)}; run this "
                                  "again when it has less to do") from exc
        held = holder(adapter, key) if status == 409 else None
        if held is not None:
            why = stale(held, time.time())
            if why is not None:
                logger.warning("taking over the lease %s of %s: %s", key, held.get("what"), why)
                _delete(adapter, key, held)
                continue
            if time.monotonic() - start >= wait:
                raise LeaseHeld(key, held)
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


def _delete(adapter: LeaseAdapter, key: str, held: dict[str, Any]) -> None:
    """Delete the lease document ``held`` if it is still that one (another taker or a
    release may have been first: nothing to do then)."""
    with contextlib.suppress(*adapter.transport_errors):
        adapter.client.delete(index=LEASE_INDEX, id=key, if_seq_no=held["_seq_no"],
                              if_primary_term=held["_primary_term"])


def _release(adapter: LeaseAdapter, key: str, owner: str) -> None:
    """Delete this holder's lease document; a refusal as busy is tried again, any other
    failure leaves it to expire (never masking what the block raised)."""
    pause = 0.05
    errors: tuple[type[BaseException], ...] = (EngineError, *adapter.transport_errors)
    for _ in range(RELEASE_TRIES):
        try:
            held = holder(adapter, key)
            if held is not None and held.get("owner") == owner:
                adapter.client.delete(index=LEASE_INDEX, id=key, if_seq_no=held["_seq_no"],
                                      if_primary_term=held["_primary_term"])
            return
        except errors as exc:
            if status_of(exc.__cause__ or exc) not in BUSY:
                logger.warning("could not release the lease %s (%s); it expires by itself",
                               key, exc)
                return
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def holder(adapter: LeaseAdapter, key: str) -> dict[str, Any] | None:
    """The lease document ``key`` with its ``_seq_no`` / ``_primary_term``, or None."""
    try:
        found = dict(adapter.client.get(index=LEASE_INDEX, id=key))
    except adapter.transport_errors as exc:
        if status_of(exc) == 404:
            return None
        raise EngineError(f"reading the lease {key} on {adapter.engine} failed: "
                          f"{refusal(exc)}") from exc
    return {**dict(found.get("_source") or {}), "_seq_no": found["_seq_no"],
            "_primary_term": found["_primary_term"]}


def create_lease_index(adapter: LeaseAdapter) -> None:
    try:
        adapter._create_plain(LEASE_INDEX, LEASE_SETTINGS)
    except adapter.transport_errors as exc:
        if "resource_already_exists" not in str(exc):
            raise EngineError(f"creating the lease index {LEASE_INDEX!r} on {adapter.engine} "
                              f"failed: {refusal(exc)}") from exc
