"""Distributed ingest on Ray Data (a local Ray of 2 CPUs) against the real node: a real
collection with bad lines lands with exactly its ids and the single-machine encoder's
vectors; a worker SIGKILLed mid-run is restarted by Ray and nothing is lost or doubled; a
rerun of the whole job leaves exactly the corpus, each bad line reported once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ingest_support import REPO, build_tiny_bundle, data_dir, index_ids, read_corpus, write_jsonl

from lr_opensearch.bundle import load_bundle
from lr_opensearch.indexing.reader import document_text

pytestmark = pytest.mark.node

try:  # the [ray] extra is part of [all] (scripts/setup.sh): missing it is a failure
    import ray  # noqa: F401
except ImportError as exc:  # pragma: no cover - a broken setup
    raise RuntimeError("Ray is not installed: pip install -e '.[all]' (or '.[ray]')") from exc

BAD = {11: b"{broken json\n", 41: b'{"title": "no id", "text": "x"}\n'}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("ray_bundle"))


@pytest.fixture(scope="module")
def dirty(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz")
    lines: list[Any] = list(docs)
    for line_no in sorted(BAD):
        lines.insert(line_no - 1, BAD[line_no])
    return write_jsonl(tmp_path_factory.mktemp("ray_corpus") / "adi.jsonl", lines), docs


def _ray_ingest(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ingest.ray_ingest", *args], cwd=REPO, text=True,
                          capture_output=True, timeout=600, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                               "RAY_USAGE_STATS_ENABLED": "0", **(env or {})})


def _dead_lines(path: Path) -> list[int]:
    return sorted(json.loads(x)["line"] for x in path.read_text().splitlines())


def test_ray_ingest_lands_exactly_the_corpus_with_the_same_vectors(
        tiny: Path, dirty: Any, os_client: Any, opensearch_url: str, tmp_path: Path) -> None:
    corpus, docs = dirty
    index = f"lr-test-ray-{uuid.uuid4().hex[:8]}"
    dead, summary_path = tmp_path / "dead.jsonl", tmp_path / "summary.json"
    try:
        proc = _ray_ingest(str(corpus), "--bundle", str(tiny), "--index", index, "--url",
                           opensearch_url, "--num-cpus", "2", "--workers", "2", "--chunk-size",
                           "16", "--dead-letter", str(dead), "--summary-json", str(summary_path))
        assert proc.returncode == 3, proc.stderr[-3000:]  # 3: the two bad lines
        summary = json.loads(summary_path.read_text())
        assert summary["counts"]["indexed"] == len(docs) and summary["counts"]["skipped"] == 2
        assert summary["reasons"] == {"malformed_json": 1, "missing_id": 1}
        # Ray hands each batch to whichever actor is ready: on a loaded machine one actor may
        # take every batch while the other still loads its model, so only the bound holds.
        assert 1 <= len(summary["workers"]) <= 2
        assert sum(w["docs"] for w in summary["workers"].values()) == len(docs)
        ids = index_ids(os_client, index)
        assert len(ids) == len(set(ids)) == len(docs) and set(ids) == {d["_id"] for d in docs}
        assert _dead_lines(dead) == sorted(BAD)
        from lr_opensearch.model import DocEncoder

        bundle = load_bundle(tiny)
        encoder = DocEncoder.from_bundle(bundle, device="cpu", batch_size=8)
        sample = docs[::11]
        expected = encoder.encode([document_text(d.get("title", ""), d["text"]) for d in sample])
        for i, d in enumerate(sample):
            src = os_client.get(index=index, id=d["_id"])["_source"]
            np.testing.assert_allclose(src["lr_dense"], expected.dense[i], rtol=1e-4, atol=1e-5)
            assert len(src["lr_sparse"]) == len(expected.sparse[i])
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)


def test_a_killed_worker_and_a_rerun_leave_exactly_the_corpus(
        tiny: Path, dirty: Any, os_client: Any, opensearch_url: str, tmp_path: Path) -> None:
    """A worker SIGKILLs itself holding line 50 (Ray restarts it and reruns the batch), and
    line 30 is refused by the cluster for good (its ``year`` is no number in a ``long``
    field): every other document lands once, each bad line is reported once - and again
    after a rerun of the whole job."""
    from lr_opensearch.engine.opensearch import OpenSearchAdapter

    corpus, docs = dirty
    lines = corpus.read_bytes().splitlines(keepends=True)
    refused = json.loads(lines[29])
    lines[29] = (json.dumps({**refused, "year": "not a year"}) + "\n").encode()
    corpus = tmp_path / "with_refusal.jsonl"
    corpus.write_bytes(b"".join(lines))
    index = f"lr-test-ray-kill-{uuid.uuid4().hex[:8]}"
    assert OpenSearchAdapter(os_client).create_index(index, load_bundle(tiny))
    os_client.indices.put_mapping(index=index, body={"properties": {"metadata": {
        "properties": {"year": {"type": "long"}}}}})
    dead, marker = tmp_path / "dead.jsonl", tmp_path / "killed"
    args = [str(corpus), "--bundle", str(tiny), "--index", index, "--url", opensearch_url,
            "--num-cpus", "2", "--workers", "2", "--chunk-size", "8", "--dead-letter", str(dead),
            "--max-attempts", "2", "--initial-backoff", "0.05"]
    expected = {d["_id"] for d in docs} - {refused["_id"]}
    try:
        proc = _ray_ingest(*args, env={"LR_RAY_TEST_KILL_AT_LINE": "50",
                                       "LR_RAY_TEST_KILL_MARKER": str(marker)})
        assert proc.returncode == 3, proc.stderr[-3000:]
        assert marker.exists(), "the worker holding line 50 was not killed"
        ids = index_ids(os_client, index)
        assert len(ids) == len(set(ids)) == len(expected) and set(ids) == expected
        entries = [json.loads(x) for x in dead.read_text().splitlines()]
        assert sorted(e["line"] for e in entries) == sorted([*BAD, 30])  # once each
        failed = [e for e in entries if e["line"] == 30][0]
        assert failed["kind"] == "failed" and "mapper_parsing" in failed["reason"]
        again = _ray_ingest(*args)  # the whole job once more: idempotent ids
        assert again.returncode == 3, again.stderr[-3000:]
        ids = index_ids(os_client, index)
        assert len(ids) == len(set(ids)) == len(expected)
        assert os_client.count(index=index)["count"] == len(expected)
        assert _dead_lines(dead) == sorted([*BAD, 30])
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)
