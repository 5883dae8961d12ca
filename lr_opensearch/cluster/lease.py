"""The lease of ``lr models deploy``, so two deploys of one bundle never run at once (on one
machine or several): the loser says another deploy is running instead of failing half-way
on the models the winner is uploading.

It is a lease of the engine room (:mod:`lr_opensearch.engine.lease`: one document created
atomically in the hidden index ``lr-leases``, taken over from a dead or expired holder,
deleted on every way out), the same mechanism as the ``_meta`` lock of an index; this module
only says what a deploy's loser should do. ``lr ingest``'s load lease
(:mod:`lr_opensearch.indexing.load_lease`) shares the index's bulk-load settings among
runs; this one excludes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.engine.lease import LEASE_INDEX, LeaseHeld, hold
from lr_opensearch.errors import EngineError

__all__ = ["LEASE_INDEX", "lease"]


@contextlib.contextmanager
def lease(client: Any, key: str, what: str, *, ttl_s: float) -> Iterator[None]:
    """Hold the lease ``key`` for ``what`` (e.g. "lr models deploy of bundle X") while the
    block runs; a live holder is not waited for.

    Raises:
        EngineError: another holder has it (who, since when, until when, how to clear it).
    """
    held = contextlib.ExitStack()
    try:
        held.enter_context(hold(make_adapter(client), key, what, ttl=ttl_s))
    except LeaseHeld as exc:
        holder = exc.holder
        since = time.strftime("%H:%M:%S", time.localtime(float(holder.get("since", 0))))
        until = time.strftime("%Y-%m-%d %H:%M:%S",
                              time.localtime(float(holder.get("expires", 0))))
        raise EngineError(
            f"another {holder.get('what', 'process')} is running (host {holder.get('host')}, "
            f"pid {holder.get('pid')}, since {since}): wait for it to finish, then run this "
            f"again (it reuses what that one deployed). If that process died, its lease ends "
            f"at {until}, or remove it: DELETE {LEASE_INDEX}/_doc/{key}") from None
    with held:
        yield
