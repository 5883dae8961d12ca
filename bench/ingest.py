"""Ingest throughput: the full pipeline vs the bare doc encoder, same texts, same process.

    python bench/ingest.py --bundle /tmp/bundles/minilm [--corpus scifact] [--limit N]
                           [--url http://127.0.0.1:9210 | --start-node]

1. bare encoder: ``DocEncoder.encode`` over the corpus texts, batched exactly as the
   pipeline batches them (windows sorted by length, same batch size, same character cap);
2. pipeline: ``lr_opensearch.indexing.run.run`` into a fresh index (read, validate, encode, build sources,
   bulk-write in the writer thread, checkpoint, refresh settings, final refresh);
3. bare encoder again (the CPU is shared: two bare runs bracket the pipeline run).

Prints docs/s of each and the ratio pipeline / mean(bare); target >= 0.9 (I/O hidden).
The node's own CPU time during the pipeline run is reported too: on a single machine the
engine indexes on the same cores the encoder uses. Writes results/bench/ingest.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lr_opensearch.bundle import load_bundle  # noqa: E402
from lr_opensearch.indexing.config import ConnectionConfig, IngestConfig  # noqa: E402
from lr_opensearch.indexing.pipeline import CHARS_PER_TOKEN_CAP  # noqa: E402
from lr_opensearch.indexing.reader import CorpusReader, Record  # noqa: E402
from lr_opensearch.indexing.run import run  # noqa: E402

DATA = REPO.parent / "shared" / "data"


def bare_encode(encoder: Any, records: list[Record], *, batch_size: int, window: int,
                max_chars: int) -> float:
    """Seconds to encode ``records`` batched like the pipeline (sorted windows)."""
    t0 = time.perf_counter()
    for start in range(0, len(records), window):
        part = sorted(records[start:start + window], key=lambda r: len(r.title) + len(r.text),
                      reverse=True)
        for b in range(0, len(part), batch_size):
            encoder.encode([r.encoder_text()[:max_chars] for r in part[b:b + batch_size]])
    return time.perf_counter() - t0


def node_cpu_s(client: Any) -> float:
    stats = client.nodes.stats(metric="process")["nodes"]
    return sum(n["process"]["cpu"]["total_in_millis"] for n in stats.values()) / 1000.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", default=os.environ.get("LR_MINILM_BUNDLE", "/tmp/bundles/minilm"))
    ap.add_argument("--corpus", default="scifact", help="collection name in ../shared/data or a path")
    ap.add_argument("--limit", type=int, help="first N documents only (a subset)")
    ap.add_argument("--url", default=os.environ.get("LR_OPENSEARCH_URL"))
    ap.add_argument("--start-node", action="store_true", help="start a throwaway local node")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--chunk-size", type=int, default=256)
    ap.add_argument("--sort-window", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "ingest.json")
    return ap.parse_args()


def corpus_path(args: argparse.Namespace, work: Path) -> Path:
    """The corpus file; with --limit, a plain-file copy of its first N lines."""
    corpus = Path(args.corpus)
    if not corpus.exists():
        corpus = DATA / args.corpus / "corpus.jsonl.gz"
    if not args.limit:
        return corpus
    with gzip.open(corpus, "rt", encoding="utf-8") as f, open(work / "subset.jsonl", "w") as o:
        for i, line in enumerate(f):
            if i >= args.limit:
                break
            o.write(line)
    return work / "subset.jsonl"


def measure(args: argparse.Namespace, corpus: Path, url: str, work: Path) -> dict[str, Any]:
    """bare, pipeline, bare again; returns the raw figures."""
    from lr_opensearch.engine.client import make_client
    from lr_opensearch.model import DocEncoder

    records = [r for r in CorpusReader(str(corpus)) if isinstance(r, Record)]
    bundle = load_bundle(args.bundle)
    max_chars = max(4096, bundle.config.max_length * CHARS_PER_TOKEN_CAP)
    client = make_client(url, timeout=120)
    index = f"bench-ingest-{os.getpid()}"
    encoder = DocEncoder.from_bundle(bundle, device="cpu", batch_size=args.batch_size)
    encoder.encode([r.encoder_text() for r in records[:args.batch_size]])  # warm-up

    def bare() -> float:
        return len(records) / bare_encode(encoder, records, batch_size=args.batch_size,
                                          window=args.sort_window, max_chars=max_chars)
    try:
        load = [os.getloadavg()[0]]
        bare1 = bare()
        load.append(os.getloadavg()[0])
        cpu0 = node_cpu_s(client)
        config = IngestConfig(corpus=str(corpus), bundle=args.bundle, index=index,
                              connection=ConnectionConfig(url=url), batch_size=args.batch_size,
                              chunk_size=args.chunk_size, sort_window=args.sort_window,
                              state_dir=work / "state", restart=True, progress=False)
        summary = run(config, client=client, encoder=encoder)
        node_cpu = node_cpu_s(client) - cpu0
        load.append(os.getloadavg()[0])
        bare2 = bare()
        load.append(os.getloadavg()[0])
        assert summary.counts.indexed == len(records), summary.format_text()
        count = client.count(index=index)["count"]
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)
    return {"records": len(records), "bundle_id": bundle.bundle_id, "bare": [bare1, bare2],
            "summary": summary, "node_cpu": node_cpu, "load": load, "count": count}


def report(args: argparse.Namespace, corpus: Path, url: str, m: dict[str, Any]) -> dict[str, Any]:
    import torch

    summary, n, bare_rate = m["summary"], m["records"], m["bare"]
    mean_bare = sum(bare_rate) / len(bare_rate)
    pipe_rate = summary.docs_this_run / summary.elapsed_s
    share = summary.encode_s / summary.elapsed_s
    result = {
        "corpus": str(corpus), "docs": n, "subset": bool(args.limit), "bundle": args.bundle,
        "bundle_id": m["bundle_id"], "batch_size": args.batch_size,
        "chunk_size": args.chunk_size, "sort_window": args.sort_window,
        "bare_docs_per_s": bare_rate, "pipeline_docs_per_s": pipe_rate,
        "ratio_pipeline_over_bare": pipe_rate / mean_bare, "pipeline_encoder_share": share,
        "pipeline": {"elapsed_s": summary.elapsed_s, "encode_s": summary.encode_s,
                     "bulk_s": summary.write_s, "stalled_on_writer_s": summary.wait_s,
                     "retries": summary.retries, "indexed": summary.counts.indexed,
                     "truncated": summary.counts.truncated, "index_count": m["count"],
                     "node_cpu_s": m["node_cpu"]},
        "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "loadavg_1min_at_steps": m["load"], "python": platform.python_version(),
                    "torch": torch.__version__, "platform": platform.platform(),
                    "node_url": url},
    }
    print(f"corpus {corpus} ({n} docs{', subset' if args.limit else ''}), bundle {m['bundle_id']}")
    print(f"bare encoder      {bare_rate[0]:8.2f} / {bare_rate[1]:8.2f} docs/s (before / after)")
    print(f"ingest pipeline   {pipe_rate:8.2f} docs/s  (encoder {summary.encode_s:.1f} s of "
          f"{summary.elapsed_s:.1f} s; bulk {summary.write_s:.1f} s in the writer thread; "
          f"stalled {summary.wait_s:.1f} s; node CPU {m['node_cpu']:.1f} s)")
    print(f"ratio pipeline / bare = {pipe_rate / mean_bare:.3f}  (target >= 0.90); share of "
          f"pipeline time inside the encoder = {share:.3f}")
    print(f"1-min load average at each step: {', '.join(f'{x:.1f}' for x in m['load'])} "
          f"on {os.cpu_count()} CPUs")
    return result


def main() -> int:
    args = parse_args()
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = Path(tempfile.mkdtemp(prefix="lr-bench-ingest-"))
    node_dir = None
    try:
        corpus = corpus_path(args, work)
        url = args.url
        if args.start_node or not url:
            from lr_opensearch.node import NodeConfig, install, start_node
            node_dir = work / "node"
            cfg = NodeConfig(node_dir=node_dir, http_port=_free_port(), transport_port=_free_port())
            start_node(cfg, install(), timeout=300)
            url = cfg.url
        result = report(args, corpus, url, measure(args, corpus, url, work))
    finally:
        if node_dir is not None:
            from lr_opensearch.node import stop_node
            stop_node(node_dir, timeout=60)
        shutil.rmtree(work, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
