"""Helpers shared by the ingest tests: a tiny real bundle, corpora, index inspection.

Import from tests as ``from ingest_support import ...`` (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from model_fixtures import save_model_dir, tiny_bert
from tiny_artifacts import tiny_bundle

from lr_opensearch.indexing.config import ConnectionConfig, IngestConfig, RetryPolicy

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REPO = Path(__file__).resolve().parents[1]
TINY_MAX_LENGTH = 48


def data_dir() -> Path:
    """The shared BEIR collections (``../shared/data`` from the work tree, or $LR_DATA_DIR)."""
    return Path(os.environ.get("LR_DATA_DIR", DATA))


def build_tiny_bundle(root: Path, *, seed: int = 0) -> Path:
    """A real bundle around a randomly initialised 2-layer BERT with an MLM head (dense 32)."""
    model, tok = tiny_bert(seed=seed, pooling="mean")
    model_dir = save_model_dir(model, tok, root / f"tiny_model_{seed}")
    return tiny_bundle(root / f"tiny_bundle_{seed}", tok, seed=seed, doc_encoder_dir=model_dir,
                       dense_dim=32, architecture="BertForMaskedLM", sparse_head="mlm",
                       pooling="mean", max_length=TINY_MAX_LENGTH, sparse_top_k=24)


def read_corpus(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    out = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
            if limit is not None and len(out) >= limit:
                break
    return out


def write_jsonl(path: Path, records: Iterable[dict[str, Any] | bytes]) -> Path:
    with open(path, "wb") as f:
        for r in records:
            f.write(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode("utf-8"))
    return path


def ingest_config(corpus: Path | str, bundle: Path, index: str, url: str, state: Path,
                  **kw: Any) -> IngestConfig:
    base: dict[str, Any] = dict(
        corpus=str(corpus), bundle=str(bundle), index=index,
        connection=ConnectionConfig(url=url), batch_size=16, chunk_size=40, sort_window=64,
        state_dir=state, progress=False,
        retry=RetryPolicy(max_attempts=6, initial_backoff=0.05, max_backoff=0.4))
    base.update(kw)
    return IngestConfig(**base)


def index_ids(client: Any, index: str) -> list[str]:
    """Every _id in the index (refreshes first), with repeats if there were any."""
    client.indices.refresh(index=index)
    ids: list[str] = []
    resp = client.search(index=index, body={"query": {"match_all": {}}, "_source": False,
                                            "sort": ["_doc"]}, size=1000, scroll="1m")
    while resp["hits"]["hits"]:
        ids += [h["_id"] for h in resp["hits"]["hits"]]
        resp = client.scroll(scroll_id=resp["_scroll_id"], scroll="1m")
    client.clear_scroll(scroll_id=resp["_scroll_id"])
    return ids


def ingest_cli(args: list[str], *, stdin: bytes | None = None, timeout: float = 300,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m ingest.bulk ARGS`` from the work tree."""
    # one torch thread: the tiny test model gains nothing from more, and loses a lot when
    # the CPU is shared
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "ingest.bulk", *args], cwd=REPO, input=stdin,
                          capture_output=True, timeout=timeout, env=full_env, check=False)


def wait_for_checkpoint(proc: subprocess.Popen[Any], state: Path, at_least: int, *,
                        timeout: float = 240.0, pause: float = 0.01) -> int:
    """Wait until the checkpoint in ``state`` counts ``at_least`` documents indexed by
    ``proc`` (still running: its end first fails, with its stderr); returns the count."""
    from waiting import wait_until

    return wait_until(lambda: max(checkpoint_indexed(state), 0) >= at_least
                      and checkpoint_indexed(state), f"{at_least} documents in the checkpoint",
                      timeout=timeout, pause=pause, process=proc)


def checkpoint_indexed(state: Path) -> int:
    """Documents the checkpoint in ``state`` counts as indexed (-1: none yet, or caught
    mid-rename: ask again)."""
    for path in state.glob("*.json"):
        try:
            return int(json.loads(path.read_text())["counts"]["indexed"])
        except (OSError, ValueError, KeyError):
            return -1
    return -1


def ingest_adi(tmp_path: Path, url: str, index: str, limit: int) -> Path:
    """A tiny bundle (with its document encoder) and the first ``limit`` ADI documents
    ingested into ``index`` through the real ingest; returns the bundle path."""
    from lr_opensearch.indexing.run import run

    bundle = build_tiny_bundle(tmp_path / "b")
    corpus = write_jsonl(tmp_path / "c.jsonl",
                         read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=limit))
    run(IngestConfig(corpus=str(corpus), bundle=str(bundle), index=index,
                     connection=ConnectionConfig(url=url), state_dir=tmp_path / "s",
                     progress=False))
    return bundle


class Here:
    """``python -m ingest.bulk ARGS`` in this process (the subprocess costs seconds of imports
    a test at a time): the exit code and the ERROR lines it logged (fixture ``ingest_here``)."""

    def __init__(self, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
        self.caplog, self.monkeypatch = caplog, monkeypatch

    def __call__(self, args: list[str], env: dict[str, str] | None = None) -> tuple[int, list[str]]:
        from ingest.cli import main

        for name, value in (env or {}).items():
            self.monkeypatch.setenv(name, value)
        self.caplog.clear()
        with self.caplog.at_level(logging.INFO):
            code = main(args)
        return code, [r.getMessage() for r in self.caplog.records if r.levelno >= logging.ERROR]


def dead_letters(path: Path) -> list[dict[str, Any]]:
    """The entries of a dead-letter file (none when it does not exist)."""
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


BEIR_TOPICS = [
    "supersonic boundary layer",
    "heat transfer plate",
    "eiffel tower paris",
    "hospital doctors patients",
    "hybrid sparse dense retrieval",
    "laminar flow wing",
    "french capital city",
    "ranking documents queries",
]


def tiny_beir(root: Path) -> Path:
    """24 documents (3 per topic), 8 queries each judging its topic's first two documents."""
    (root / "qrels").mkdir(parents=True)
    docs, qrels = [], ["query-id\tcorpus-id\tscore"]
    for t, topic in enumerate(BEIR_TOPICS):
        for j in range(3):
            docs.append(
                {
                    "_id": f"{t}-{j}",
                    "title": f"{topic} study {j}",
                    "text": f"we study {topic} in detail, part {j}.",
                }
            )
        qrels += [f"q{t}\t{t}-0\t2", f"q{t}\t{t}-1\t1"]
    queries = [{"_id": f"q{t}", "text": topic} for t, topic in enumerate(BEIR_TOPICS)]
    (root / "corpus.jsonl.gz").write_bytes(
        gzip.compress("".join(json.dumps(d) + "\n" for d in docs).encode())
    )
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (root / "qrels" / "test.tsv").write_text("\n".join(qrels) + "\n")
    return root
