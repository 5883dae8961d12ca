"""A real 3-node OpenSearch cluster on loopback (``lr node start --nodes 3``): ingest across
shards and replicas, server == client fusion across nodes, and node loss (SIGKILL) during an
ingest and during a stream of searches. Slow (the cluster takes about a minute to form):
``python3 -m pytest -m slow tests/node/test_cluster.py -s`` prints the figures."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ingest_support import (
    REPO,
    build_tiny_bundle,
    checkpoint_indexed,
    data_dir,
    index_ids,
    read_corpus,
    wait_for_checkpoint,
)
from node_support import free_port
from waiting import wait_until

from lr_opensearch.bundle import load_bundle
from lr_opensearch.errors import EngineError
from lr_opensearch.indexing.reader import document_text
from lr_opensearch.node import install, node_status, start_node
from lr_opensearch.node.cluster import ClusterSpec, start_cluster, stop_cluster
from lr_opensearch.search import Retriever, connect

pytestmark = [pytest.mark.slow, pytest.mark.node]

QUERIES = ["boundary layer heat transfer", "supersonic flow over a wing", "shock wave",
           "laminar turbulent transition", "heat conduction in plates", "buckling of shells"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSpec]:
    base = free_port()
    while any(_taken(base + i) for i in range(1, 3)):
        base = free_port()
    spec = ClusterSpec(root=tmp_path_factory.mktemp("cluster"), nodes=3, base_http_port=base,
                       heap=os.environ.get("LR_TEST_CLUSTER_HEAP", "512m"),
                       cluster_name="lr-test-cluster",
                       transport_ports=tuple(free_port() for _ in range(3)))
    started = time.monotonic()
    start_cluster(spec, install(), timeout=400)
    print(f"\n[cluster] 3 nodes green in {time.monotonic() - started:.0f} s: {spec.urls}")
    try:
        yield spec
    finally:
        stop_cluster(spec, timeout=60)


def _taken(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("cluster_bundle"))


@pytest.fixture(scope="module")
def client(cluster: ClusterSpec) -> Any:
    return connect(cluster.urls[0], timeout=60)


def _lr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lr_opensearch.cli", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=900, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})


def _ingest(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "ingest.bulk", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})


def _kill(config: Any) -> None:
    pid = node_status(config.node_dir).pid
    assert pid is not None, f"{config.name} is not running"
    os.killpg(pid, signal.SIGKILL)


def _wait_until(ready: Any, what: str, timeout: float = 300) -> None:
    """Poll ``ready()`` until true (every 50 ms); fail naming ``what`` after ``timeout``."""
    wait_until(ready, what, timeout=timeout, pause=0.05)


def _wait_dropped(client: Any, nodes: int, timeout: float = 300) -> None:
    """Until the cluster counts ``nodes`` nodes (a killed one dropped), whatever its status:
    an index without a replica on the lost node stays red until the node is back."""
    client.cluster.health(wait_for_nodes=str(nodes), timeout=f"{int(timeout)}s",
                          request_timeout=timeout + 30)


def _wait_status(client: Any, status: str, nodes: int, timeout: float = 300) -> None:
    client.cluster.health(wait_for_status=status, wait_for_nodes=str(nodes),
                          timeout=f"{int(timeout)}s", request_timeout=timeout + 30)


@pytest.fixture(scope="module")
def loaded(cluster: ClusterSpec, client: Any, tiny: Path,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """Cranfield (1,400 documents) in a 3-shard, 1-replica index, through the CLI."""
    index = f"lr-cluster-{uuid.uuid4().hex[:8]}"
    corpus = data_dir() / "cranfield" / "corpus.jsonl.gz"
    made = _lr("index", "create", "--url", cluster.urls[0], "--bundle", str(tiny), "--index",
               index, "--shards", "3", "--replicas", "1")
    assert made.returncode == 0, made.stderr
    proc = _ingest(str(corpus), "--bundle", str(tiny), "--index", index, "--url",
                   cluster.urls[0], "--state-dir", str(tmp_path_factory.mktemp("st")),
                   "--no-progress", "-q")
    _, err = proc.communicate(timeout=900)
    assert proc.returncode == 3, err[-3000:]  # 3: two empty records skipped, as they must be
    yield index, _indexable(corpus)
    client.indices.delete(index=index, ignore_unavailable=True)


def _indexable(corpus: Path) -> list[dict[str, Any]]:
    """The corpus without its empty records (Cranfield has two: skipped and reported)."""
    return [d for d in read_corpus(corpus)
            if d.get("title", "").strip() or d.get("text", "").strip()]


def test_status_shows_every_node(cluster: ClusterSpec, client: Any) -> None:
    status = _lr("node", "status", "--nodes", "3", "--http-port", str(cluster.base_http_port),
                 "--data-dir", str(cluster.root), "--json")
    assert status.returncode == 0, status.stderr
    rows = json.loads(status.stdout)
    assert [r["url"] for r in rows] == cluster.urls and all(r["running"] for r in rows)
    assert {n["name"] for n in client.cat.nodes(format="json")} == {
        f"lr-{cluster.base_http_port + i}" for i in range(3)}


def test_ingest_across_shards_and_replicas(loaded: Any, client: Any, tiny: Path) -> None:
    index, docs = loaded
    ids = index_ids(client, index)
    assert len(ids) == len(set(ids)) == len(docs) and set(ids) == {d["_id"] for d in docs}
    settings = client.indices.get_settings(index=index)[index]["settings"]["index"]
    assert (settings["number_of_shards"], settings["number_of_replicas"]) == ("3", "1")
    _wait_status(client, "green", 3)
    shards = client.cat.shards(index=index, format="json")
    assert len(shards) == 6 and len({s["node"] for s in shards}) == 3  # spread over nodes
    from lr_opensearch.model import DocEncoder

    encoder = DocEncoder.from_bundle(load_bundle(tiny), device="cpu", batch_size=16)
    sample = docs[::97]
    expected = encoder.encode([document_text(d.get("title", ""), d["text"]) for d in sample])
    for i, d in enumerate(sample):
        src = client.get(index=index, id=d["_id"])["_source"]
        np.testing.assert_allclose(src["lr_dense"], expected.dense[i], rtol=1e-4, atol=1e-5)


def test_server_and_client_fusion_agree_across_nodes(loaded: Any, client: Any,
                                                     tiny: Path) -> None:
    index, _ = loaded
    bundle = load_bundle(tiny)
    for candidates in (5, 30):
        server = Retriever(bundle, client, index, fusion="server", candidates=candidates)
        local = Retriever(bundle, client, index, fusion="client", candidates=candidates)
        assert local.shards == 3
        for text in QUERIES:
            s_hits, c_hits = server.search(text, k=10), local.search(text, k=10)
            assert [h.score for h in c_hits] == pytest.approx([h.score for h in s_hits],
                                                              rel=1e-5), text
            assert {h.doc_id for h in c_hits[:-1]} <= {h.doc_id for h in s_hits}, text


def test_node_loss_during_an_ingest(cluster: ClusterSpec, client: Any, tiny: Path,
                                    tmp_path: Path) -> None:
    """SIGKILL a data node mid-ingest, restart it: once the cluster is whole again every id
    is there exactly once (the run finishes through its retries, or a rerun resumes)."""
    index = f"lr-cluster-loss-{uuid.uuid4().hex[:8]}"
    corpus = data_dir() / "cranfield" / "corpus.jsonl.gz"
    docs = _indexable(corpus)
    made = _lr("index", "create", "--url", cluster.urls[0], "--bundle", str(tiny), "--index",
               index, "--shards", "3", "--replicas", "1")
    assert made.returncode == 0, made.stderr
    state, summary_path = tmp_path / "state", tmp_path / "summary.json"
    args = [str(corpus), "--bundle", str(tiny), "--index", index, "--url", cluster.urls[0],
            "--state-dir", str(state), "--no-progress", "-q", "--chunk-size", "32",
            "--timeout", "60", "--max-attempts", "12", "--max-backoff", "10",
            "--summary-json", str(summary_path)]
    proc = _ingest(*args)
    victim = cluster.configs()[2]
    wait_for_checkpoint(proc, state, 300, timeout=300, pause=0.05)
    _kill(victim)
    killed_at = checkpoint_indexed(state)
    # the node comes back only once the cluster has dropped it (the ingest then meets a
    # two-node cluster with unassigned shards), whatever that takes on this machine
    _wait_dropped(client, 2)
    start_node(victim, install(), wait=False)  # the node comes back, its data on disk
    out, err = proc.communicate(timeout=900)
    first = proc.returncode
    reruns = 0
    while proc.returncode != 3:  # 3: complete, the two empty records skipped
        assert reruns < 3, f"ingest keeps failing: {err[-3000:]}"
        _wait_status(client, "yellow", 3)
        proc = _ingest(*args)
        out, err = proc.communicate(timeout=900)
        reruns += 1
    _wait_status(client, "green", 3)
    summary = json.loads(summary_path.read_text())
    ids = index_ids(client, index)
    print(f"\n[node loss during ingest] killed {victim.name} after {killed_at} acknowledged "
          f"documents; first run exit {first}, reruns {reruns}, retries in the last run "
          f"{summary.get('retries')}; {len(ids)} ids in the index, {len(set(ids))} distinct, "
          f"corpus {len(docs)}")
    assert len(ids) == len(set(ids)) == len(docs) and set(ids) == {d["_id"] for d in docs}
    assert summary["complete"] and summary["counts"]["indexed"] == len(docs)
    assert summary["counts"]["skipped"] == 2 and summary["counts"]["failed"] == 0
    client.indices.delete(index=index, ignore_unavailable=True)



SEARCHES_EACH_SIDE = 50  # searches streamed before the kill, and after the node is dropped


def test_node_loss_during_searches(cluster: ClusterSpec, client: Any, loaded: Any,
                                   tiny: Path) -> None:
    """A stream of searches while a data node is SIGKILLed: answered from replicas, or a
    typed error; a wrong result (ids other than before the kill) is never silent."""
    index, _ = loaded
    _wait_status(client, "green", 3)
    bundle = load_bundle(tiny)
    retriever = Retriever(bundle, client, index, fusion="client", candidates=30)
    modes = ("hybrid", "sparse", "bm25")
    reference = {(q, m): [h.doc_id for h in retriever.search(q, k=10, mode=m)]
                 for q in QUERIES for m in modes}
    counts = {"answered": 0, "failed": 0, "wrong": 0}
    errors: list[str] = []
    stop = threading.Event()

    def stream() -> None:
        i = 0
        while not stop.is_set():
            q, m = QUERIES[i % len(QUERIES)], modes[i % len(modes)]
            i += 1
            try:
                ids = [h.doc_id for h in retriever.search(q, k=10, mode=m)]
            except EngineError as exc:
                counts["failed"] += 1
                errors.append(str(exc)[:200])
                continue
            counts["answered"] += 1
            counts["wrong"] += ids != reference[(q, m)]

    worker = threading.Thread(target=stream)
    worker.start()
    _wait_until(lambda: counts["answered"] >= SEARCHES_EACH_SIDE, "searches before the kill")
    before = dict(counts)
    victim = cluster.configs()[2]
    _kill(victim)
    _wait_dropped(client, 2)  # the cluster has dropped the node
    dropped = dict(counts)
    _wait_until(lambda: sum(counts.values()) - sum(dropped.values()) >= SEARCHES_EACH_SIDE,
                "searches after the cluster dropped the node")
    stop.set()
    worker.join(timeout=120)
    after_kill = {k: counts[k] - before[k] for k in counts}
    print(f"\n[node loss during searches] before the kill: {before}; from the SIGKILL of "
          f"{victim.name} to {SEARCHES_EACH_SIDE} searches after the cluster dropped it: "
          f"{after_kill}; first errors: {errors[:3]}")
    assert counts["wrong"] == 0
    assert after_kill["answered"] > 0
    # the node comes back and the cluster heals
    start_node(victim, install(), wait=False)
    _wait_status(client, "green", 3)
    assert [h.doc_id for h in retriever.search(QUERIES[0], k=10)] == reference[(QUERIES[0],
                                                                                  "hybrid")]
