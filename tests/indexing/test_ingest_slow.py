"""Slow ingest tests (``pytest -m slow``): real 429s from a node with a one-slot write queue,
and the MiniLM bundle on a real collection (cranfield, 1,400 documents)."""

from __future__ import annotations

import json
import math
import os
import random
import socket
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ingest_support import build_tiny_bundle, data_dir, index_ids, ingest_config, read_corpus

from lr_opensearch.bundle import load_bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.indexing.config import RetryPolicy
from lr_opensearch.indexing.reader import document_text
from lr_opensearch.indexing.run import run

pytestmark = [pytest.mark.slow, pytest.mark.node]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def tiny_queue_node(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A throwaway node whose write thread pool has one thread and a one-slot queue."""
    from lr_opensearch.node import NodeConfig, install, start_node, stop_node

    node_dir = tmp_path_factory.mktemp("tiny-queue-node")
    config = NodeConfig(node_dir=node_dir, http_port=_free_port(), transport_port=_free_port(),
                        heap="512m", cluster_name="lr-test-queue",
                        settings={"thread_pool.write.size": 1,
                                  "thread_pool.write.queue_size": 1})
    start_node(config, install(), timeout=300)
    try:
        yield config.url
    finally:
        stop_node(node_dir, timeout=60)


def test_a_saturated_write_queue_rejects_with_429_and_everything_still_lands(
        tiny_queue_node: str, tmp_path: Path) -> None:
    from lr_opensearch.engine.client import make_client

    client = make_client(tiny_queue_node, timeout=120)
    tiny = build_tiny_bundle(tmp_path)
    docs = read_corpus(data_dir() / "cranfield" / "corpus.jsonl.gz", limit=400)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    # other writers keep the single write thread busy, so the node refuses with 429
    client.indices.create(index="noise", body={"settings": {"number_of_replicas": 0}})
    stop = threading.Event()
    rejected = [0]

    def noise(seed: int) -> None:
        body = "".join('{"index":{}}\n{"f":"%s"}\n' % ("x" * 200) for _ in range(200))
        rng = random.Random(seed)
        while not stop.wait(rng.uniform(0.0, 0.05)):  # bursty, like other clients
            try:
                resp = client.bulk(body=body, index="noise")
                rejected[0] += sum(i["index"]["status"] == 429 for i in resp["items"])
            except Exception:  # noqa: BLE001 - rejected whole; that is the point
                rejected[0] += 1

    threads = [threading.Thread(target=noise, args=(k,), daemon=True) for k in range(3)]
    for t in threads:
        t.start()
    try:
        summary = run(ingest_config(corpus, tiny, "saturated", tiny_queue_node, tmp_path / "s",
                                    chunk_size=20, retry=RetryPolicy(max_attempts=12,
                                                                     initial_backoff=0.1,
                                                                     max_backoff=2.0)))
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert rejected[0] > 0, "the node never rejected anything: the test proves nothing"
    assert summary.retries > 0
    assert summary.counts.indexed == len(docs) and summary.counts.failed == 0
    ids = index_ids(client, "saturated")
    assert len(ids) == len(set(ids)) and set(ids) == {d["_id"] for d in docs}


@pytest.fixture(scope="module")
def minilm_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """$LR_MINILM_BUNDLE if set, else build one from the packaged all-MiniLM-L6-v2."""
    env = os.environ.get("LR_MINILM_BUNDLE")
    if env:
        return Path(env)
    from lr_opensearch.fit.build import build_bundle

    return Path(build_bundle(None, tmp_path_factory.mktemp("minilm") / "bundle"))


def test_minilm_on_cranfield(minilm_bundle: Path, os_client: Any, opensearch_url: str,
                             index_name: str, tmp_path: Path) -> None:
    from lr_opensearch.model import DocEncoder

    corpus = data_dir() / "cranfield" / "corpus.jsonl.gz"
    docs = read_corpus(corpus)
    bundle = load_bundle(minilm_bundle)
    encoder = DocEncoder.from_bundle(bundle, device="cpu", batch_size=32)
    summary = run(ingest_config(corpus, minilm_bundle, index_name, opensearch_url,
                                tmp_path / "state", batch_size=32, chunk_size=200,
                                sort_window=512), encoder=encoder)
    # cranfield has two records with neither title nor text (ids 471 and 995): skipped
    empty = {d["_id"] for d in docs if not (d.get("title", "") + d["text"]).strip()}
    assert len(docs) == 1400 and empty == {"471", "995"}
    c = summary.counts
    assert (c.indexed, c.skipped, c.failed) == (1398, 2, 0)
    assert c.reasons == {"empty_document": 2}
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) and set(ids) == {d["_id"] for d in docs} - empty
    sample = [d for d in docs if d["_id"] not in empty][::140]
    expected = encoder.encode([document_text(d.get("title", ""), d["text"]) for d in sample])
    for i, d in enumerate(sample):
        src = os_client.get(index=index_name, id=d["_id"])["_source"]
        np.testing.assert_allclose(src["lr_dense"], expected.dense[i], rtol=1e-4, atol=1e-5)
        assert math.isclose(float(np.linalg.norm(src["lr_dense"])), 1.0, rel_tol=1e-4)
        want = {encode_key(bundle.tokenizer.id_to_token(t)): w
                for t, w in expected.sparse[i].items()}
        assert set(src["lr_sparse"]) == set(want)
        for key, w in want.items():
            assert math.isclose(src["lr_sparse"][key], w, rel_tol=1e-4)
