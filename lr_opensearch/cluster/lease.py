"""A lease held in the cluster itself, so two ``lr models deploy`` of one bundle never run at
once (on one machine or several): the loser says another deploy is running instead of
failing half-way on the models the winner is uploading.

The lease is one document, created with ``op_type=create`` (the engine's atomic "create
if absent"), in the small hidden index :data:`LEASE_INDEX`; it names its holder (host, pid,
since, expires). The holder deletes it on every way out. A holder that died without
(SIGKILL, power loss) leaves it behind: on its machine a dead pid is noticed at once, and
anywhere it expires after ``ttl_s``; a stale lease is taken over by a conditional delete
(``if_seq_no``), so two takers cannot both win. ``lr ingest``'s load lease
(:mod:`lr_opensearch.indexing.load_lease`) shares the index's bulk-load settings among
runs; this one excludes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

from lr_opensearch.engine.results import status_of
from lr_opensearch.errors import EngineError

logger = logging.getLogger(__name__)

LEASE_INDEX = "lr-leases"
_LEASE_SETTINGS = {"index.hidden": True, "number_of_shards": 1, "auto_expand_replicas": "0-1"}


def _stale(holder: dict[str, Any], now: float) -> str | None:
    """Why ``holder``'s lease no longer holds (None: it holds)."""
    if float(holder.get("expires", 0)) < now:
        return "it expired"
    # the load lease's check of a pid on this machine (imported here, where a lease is
    # contended: the query side, which imports this room, never loads the indexing one)
    from lr_opensearch.indexing.load_lease import _alive

    if holder.get("host") == socket.gethostname() and not _alive(int(holder.get("pid", 0))):
        return f"pid {holder.get('pid')} on this machine is gone"
    return None


@contextlib.contextmanager
def lease(client: Any, key: str, what: str, *, ttl_s: float) -> Iterator[None]:
    """Hold the lease ``key`` for ``what`` (e.g. "lr models deploy of bundle X") while the
    block runs.

    Raises:
        EngineError: another holder has it (who, since when, until when, how to clear it).
    """
    now = time.time()
    mine = {"what": what, "host": socket.gethostname(), "pid": os.getpid(), "since": now,
            "expires": now + ttl_s}
    _acquire(client, key, mine)
    try:
        yield
    finally:
        _release(client, key, mine)


def _acquire(client: Any, key: str, mine: dict[str, Any]) -> None:
    try:
        client.indices.create(index=LEASE_INDEX, body={"settings": _LEASE_SETTINGS})
    except Exception as exc:  # noqa: BLE001 - the engine clients' error types differ
        if "resource_already_exists" not in str(exc):
            raise EngineError(f"cannot create the lease index {LEASE_INDEX} for "
                              f"{mine['what']}: {exc}") from None
    for _ in range(2):  # once more after taking over a stale lease
        try:
            client.create(index=LEASE_INDEX, id=key, body=mine, refresh="true")
            return
        except Exception as exc:  # noqa: BLE001
            if status_of(exc) != 409:
                raise EngineError(f"cannot take the lease {key} for {mine['what']}: "
                                  f"{exc}") from None
        _take_over_if_stale(client, key, mine)
    raise EngineError(f"another process took the lease {key} for {mine['what']} at the same "
                      "moment; run this again once it is done")


def _take_over_if_stale(client: Any, key: str, mine: dict[str, Any]) -> None:
    """Delete the lease ``key`` if its holder is stale; else say who holds it."""
    try:
        found = client.get(index=LEASE_INDEX, id=key)
    except Exception as exc:  # noqa: BLE001 - released meanwhile: try again
        if status_of(exc) == 404:
            return
        raise EngineError(f"cannot read the lease {key}: {exc}") from None
    holder = dict(found["_source"])
    why = _stale(holder, time.time())
    if why is None:
        since = time.strftime("%H:%M:%S", time.localtime(float(holder.get("since", 0))))
        until = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder["expires"])))
        raise EngineError(
            f"another {holder.get('what', 'process')} is running (host {holder.get('host')}, "
            f"pid {holder.get('pid')}, since {since}): wait for it to finish, then run this "
            f"again (it reuses what that one deployed). If that process died, its lease ends "
            f"at {until}, or remove it: DELETE {LEASE_INDEX}/_doc/{key}")
    logger.warning("taking over the lease %s of %s: %s", key, holder.get("what"), why)
    try:
        client.delete(index=LEASE_INDEX, id=key, if_seq_no=found["_seq_no"],
                      if_primary_term=found["_primary_term"], refresh="true")
    except Exception as exc:  # noqa: BLE001 - someone else took it over first: try again
        if status_of(exc) not in (404, 409):
            raise EngineError(f"cannot take over the lease {key}: {exc}") from None


def _release(client: Any, key: str, mine: dict[str, Any]) -> None:
    """Delete the lease ``key`` if it is still ours (a lease taken over stays)."""
    try:
        found = client.get(index=LEASE_INDEX, id=key)
        held = dict(found["_source"])
        if (held.get("host"), held.get("pid"), held.get("since")) == \
                (mine["host"], mine["pid"], mine["since"]):
            client.delete(index=LEASE_INDEX, id=key, if_seq_no=found["_seq_no"],
                          if_primary_term=found["_primary_term"], refresh="true")
    except Exception as exc:  # noqa: BLE001 - never mask what the block raised
        logger.warning("could not release the lease %s (%s); it expires by itself", key, exc)
