"""The cluster lease of ``lr models deploy`` (lr_opensearch.cluster.lease) on a plain node:
one holder at a time, the other told who holds it; a dead or expired holder taken over."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import pytest

from lr_opensearch.cluster.lease import LEASE_INDEX, lease
from lr_opensearch.errors import EngineError

pytestmark = pytest.mark.node


def test_one_holder_at_a_time(os_client: Any) -> None:
    key = f"test-{uuid.uuid4().hex[:8]}"
    with lease(os_client, key, "lr models deploy of bundle b1", ttl_s=600):
        with pytest.raises(EngineError, match=r"another lr models deploy of bundle b1 is "
                           r"running \(host .*, pid \d+.*DELETE lr-leases/_doc/" + key):
            with lease(os_client, key, "lr models deploy of bundle b1", ttl_s=600):
                pass
        assert os_client.exists(index=LEASE_INDEX, id=key)
    assert not os_client.exists(index=LEASE_INDEX, id=key)  # released
    with lease(os_client, key, "again", ttl_s=600):  # free again
        pass
    with pytest.raises(RuntimeError), lease(os_client, key, "failing", ttl_s=600):
        raise RuntimeError("the block fails")
    assert not os_client.exists(index=LEASE_INDEX, id=key)  # released on the way out too


def test_a_dead_or_expired_holder_is_taken_over(os_client: Any) -> None:
    import socket
    import time

    key = f"test-{uuid.uuid4().hex[:8]}"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    os_client.index(index=LEASE_INDEX, id=key, refresh="true", body={
        "what": "killed", "host": socket.gethostname(), "pid": int(dead.stdout),
        "since": time.time(), "expires": time.time() + 600})
    with lease(os_client, key, "after a SIGKILL", ttl_s=600):
        assert os_client.get(index=LEASE_INDEX, id=key)["_source"]["what"] == "after a SIGKILL"
    os_client.index(index=LEASE_INDEX, id=key, refresh="true", body={
        "what": "elsewhere", "host": "another-machine", "pid": 1, "since": 0, "expires": 1})
    with lease(os_client, key, "after expiry", ttl_s=600):
        pass
    assert not os_client.exists(index=LEASE_INDEX, id=key)
