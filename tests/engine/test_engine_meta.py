"""One key of an index's ``_meta`` changed at a time (``EngineAdapter.update_meta``), against
a REAL node: two writers that change different keys at the same time keep both, a lock
left by a writer that died is taken over, a live one makes a writer wait and then say so.

The engines replace ``_meta`` whole; before ``update_meta`` ten places each read it, changed
their key and wrote it back, so a concurrent writer's key could be lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from lr_opensearch.engine import lease, meta
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import EngineError

pytestmark = [pytest.mark.node]

ROUNDS = 12  # appends per writer: enough that unlocked writers lose some (checked below)


def _index(os_client: Any, name: str) -> OpenSearchAdapter:
    os_client.indices.create(index=name, body={"mappings": {"_meta": {"kept": "yes"}}})
    return OpenSearchAdapter(os_client)


def _two_writers(adapter: OpenSearchAdapter, index: str, rounds: int = ROUNDS,
                 gate: threading.Barrier | None = None) -> list[BaseException]:
    """Two threads, each appending 0..rounds-1 to its own ``_meta`` key; with ``gate``, each
    change waits there for the other (both have read ``_meta`` before either writes)."""
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def append(old: Any, i: int) -> list[int]:
        if gate is not None:
            gate.wait(30)
        time.sleep(0.005)  # a read and a write apart, as a real change is
        return [*(old or []), i]

    def write(key: str) -> None:
        try:
            start.wait()
            for i in range(rounds):
                adapter.update_meta(index, key, lambda old, i=i: append(old, i))
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(key,)) for key in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


def test_two_writers_keep_both_keys(os_client: Any, index_name: str) -> None:
    adapter = _index(os_client, index_name)
    assert _two_writers(adapter, index_name) == []
    found = adapter.index_mapping(index_name)["_meta"]
    assert found == {"kept": "yes", "a": list(range(ROUNDS)), "b": list(range(ROUNDS))}
    assert adapter.meta_value(index_name, "a") == list(range(ROUNDS))
    # the lock is gone once the writers are done; its index is hidden and has a replica only
    # where there is a second node (a lone node stays green)
    assert lease.holder(adapter, meta.lock_key(index_name)) is None
    settings = os_client.indices.get_settings(index=meta.LOCK_INDEX)[meta.LOCK_INDEX]["settings"]
    assert settings["index"]["hidden"] == "true"
    assert settings["index"]["auto_expand_replicas"] == "0-1"
    health = os_client.cluster.health(index=meta.LOCK_INDEX, wait_for_status="green")
    assert health["status"] == "green"


def test_unlocked_writers_lose_keys(os_client: Any, index_name: str,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: without the lock, two writers that have both read
    ``_meta`` before either writes (what ten places did by hand) keep only one key."""
    from contextlib import nullcontext

    monkeypatch.setattr(meta, "locked", lambda adapter, index: nullcontext())
    adapter = _index(os_client, index_name)
    assert _two_writers(adapter, index_name, rounds=1, gate=threading.Barrier(2)) == []
    found = adapter.index_mapping(index_name)["_meta"]
    assert found in ({"kept": "yes", "a": [0]}, {"kept": "yes", "b": [0]})


def test_a_value_of_none_removes_the_key_and_an_equal_one_writes_nothing(
        os_client: Any, index_name: str) -> None:
    adapter = _index(os_client, index_name)
    assert adapter.update_meta(index_name, "a", lambda old: {"n": 1}) == {"n": 1}
    version = _mapping_version(os_client, index_name)
    assert adapter.update_meta(index_name, "a", lambda old: old) == {"n": 1}
    assert _mapping_version(os_client, index_name) == version  # nothing written
    assert adapter.update_meta(index_name, "a", lambda old: None) is None
    assert adapter.index_mapping(index_name)["_meta"] == {"kept": "yes"}


def _mapping_version(os_client: Any, index: str) -> int:
    state = os_client.cluster.state(metric="metadata", index=index)
    return int(state["metadata"]["indices"][index]["mapping_version"])


def test_a_dead_writers_lock_is_taken_over(os_client: Any, index_name: str) -> None:
    adapter = _index(os_client, index_name)
    lease.create_lease_index(adapter)
    since = time.time() - 2 * meta.LOCK_TTL
    os_client.index(index=meta.LOCK_INDEX, id=meta.lock_key(index_name), refresh=True,
                    body={"owner": "gone:1:dead", "host": "gone", "pid": 1, "since": since,
                          "expires": since + meta.LOCK_TTL})
    assert adapter.update_meta(index_name, "a", lambda old: 1) == 1
    assert lease.holder(adapter, meta.lock_key(index_name)) is None


def test_a_live_lock_makes_a_writer_wait_then_say_who_holds_it(
        os_client: Any, index_name: str) -> None:
    adapter = _index(os_client, index_name)
    lease.create_lease_index(adapter)
    key = meta.lock_key(index_name)
    os_client.index(index=meta.LOCK_INDEX, id=key, refresh=True,
                    body={"owner": "elsewhere:7:live", "host": "elsewhere", "pid": 7,
                          "since": time.time(), "expires": time.time() + meta.LOCK_TTL})
    try:
        started = time.monotonic()
        with pytest.raises(EngineError, match=r"being changed by elsewhere:7:live.*"
                           rf"DELETE /{meta.LOCK_INDEX}/_doc/{key}"):
            with meta.locked(adapter, index_name, wait=0.5):
                pass
        assert time.monotonic() - started >= 0.5
        assert lease.holder(adapter, key)["owner"] == "elsewhere:7:live"  # not taken
    finally:
        os_client.delete(index=meta.LOCK_INDEX, id=key)


class _BusyOnce:
    """An adapter whose first lock write is refused with 429 (a saturated write queue),
    as a node under bulk load answers; the mapping lives in a dict."""

    engine = "opensearch"

    def __init__(self) -> None:
        from opensearchpy.exceptions import NotFoundError, TransportError

        self.transport_errors = (TransportError,)
        self._busy, self._not_found = TransportError, NotFoundError
        self.meta: dict[str, Any] = {}
        self.locks: dict[str, dict[str, Any]] = {}
        self.refused = 0
        self.client = self

    def _create_plain(self, name: str, settings: Any) -> None:
        return None

    def _create_doc(self, index: str, doc_id: str, body: dict[str, Any]) -> None:
        if self.refused == 0:
            self.refused += 1
            raise self._busy(429, "rejected_execution_exception", "write queue full")
        self.locks[doc_id] = body

    def get(self, index: str, id: str) -> dict[str, Any]:  # noqa: A002 - the client's name
        if id not in self.locks:
            raise self._not_found(404, "not_found", "no lock")
        return {"_source": self.locks[id], "_seq_no": 0, "_primary_term": 1}

    def delete(self, index: str, id: str, **_: Any) -> None:  # noqa: A002
        self.locks.pop(id)

    def index_mapping(self, index: str) -> dict[str, Any]:
        return {"_meta": dict(self.meta)}

    def put_index_meta(self, index: str, meta: dict[str, Any]) -> None:
        self.meta = dict(meta)


def test_a_busy_node_delays_the_lock_instead_of_failing() -> None:
    """A 429 on the lock's write (the write queue full during an ingest) is a wait, not an
    error (tests/indexing/test_ingest_slow.py's saturated node failed the ingest on it)."""
    adapter = _BusyOnce()
    assert meta.update(adapter, "docs", "k", lambda _: 1) == 1  # type: ignore[arg-type]
    assert adapter.refused == 1 and adapter.meta == {"k": 1} and not adapter.locks
