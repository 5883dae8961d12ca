"""The README's first command, ``lr demo``, end to end (slow: it fits the packaged MiniLM on
ADI the first time, about 1-4 minutes on 2 cores, and starts its own local node).

Run as typed except for the port (a free one, so a node on 9200 is never touched): the local
node is installed if needed and started, the bundle built (or reused from the cache), ADI
ingested and searched; then ``lr node stop`` stops the node the demo left running.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from ingest_support import data_dir
from node_support import free_port

pytestmark = [pytest.mark.slow, pytest.mark.node]


def _lr(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LR_TEST_")}
    return subprocess.run([sys.executable, "-m", "lr_opensearch.cli", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_lr_demo_runs_the_main_job() -> None:
    assert (data_dir() / "adi" / "corpus.jsonl").exists() or (
        data_dir() / "adi" / "corpus.jsonl.gz").exists(), "the shared ADI collection is missing"
    port = str(free_port())
    try:
        demo = _lr("demo", "--http-port", port, "--dataset", str(data_dir() / "adi"), "-k", "3")
        out = demo.stdout
        assert demo.returncode == 0, out[-3000:] + demo.stderr[-3000:]
        assert "Model bundle" in out and "Ingest" in out and "Hybrid search" in out
        assert out.count("query: ") >= 1 and "top tokens:" in out
        assert f"--url http://127.0.0.1:{port}" in out  # the command to try next
    finally:
        stop = _lr("node", "stop", "--http-port", port, timeout=180)
        assert stop.returncode == 0, stop.stderr
    assert "stopped node" in stop.stdout  # the demo's node was running until here
