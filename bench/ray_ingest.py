"""Distributed ingest (Ray Data, local) against single-machine ingest, same corpus and machine.

    python bench/ray_ingest.py [--url http://127.0.0.1:9200] [--bundle DIR]
        [--corpus ../shared/data/cisi/corpus.jsonl.gz] [--limit 400] [--workers 2]

Writes the first ``--limit`` documents of the corpus to a file, then ingests them twice into
fresh indices: ``python -m ingest.bulk`` (one process: encoder + writer thread) and
``python -m ingest.ray_ingest`` (a local Ray with the machine's CPUs, ``--workers`` encoder
actors), each in its own process, timed from start to exit (model loading and, for Ray,
starting Ray included: what a user waits for). Prints docs/s of both, the ratio (expect
<= 1 on 2 cores: the point of Ray is scaling out over machines and GPUs), and where the
time went (encoder vs bulk per Ray worker; encode / write / stall for the single run).
Without ``--bundle`` it uses results/bundles/minilm (built if absent). Writes
results/bench/ray_ingest.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


def timed_run(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, text=True, capture_output=True, env=env, check=False)
    return time.perf_counter() - t0, proc


def main(argv: list[str] | None = None) -> int:
    from query_encode import ensure_bundle

    from lr_opensearch.search import connect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("LR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    p.add_argument("--bundle", type=Path, default=None)
    p.add_argument("--corpus", type=Path,
                   default=REPO.parent / "shared" / "data" / "cisi" / "corpus.jsonl.gz")
    p.add_argument("--limit", type=int, default=400)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--chunk-size", type=int, default=32,
                   help="documents per Ray batch (small enough that every actor gets work)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "ray_ingest.json")
    args = p.parse_args(argv)
    bundle = ensure_bundle(args.bundle)
    client = connect(args.url)
    tmp = Path(tempfile.mkdtemp(prefix="lr-ray-bench-"))
    corpus = tmp / "corpus.jsonl"
    with gzip.open(args.corpus, "rt", encoding="utf-8") as src, open(corpus, "w") as dst:
        for i, line in enumerate(src):
            if i >= args.limit:
                break
            dst.write(line)
    tag = uuid.uuid4().hex[:6]
    single_index, ray_index = f"lr-bench-single-{tag}", f"lr-bench-ray-{tag}"
    results: dict[str, Any] = {"corpus": str(args.corpus), "docs": args.limit,
                               "bundle": str(bundle), "workers": args.workers,
                               "cpus": os.cpu_count()}
    try:
        wall, proc = timed_run([sys.executable, "-m", "ingest.bulk", str(corpus), "--bundle",
                                str(bundle), "--index", single_index, "--url", args.url,
                                "--state-dir", str(tmp / "state"), "--no-progress", "-q",
                                "--summary-json", str(tmp / "single.json")])
        if proc.returncode not in (0, 3):
            raise SystemExit(f"single-machine ingest failed:\n{proc.stderr[-3000:]}")
        single = json.loads((tmp / "single.json").read_text())
        results["single"] = {"wall_s": wall, "docs_per_s": args.limit / wall,
                             "encode_s": single["encode_s"], "write_s": single["write_s"],
                             "wait_s": single["wait_s"]}
        wall, proc = timed_run([sys.executable, "-m", "ingest.ray_ingest", str(corpus),
                                "--bundle", str(bundle), "--index", ray_index, "--url", args.url,
                                "--workers", str(args.workers), "--chunk-size",
                                str(args.chunk_size), "--dead-letter",
                                str(tmp / "ray-dead.jsonl"), "--summary-json",
                                str(tmp / "ray.json")])
        if proc.returncode not in (0, 3):
            raise SystemExit(f"Ray ingest failed:\n{proc.stderr[-3000:]}")
        ray_summary = json.loads((tmp / "ray.json").read_text())
        results["ray"] = {"wall_s": wall, "docs_per_s": args.limit / wall,
                          "pipeline_s": ray_summary["elapsed_s"],
                          "workers": ray_summary["workers"]}
        for name, index in (("single", single_index), ("ray", ray_index)):
            client.indices.refresh(index=index)
            results[name]["indexed"] = int(client.count(index=index)["count"])
    finally:
        for index in (single_index, ray_index):
            client.indices.delete(index=index, ignore_unavailable=True)
    results["ratio_ray_over_single"] = results["ray"]["docs_per_s"] / results["single"]["docs_per_s"]
    results["load_avg"] = os.getloadavg()
    s, r = results["single"], results["ray"]
    print(f"{args.limit} documents of {args.corpus.parent.name}, bundle {Path(bundle).name}, "
          f"{os.cpu_count()} CPUs:")
    print(f"  python -m ingest.bulk:       {s['wall_s']:6.1f} s  {s['docs_per_s']:5.2f} docs/s  "
          f"(encode {s['encode_s']:.1f} s, bulk {s['write_s']:.1f} s, stalled {s['wait_s']:.1f} s)")
    print(f"  python -m ingest.ray_ingest: {r['wall_s']:6.1f} s  {r['docs_per_s']:5.2f} docs/s  "
          f"({args.workers} actors)")
    for worker, w in sorted(r["workers"].items()):
        print(f"    worker {worker}: {int(w['docs'])} docs, encode {w['encode_s']:.1f} s, "
              f"bulk {w['write_s']:.1f} s")
    print(f"  Ray / single docs/s: {results['ratio_ray_over_single']:.2f}; both indexed "
          f"{s['indexed']} / {r['indexed']} of {args.limit}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
