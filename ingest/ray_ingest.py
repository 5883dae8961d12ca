"""Distributed ingest on Ray Data: the same encoder and writer, on many workers.

    python -m ingest.ray_ingest CORPUS --bundle B --index I [--url URL] [--address auto]
        [--workers 2] [--device cpu|cuda] [--gpus-per-worker 1] [--dtype fp32|fp16|bf16]
        [--batch-size 32] [--chunk-size 256] [--dead-letter F] [--summary-json F]

Why Ray Data (and not Spark): the expensive step is a GPU model forward, and Ray Data's
stateful ``map_batches`` (an actor pool, one model load per actor, ``num_gpus`` per actor,
streaming execution with backpressure) is built for batch inference; Spark would need a
pandas UDF re-loading the model per partition or hand-managed executors, and JVM
serialization in between. Data that lives in a lakehouse can still come in as Parquet.

How a run goes:

1. The driver loads the bundle, connects (OpenSearch or Elasticsearch, detected), creates
   the index or checks it was built with this bundle (a mismatch stops here, nothing
   written) - the same ``ensure_index`` as single-machine ingest.
2. The driver reads the corpus with the same reader (JSONL / JSONL.gz; or Parquet with
   ``_id`` / ``title`` / ``text`` columns, ``line`` = row number + 1): every bad record
   goes to the dead-letter file with its line number, as ``python -m ingest.bulk`` does;
   valid records become rows of a Ray dataset.
3. ``map_batches(EncodeAndWrite, concurrency=--workers)``: each actor loads the document
   encoder once (``--device``, ``--dtype``), and per batch runs the very pipeline of
   single-machine ingest (``EncodePipeline``: length-sorted encoder batches, character cap,
   non-finite check, encoder refusals found one by one) and its writer's send loop
   (``BulkWriter.write_chunk``: the official bulk helper of the cluster's client, retries
   with backoff on 429 / 5xx / no answer, permanent refusals reported) - called
   synchronously. It returns one outcome row per document.
4. The driver streams the outcomes: counts, dead letters (written once per line), the
   per-worker figures; then restores nothing (no load settings are changed: many writers
   from many machines) and refreshes the index.

Failure semantics: documents are written with their corpus ``_id`` (index operations), so
writing one twice leaves one document. When a worker dies mid-batch, Ray restarts the actor
and runs the batch again (``--max-restarts``, ``--max-task-retries``); when the whole job
dies, rerunning the command writes everything again: either way the index ends with
exactly the corpus, nothing lost, nothing duplicated. A permanently refused record is
reported once: only the final outcome of each line is kept. There is no checkpoint: a rerun
re-encodes (use the single-machine ingest's resume for that).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lr_opensearch.errors import ConfigError, IngestError, LRError
from lr_opensearch.indexing.checkpoint import FAILED, INDEXED, SKIPPED
from lr_opensearch.indexing.config import RetryPolicy
from lr_opensearch.indexing.reader import CorpusReader, Record, Rejection
from lr_opensearch.indexing.report import DeadLetter

logger = logging.getLogger("ingest.ray")

DTYPES = ("fp32", "fp16", "bf16")
OUTCOME_COLUMNS = ("line", "id", "outcome", "reason", "message", "truncated", "title_only",
                   "worker")


class _Outcomes:
    """What one batch did, line by line: stands in for the watermark and the dead-letter
    file of single-machine ingest (the driver keeps the real ones)."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, Any]] = {}
        self.messages: dict[int, str] = {}

    def settle(self, line: int, outcome: str, *, reason: str | None = None,
               truncated: bool = False, title_only: bool = False) -> None:
        self.rows[line] = {"outcome": outcome, "reason": reason or "", "truncated": truncated,
                           "title_only": title_only}

    def add(self, *, line: int, doc_id: str | None, kind: str, reason: str, message: str,
            excerpt: str = "") -> None:
        self.messages[line] = message


class _SyncWriter:
    """The pipeline's writer, sending each chunk at once in this thread."""

    def __init__(self, writer: Any) -> None:
        self.writer = writer

    def put(self, chunk: list[Any]) -> float:
        self.writer.write_chunk(chunk)
        return 0.0


class EncodeAndWrite:
    """The stateful batch transform: one model load and one cluster client per actor."""

    def __init__(self, bundle: str, index: str, connection: dict[str, Any], device: str,
                 dtype: str, batch_size: int, retry: dict[str, Any], corpus: str,
                 layout: str = "rank_features", runtime: str = "auto") -> None:
        from lr_opensearch.bundle import load_bundle
        from lr_opensearch.engine.client import connect
        from lr_opensearch.engine.factory import make_adapter
        from lr_opensearch.indexing.documents import SparseKeys
        from lr_opensearch.model.runtime import open_doc_encoder

        self.bundle = load_bundle(bundle)
        if dtype == "fp32":  # ONNX Runtime on a CPU (--runtime), else torch
            self.encoder = open_doc_encoder(self.bundle, runtime=runtime, device=device,
                                            batch_size=batch_size)
        else:
            import torch

            from lr_opensearch.model import DocEncoder

            torch_dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
            self.encoder = DocEncoder.from_bundle(self.bundle, device=device,
                                                  batch_size=batch_size, dtype=torch_dtype)
        self.keys = SparseKeys(self.bundle.tokenizer, layout)  # the index's sparse layout
        self.adapter = make_adapter(connect(**connection))
        self.index, self.batch_size, self.corpus = index, batch_size, corpus
        self.retry = RetryPolicy(**retry)
        self.worker = f"{socket.gethostname()}:{os.getpid()}"
        self.fault_line = int(os.environ.get("LR_RAY_TEST_KILL_AT_LINE", "0"))

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        from lr_opensearch.indexing.pipeline import Batching, EncodePipeline
        from lr_opensearch.indexing.writer import BulkWriter

        records = [Record(line=int(line), end_offset=0, id=str(doc_id), title=str(title),
                          text=str(text), metadata=json.loads(str(meta)))
                   for line, doc_id, title, text, meta in zip(
                       batch["line"], batch["id"], batch["title"], batch["text"],
                       batch["metadata"], strict=True)]
        self._maybe_die(records)
        outcomes = _Outcomes()
        writer = BulkWriter(self.adapter, self.index, watermark=outcomes,  # type: ignore[arg-type]
                            dead_letter=outcomes,  # type: ignore[arg-type]
                            on_chunk_done=lambda: None, retry=self.retry)
        pipeline = EncodePipeline(self.encoder, self.keys, _SyncWriter(writer),  # type: ignore[arg-type]
                                  watermark=outcomes, dead_letter=outcomes,  # type: ignore[arg-type]
                                  batching=Batching(self.bundle.config.max_length,
                                                    self.batch_size, len(records), len(records)),
                                  corpus=self.corpus)
        for record in records:
            pipeline.add(record)
        pipeline.finish()
        out: dict[str, list[Any]] = {c: [] for c in (*OUTCOME_COLUMNS, "encode_s", "write_s")}
        for record in records:
            row = outcomes.rows.get(record.line)
            if row is None:  # internal invariant: every document has an outcome
                raise IngestError(f"line {record.line} ({record.id}) got no outcome")
            out["line"].append(record.line)
            out["id"].append(record.id)
            out["outcome"].append(row["outcome"])
            out["reason"].append(row["reason"])
            out["message"].append(outcomes.messages.get(record.line, ""))
            out["truncated"].append(bool(row["truncated"]))
            out["title_only"].append(bool(row["title_only"]))
            out["worker"].append(self.worker)
            # the batch's times, on its first row only (the driver sums them per worker)
            first = len(out["encode_s"]) == 0
            out["encode_s"].append(pipeline.encode_s if first else 0.0)
            out["write_s"].append(writer.write_s if first else 0.0)
        return out

    def _maybe_die(self, records: list[Record]) -> None:
        """Tests only: SIGKILL this worker process the first time it holds the given line
        (a marker file next to the corpus says it happened), to exercise Ray's retry."""
        if not self.fault_line or not any(r.line == self.fault_line for r in records):
            return
        marker = Path(os.environ["LR_RAY_TEST_KILL_MARKER"])
        if not marker.exists():
            marker.write_text(self.worker)
            os.kill(os.getpid(), 9)


@dataclass
class RaySummary:
    """The outcome of a distributed run (the same counts as ``IngestSummary``)."""

    index: str
    corpus: str
    counts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    workers: dict[str, dict[str, float]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    dead_letter: str | None = None

    @property
    def docs_per_s(self) -> float:
        return self.counts[INDEXED] / self.elapsed_s if self.elapsed_s else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "corpus": self.corpus, "counts": dict(self.counts),
                "reasons": dict(self.reasons), "workers": self.workers,
                "elapsed_s": self.elapsed_s, "docs_per_s": self.docs_per_s,
                "dead_letter": self.dead_letter}

    def format_text(self) -> str:
        c = self.counts
        lines = [f"ingested {self.corpus} into {self.index} on Ray: read {c['read']}, indexed "
                 f"{c[INDEXED]}, skipped {c[SKIPPED]}, failed {c[FAILED]}, truncated "
                 f"{c['truncated']}; {self.elapsed_s:.1f} s, {self.docs_per_s:.2f} docs/s"]
        if self.reasons:
            lines.append("  reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items())))
        for worker, w in sorted(self.workers.items()):
            lines.append(f"  worker {worker}: {int(w['docs'])} docs, encode {w['encode_s']:.1f} s, "
                         f"bulk {w['write_s']:.1f} s")
        if self.dead_letter:
            lines.append(f"  dead letters: {self.dead_letter}")
        return "\n".join(lines)


def read_rows(corpus: str, dead: DeadLetter, summary: RaySummary) -> list[dict[str, Any]]:
    """Valid records as dataset rows; bad ones straight to the dead letters."""
    if corpus.endswith(".parquet"):
        return _parquet_rows(corpus)
    rows = []
    for item in CorpusReader(corpus):
        if isinstance(item, Rejection):
            summary.counts["read"] += 1
            summary.counts[SKIPPED] += 1
            summary.reasons[item.reason] += 1
            dead.add(line=item.line, doc_id=item.id, kind=SKIPPED, reason=item.reason,
                     message=item.message, excerpt=item.excerpt)
        elif isinstance(item, Record):
            rows.append({"line": item.line, "id": item.id, "title": item.title, "text": item.text,
                         "metadata": json.dumps(item.metadata, ensure_ascii=False)})
    return rows


def _parquet_rows(path: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    missing = [c for c in ("_id", "text") if c not in table.column_names]
    if missing:
        raise ConfigError(f"{path}: Parquet input needs columns _id and text (title optional); "
                          f"missing {missing}")
    cols = table.to_pydict()
    titles = cols.get("title") or [""] * table.num_rows
    return [{"line": i + 1, "id": str(cols["_id"][i]), "title": titles[i] or "",
             "text": cols["text"][i] or "", "metadata": "{}"} for i in range(table.num_rows)]


def run_distributed(args: argparse.Namespace) -> RaySummary:
    try:
        import ray
    except ImportError as exc:
        raise ConfigError("Ray is not installed: pip install 'lr-opensearch[ray]'") from exc
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.cli.common import connection_kwargs
    from lr_opensearch.engine.client import connect
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.indexing.index_setup import ensure_index, index_layout

    started = time.perf_counter()
    bundle = load_bundle(args.bundle)
    connection = connection_kwargs(args)
    adapter = make_adapter(connect(**connection))
    ensure_index(adapter, args.index, bundle)
    layout = index_layout(adapter, args.index)
    connection["engine"] = adapter.engine  # the workers need not ask again
    dead_path = Path(args.dead_letter or f"{args.index}-ray.dead-letter.jsonl")
    summary = RaySummary(index=args.index, corpus=args.corpus, dead_letter=str(dead_path))
    dead = DeadLetter(dead_path, corpus=args.corpus, index=args.index, keep_through_line=0)
    try:
        rows = read_rows(args.corpus, dead, summary)
        if not ray.is_initialized():
            ray.init(address=args.address, num_cpus=args.num_cpus, include_dashboard=False,
                     log_to_driver=args.verbose, ignore_reinit_error=True)
        ray.data.DataContext.get_current().enable_progress_bars = args.verbose
        # enough blocks for every actor to get work: at least 4 per actor, about a chunk each
        blocks = max(4 * args.workers, -(-len(rows) // args.chunk_size))
        ds = ray.data.from_items(rows, override_num_blocks=max(1, min(blocks, len(rows))))
        retry = {"max_attempts": args.max_attempts, "initial_backoff": args.initial_backoff,
                 "max_backoff": args.max_backoff}
        kwargs: dict[str, Any] = {}
        if args.gpus_per_worker:
            kwargs["num_gpus"] = args.gpus_per_worker
        out = ds.map_batches(
            EncodeAndWrite, batch_size=args.chunk_size, concurrency=args.workers,
            fn_constructor_kwargs={"bundle": str(bundle.path), "index": args.index,
                                   "connection": connection, "device": args.device,
                                   "dtype": args.dtype, "batch_size": args.batch_size,
                                   "retry": retry, "corpus": args.corpus, "layout": layout,
                                   "runtime": args.runtime},
            max_restarts=args.max_restarts, max_task_retries=args.max_task_retries, **kwargs)
        per_worker: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        final: dict[int, dict[str, Any]] = {}
        for row in out.iter_rows():
            final[int(row["line"])] = row  # a retried batch's outcome replaces the first
            w = per_worker[row["worker"]]
            w["encode_s"] += float(row["encode_s"])
            w["write_s"] += float(row["write_s"])
        for line in sorted(final):
            row = final[line]
            per_worker[row["worker"]]["docs"] += 1
            summary.counts["read"] += 1
            summary.counts[row["outcome"]] += 1
            summary.counts["truncated"] += bool(row["truncated"])
            if row["outcome"] != INDEXED:
                summary.reasons[row["reason"]] += 1
                dead.add(line=line, doc_id=row["id"], kind=row["outcome"], reason=row["reason"],
                         message=row["message"])
        summary.workers = {k: dict(v) for k, v in per_worker.items()}
    finally:
        dead.close()
    adapter.refresh(args.index)
    summary.elapsed_s = time.perf_counter() - started
    return summary


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from lr_opensearch.cli.common import add_connection_args, add_runtime_arg

    p = argparse.ArgumentParser(prog="python -m ingest.ray_ingest", description=__doc__.split("\n\n")[0],
                                epilog="exit status: 0 every record indexed; 3 done, some "
                                "records skipped or refused (dead letters); 1 error.")
    p.add_argument("corpus", help="BEIR corpus.jsonl[.gz], or .parquet with _id/title/text")
    p.add_argument("--bundle", required=True)
    p.add_argument("--index", required=True)
    g = p.add_argument_group("cluster (defaults: LR_OPENSEARCH_*)")
    add_connection_args(g, timeout=True)
    g = p.add_argument_group("Ray")
    g.add_argument("--address", default=None,
                   help="Ray cluster address (default: a local Ray with --num-cpus; 'auto' "
                   "inside `ray job submit`)")
    g.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray (default all)")
    g.add_argument("--workers", type=int, default=2, help="encoder actors (one model each)")
    g.add_argument("--gpus-per-worker", type=float, default=0.0)
    g.add_argument("--device", default="cpu", help="torch device in each actor (cpu, cuda)")
    g.add_argument("--dtype", choices=DTYPES, default="fp32", help="fp16/bf16 on GPUs")
    add_runtime_arg(g)
    g.add_argument("--batch-size", type=int, default=32, help="documents per encoder forward")
    g.add_argument("--chunk-size", type=int, default=256, help="documents per Ray batch and bulk")
    g.add_argument("--max-restarts", type=int, default=3, help="restarts of a dead actor")
    g.add_argument("--max-task-retries", type=int, default=3, help="re-runs of its batch")
    g = p.add_argument_group("retries and reports")
    g.add_argument("--max-attempts", type=int, default=8)
    g.add_argument("--initial-backoff", type=float, default=0.5)
    g.add_argument("--max-backoff", type=float, default=30.0)
    g.add_argument("--dead-letter", type=Path)
    g.add_argument("--summary-json", type=Path)
    g.add_argument("-v", "--verbose", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from lr_opensearch.cli.common import configure_logging

    configure_logging(args.verbose)
    if not args.verbose:
        logging.getLogger("ray").setLevel(logging.WARNING)
    try:
        summary = run_distributed(args)
    except LRError as exc:
        logger.error("%s", exc)
        return 1
    if args.summary_json:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary.to_dict(), indent=1), encoding="utf-8")
    print(summary.format_text(), flush=True)
    c = summary.counts
    return 0 if c[FAILED] == 0 and c[SKIPPED] == 0 else 3


if __name__ == "__main__":
    sys.exit(main())
