"""Ingest under failure, against a real node: SIGKILL mid-run then resume (nothing lost,
nothing doubled, counts right), and bulk rejections (429 / 503 / connection errors)
injected by a transport wrapper around the REAL client."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ingest_support import (
    REPO,
    build_tiny_bundle,
    checkpoint_indexed,
    data_dir,
    index_ids,
    ingest_cli,
    ingest_config,
    read_corpus,
    wait_for_checkpoint,
    write_jsonl,
)
from opensearchpy.exceptions import ConnectionError as OSConnectionError
from opensearchpy.exceptions import TransportError

from lr_opensearch.bundle import load_bundle
from lr_opensearch.errors import IngestError
from lr_opensearch.indexing.run import run

pytestmark = pytest.mark.node

BAD_LINES = {41: b"{not json\n", 142: b'{"title": "no id", "text": "x"}\n'}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("resume_bundle"))


@pytest.fixture(scope="module")
def encoder(tiny: Path) -> Any:
    from lr_opensearch.model import DocEncoder

    return DocEncoder.from_bundle(load_bundle(tiny), device="cpu", batch_size=16)


def dirty_corpus(path: Path, n: int) -> tuple[Path, set[str]]:
    """The first n cranfield documents with two bad lines inserted; returns (path, good ids)."""
    docs = read_corpus(data_dir() / "cranfield" / "corpus.jsonl.gz", limit=n)
    lines: list[Any] = list(docs)
    for line_no in sorted(BAD_LINES):
        lines.insert(line_no - 1, BAD_LINES[line_no])
    return write_jsonl(path, lines), {d["_id"] for d in docs}



def test_sigkill_at_random_chunks_then_resume(tiny: Path, os_client: Any, opensearch_url: str,
                                              index_name: str, tmp_path: Path) -> None:
    n = 300
    corpus, good_ids = dirty_corpus(tmp_path / "c.jsonl", n)
    state, dead, summary_path = tmp_path / "state", tmp_path / "dead.jsonl", tmp_path / "s.json"
    args = [str(corpus), "--bundle", str(tiny), "--index", index_name, "--url", opensearch_url,
            "--state-dir", str(state), "--dead-letter", str(dead), "--chunk-size", "8",
            "--batch-size", "8", "--sort-window", "24", "--no-progress", "-q",
            "--summary-json", str(summary_path)]
    rng = random.Random(1234)
    killed_at = []
    for _ in range(3):
        previous = max(checkpoint_indexed(state), 0)
        target = previous + rng.randint(1, 8) * 8  # a random later chunk
        proc = subprocess.Popen([sys.executable, "-m", "ingest.bulk", *args], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
        wait_for_checkpoint(proc, state, target, pause=0.005)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        _, err = proc.communicate()
        assert proc.returncode == -signal.SIGKILL, f"finished before the kill: {err.decode()}"
        acked = checkpoint_indexed(state)
        killed_at.append(acked)
        # everything the checkpoint counts is really in the index
        os_client.indices.refresh(index=index_name)
        assert os_client.count(index=index_name)["count"] >= acked
    assert killed_at == sorted(killed_at) and killed_at[-1] < n
    proc_final = ingest_cli(args)
    assert proc_final.returncode == 3, proc_final.stderr.decode()  # 3: bad lines were skipped
    summary = json.loads(summary_path.read_text())
    c = summary["counts"]
    assert (c["read"], c["indexed"], c["failed"], c["skipped"]) == (n + 2, n, 0, 2)
    assert summary["resumed_from_line"] > 0 and summary["complete"]
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) == n and set(ids) == good_ids
    entries = [json.loads(x) for x in dead.read_text().splitlines()]
    assert sorted(e["line"] for e in entries) == sorted(BAD_LINES)  # each once, none lost
    # a rerun of a finished ingest does nothing and reports the same counts
    again = run(ingest_config(corpus, tiny, index_name, opensearch_url, state, chunk_size=8,
                              batch_size=8, sort_window=24, dead_letter=dead))
    assert again.complete and again.docs_this_run == 0 and again.counts.indexed == n
    assert len(dead.read_text().splitlines()) == len(BAD_LINES)


class FaultyClient:
    """The real client, except that ``bulk`` follows a fault plan before reaching the node.

    plan(call_number, doc_ids) -> None (pass through), "429" / "503" (refuse the whole
    request with that status), "down" (connection error), or a set of ids to refuse
    per item with 429 (the other documents really go to the node).
    """

    def __init__(self, real: Any, plan: Callable[[int, list[str]], Any]) -> None:
        self._real = real
        self._plan = plan
        self.calls = 0
        self.faults = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def bulk(self, body: str, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        lines = [x for x in body.split("\n") if x]
        pairs = list(zip(lines[::2], lines[1::2], strict=True))
        ids = [json.loads(a)["index"]["_id"] for a, _ in pairs]
        fault = self._plan(self.calls, ids)
        if fault is None:
            return self._real.bulk(*args, body=body, **kwargs)
        self.faults += 1
        if fault in ("429", "503"):
            raise TransportError(int(fault), "es_rejected_execution_exception",
                                 {"error": {"type": "es_rejected_execution_exception",
                                            "reason": "injected"}})
        if fault == "down":
            raise OSConnectionError("N/A", "injected: connection refused", Exception("refused"))
        keep = [p for p, i in zip(pairs, ids, strict=True) if i not in fault]
        real_items = iter(self._real.bulk(*args, body="\n".join(a + "\n" + s for a, s in keep) + "\n",
                                          **kwargs)["items"] if keep else [])
        items = []
        for doc_id in ids:
            if doc_id in fault:
                items.append({"index": {"_id": doc_id, "status": 429, "error": {
                    "type": "es_rejected_execution_exception", "reason": "injected"}}})
            else:
                items.append(next(real_items))
        return {"took": 1, "errors": True, "items": items}


def test_rejected_bulk_requests_are_retried_until_everything_lands(
        tiny: Path, encoder: Any, os_client: Any, opensearch_url: str, index_name: str,
        tmp_path: Path) -> None:
    corpus, good_ids = dirty_corpus(tmp_path / "c.jsonl", 200)

    def plan(call: int, ids: list[str]) -> Any:
        kind = call % 5
        if kind == 1:
            return "429"
        if kind == 2:
            return "503"
        if kind == 3:
            return "down"
        if kind == 4:
            return set(ids[::3])  # a third of the chunk refused per item
        return None

    client = FaultyClient(os_client, plan)
    summary = run(ingest_config(corpus, tiny, index_name, opensearch_url, tmp_path / "state"),
                  client=client, encoder=encoder)
    assert client.faults >= 10 and summary.retries >= 10
    c = summary.counts
    assert (c.read, c.indexed, c.failed, c.skipped) == (202, 200, 0, 2)
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) and set(ids) == good_ids


def test_persistent_rejection_stops_the_run_and_a_rerun_loses_nothing(
        tiny: Path, encoder: Any, os_client: Any, opensearch_url: str, index_name: str,
        tmp_path: Path) -> None:
    corpus, good_ids = dirty_corpus(tmp_path / "c.jsonl", 120)
    stubborn = sorted(good_ids)[7]
    client = FaultyClient(os_client, lambda call, ids: {stubborn} if stubborn in ids else None)
    config = ingest_config(corpus, tiny, index_name, opensearch_url, tmp_path / "state")
    with pytest.raises(IngestError, match="still refused after 6 attempts"):
        run(config, client=client, encoder=encoder)
    os_client.indices.refresh(index=index_name)
    assert stubborn not in index_ids(os_client, index_name)
    summary = run(config, encoder=encoder)  # the cluster recovered: same command again
    c = summary.counts
    assert (c.read, c.indexed, c.failed, c.skipped) == (122, 120, 0, 2)
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) and set(ids) == good_ids
    settings = os_client.indices.get_settings(index=index_name)[index_name]["settings"]["index"]
    assert settings.get("refresh_interval") in (None, "1s")
