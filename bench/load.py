"""Search under load: K concurrent clients for a bounded time, LR hybrid and BM25 side by side.

    python bench/load.py [--url http://127.0.0.1:9200] [--bundle DIR] [--dataset DIR]
                         [--clients 8] [--seconds 20] [--rounds 2] [--k 10]
                         [--candidates 100 | --candidates 10,30,100]

Indexes the dataset for the bundle if no ``lr eval`` index exists (the same name as
``lr eval`` uses, so either reuses the other's), then runs, for each mode in turn
(alternating over ``--rounds`` so that drift on a shared machine hits both alike), K
threads that each send one search at a time (``Retriever.search``, k hits, the dataset's
queries in a loop) until the time is up. Reports per mode: searches, QPS, latency p50 /
p90 / p99 and the error count (must be 0), and the hybrid / BM25 ratios measured in this
process. With several ``--candidates`` LR hybrid runs at each (BM25 once per round) and a
latency-vs-candidates plot is written (results/bench/load.png). Point ``--url`` (and the
usual ``LR_OPENSEARCH_*`` credentials) at your own cluster and ``--index`` at your index to
measure it there. Without ``--bundle`` it uses results/bundles/minilm (built if absent).
Writes results/bench/load.json; exit status 1 on any error.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

MODES = ("hybrid", "bm25")


def run_mode(retriever: Any, texts: list[str], mode: str, clients: int, seconds: float,
             k: int, **search: Any) -> dict[str, Any]:
    """``clients`` threads each running ``retriever.search(text, k, mode, **search)`` for
    ``seconds``."""
    return {"mode": mode, **run_clients(
        lambda text: retriever.search(text, k=k, mode=mode, **search), texts, clients, seconds)}


def run_clients(search_one: Any, texts: list[str], clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` threads each calling ``search_one(text)`` (the texts in a loop, one call at
    a time) until ``seconds`` are up: searches, QPS, latency p50 / p90 / p99 in ms, errors."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    errors: list[str] = []
    start = threading.Barrier(clients + 1)
    deadline = [0.0]

    def client(j: int) -> None:
        i = j * 7919
        start.wait()
        while time.perf_counter() < deadline[0]:
            text = texts[i % len(texts)]
            i += 1
            t0 = time.perf_counter()
            try:
                search_one(text)
            except Exception as exc:  # noqa: BLE001 - counted and reported
                errors.append(f"{type(exc).__name__}: {str(exc)[:200]}")
                continue
            latencies[j].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=client, args=(j,)) for j in range(clients)]
    for t in threads:
        t.start()
    deadline[0] = time.perf_counter() + seconds
    t0 = time.perf_counter()
    start.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    flat = np.asarray([x for per in latencies for x in per]) * 1000.0
    return {"searches": int(flat.size), "seconds": wall,
            "qps": flat.size / wall if wall else 0.0,
            "p50_ms": float(np.percentile(flat, 50)) if flat.size else None,
            "p90_ms": float(np.percentile(flat, 90)) if flat.size else None,
            "p99_ms": float(np.percentile(flat, 99)) if flat.size else None,
            "errors": len(errors), "first_errors": errors[:5]}


def main(argv: list[str] | None = None) -> int:
    from query_encode import ensure_bundle

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.evaluation import load_beir
    from lr_opensearch.evaluation.runs import default_index_name, ensure_indexed
    from lr_opensearch.search import Retriever, connect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("LR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    p.add_argument("--bundle", type=Path, default=None)
    p.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "data" / "scifact")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--candidates", default="100", help="hits per leg; several: 10,30,100")
    p.add_argument("--index", default=None,
                   help="an existing index for the bundle (default: the lr eval index of "
                   "--dataset, ingested if absent)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "load.json")
    args = p.parse_args(argv)

    bundle = load_bundle(ensure_bundle(args.bundle))
    client = connect(args.url, timeout=60)
    dataset = load_beir(args.dataset)
    index = args.index or default_index_name(dataset, bundle)
    status = "given" if args.index else ensure_indexed(client, dataset, bundle, index, args.url)
    cs = [int(c) for c in str(args.candidates).split(",")]
    print(f"index {index} ({status}); {args.clients} clients, {args.seconds:.0f} s per mode "
          f"and round, {args.rounds} rounds, candidates {cs}", flush=True)
    retriever = Retriever(bundle, client, index)
    texts = list(dataset.queries.values())
    retriever.search_batch(texts[:64], k=args.k)  # warm the word cache and the node
    shapes = [("bm25", None)] + [("hybrid", c) for c in cs]
    runs: dict[str, list[dict[str, Any]]] = {name(m, c): [] for m, c in shapes}
    for r in range(args.rounds):
        for mode, c in (shapes if r % 2 == 0 else shapes[::-1]):
            search = {} if c is None else {"candidates": c}
            res = run_mode(retriever, texts, mode, args.clients, args.seconds, args.k, **search)
            runs[name(mode, c)].append(res)
            print(f"round {r + 1} {name(mode, c):<12} {res['searches']:>6} searches  "
                  f"{res['qps']:7.1f} QPS  p50 {res['p50_ms']:7.1f} ms  p99 "
                  f"{res['p99_ms']:7.1f} ms  errors {res['errors']}", flush=True)
    summary = {}
    for key, rs in runs.items():
        summary[key] = {"qps": float(np.mean([r["qps"] for r in rs])),
                        "p50_ms": float(np.mean([r["p50_ms"] for r in rs])),
                        "p99_ms": float(np.mean([r["p99_ms"] for r in rs])),
                        "errors": sum(r["errors"] for r in rs),
                        "searches": sum(r["searches"] for r in rs)}
    b = summary["bm25"]
    ratios = {}
    for c in cs:
        h = summary[name("hybrid", c)]
        ratios[f"C={c}"] = {"qps_hybrid_over_bm25": h["qps"] / b["qps"],
                            "p50_hybrid_over_bm25": h["p50_ms"] / b["p50_ms"],
                            "p99_hybrid_over_bm25": h["p99_ms"] / b["p99_ms"]}
        print(f"mean over rounds, C={c}: hybrid {h['qps']:.1f} QPS p50 {h['p50_ms']:.1f} ms "
              f"p99 {h['p99_ms']:.1f} ms | bm25 {b['qps']:.1f} QPS p50 {b['p50_ms']:.1f} ms "
              f"p99 {b['p99_ms']:.1f} ms | hybrid/bm25: QPS "
              f"x{ratios[f'C={c}']['qps_hybrid_over_bm25']:.2f}, p50 "
              f"x{ratios[f'C={c}']['p50_hybrid_over_bm25']:.2f}, p99 "
              f"x{ratios[f'C={c}']['p99_hybrid_over_bm25']:.2f}")
    errors = sum(v["errors"] for v in summary.values())
    print(f"errors: {errors}")
    report = {"url": args.url, "index": index, "dataset": dataset.name, "docs": dataset.n_docs,
              "bundle": str(bundle.path), "clients": args.clients, "seconds": args.seconds,
              "candidates": cs, "rounds": runs, "summary": summary, "ratios": ratios,
              "fusion": retriever._resolve_path("auto", retriever.defaults),
              "machine": {"cpus": os.cpu_count(), "load_avg": os.getloadavg(),
                          "python": platform.python_version()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    if len(cs) > 1:
        plot(summary, cs, args.out.with_suffix(".png"), args.clients)
        print(f"wrote {args.out.with_suffix('.png')}")
    print(f"wrote {args.out}")
    return 1 if errors else 0


def name(mode: str, candidates: int | None) -> str:
    return mode if candidates is None else f"{mode}@{candidates}"


def plot(summary: dict[str, Any], cs: list[int], path: Path, clients: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for stat, style in (("p50_ms", "o-"), ("p99_ms", "s--")):
        ax.plot(cs, [summary[name("hybrid", c)][stat] for c in cs], style,
                label=f"LR hybrid {stat[:3]}")
        ax.axhline(summary["bm25"][stat], color="k", linestyle=":" if stat == "p50_ms" else "-.",
                   label=f"BM25 {stat[:3]}")
    ax.set_xlabel("candidates per leg")
    ax.set_ylabel(f"latency per search, ms ({clients} concurrent clients)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("search latency under load")
    from hybrid_cost import save_figure

    save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
