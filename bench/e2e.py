"""End-to-end search: LightRetriever query encoder vs the full-backbone query encoder.

    python bench/e2e.py --bundle /tmp/bundles/minilm --url http://127.0.0.1:9220
                        [--dataset DIR] [--index I] [--batch-size 32] [--rounds 3] [--mode hybrid]

Picks the largest collection in ../shared/data that has an ``lr eval`` index for this
bundle on the node (``lr-eval-<name>-<bundle id>``; build one with ``lr eval`` first), or
the one given. Both encoders then run the same queries through ``Retriever.search_encoded``
(one ``_msearch`` per batch, same fusion):

* ``lightretriever``: ``QueryEncoder.encode_batch`` (tokenizer + table lookup);
* ``full``: the bundle's full document encoder on ``instruction + query`` (one forward)
  for the dense vector. The sparse side is the same token-count map in both, so the only
  difference is how the dense query vector is made;
* ``bm25``: the baseline users run today, ``multi_match`` over title and text on the same
  index, batched the same way (the product's latency target: LightRetriever no slower).

Rounds alternate between the three (the CPU is shared with the node and other work).
Per batch it records the encode time, the engine/fusion time and the total; prints QPS,
p50/p99 batch latency and the full / LightRetriever ratios; writes results/bench/e2e.json.

Against an operator's own cluster, under load: ``--clients K --seconds S`` runs each of the
three for S seconds with K client threads, each sending one query at a time (encode +
search), rounds alternating; it prints searches, QPS, p50 / p90 / p99 per query and the
error count per encoder (``--url`` and the ``LR_OPENSEARCH_*`` credentials as for ``lr``;
``--index`` names the index). For a latency-vs-candidates plot under load:
``bench/load.py --candidates 10,30,100``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lr_opensearch.bundle import load_bundle  # noqa: E402
from lr_opensearch.engine.client import cluster_capabilities, make_client  # noqa: E402
from lr_opensearch.evaluation import load_beir  # noqa: E402
from lr_opensearch.evaluation.runs import default_index_name  # noqa: E402
from lr_opensearch.search import Retriever  # noqa: E402

DATA = REPO.parent / "shared" / "data"
logger = logging.getLogger("bench.e2e")


def pick_dataset(client: Any, bundle: Any, given: str | None) -> tuple[Any, str]:
    """(dataset, index): the given one, else the largest collection indexed for the bundle."""
    candidates = (
        [Path(given)] if given else sorted(p for p in DATA.iterdir() if (p / "qrels").is_dir())
    )
    best = None
    for path in candidates:
        ds = load_beir(path)
        index = default_index_name(ds, bundle)
        if client.indices.exists(index=index) and (best is None or ds.n_docs > best[0].n_docs):
            best = (ds, index)
    if best is None:
        raise SystemExit(
            f"no lr-eval index for bundle {bundle.bundle_id} on the node; run "
            f"`lr eval --dataset {DATA}/scifact --bundle {bundle.path}` first"
        )
    return best


def run_encoder(
    name: str, encode: Any, retriever: Retriever, texts: list[str], batch: int, mode: str, k: int
) -> dict[str, list[float]]:
    """Per-batch seconds: encode, search (engine + fusion), total."""
    times: dict[str, list[float]] = {"encode": [], "search": [], "total": []}
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        t0 = time.perf_counter()
        dense, sparse = encode(chunk)
        t1 = time.perf_counter()
        retriever.search_encoded(dense, sparse, k, texts=chunk, mode=mode, source=False)
        t2 = time.perf_counter()
        times["encode"].append(t1 - t0)
        times["search"].append(t2 - t1)
        times["total"].append(t2 - t0)
    return times


def run_bm25(retriever: Retriever, texts: list[str], batch: int, k: int) -> dict[str, list[float]]:
    """Per-batch seconds of the BM25 baseline: the same index's ``multi_match`` over title
    and text, one ``_msearch`` per batch (no query encoding)."""
    times: dict[str, list[float]] = {"encode": [], "search": [], "total": []}
    adapter = retriever.adapter
    for start in range(0, len(texts), batch):
        t0 = time.perf_counter()
        bodies = [adapter.body(adapter.text_query(t), size=k, source=False)
                  for t in texts[start : start + batch]]
        adapter.msearch(retriever.index, bodies, what="bm25 search")
        t1 = time.perf_counter()
        times["encode"].append(0.0)
        times["search"].append(t1 - t0)
        times["total"].append(t1 - t0)
    return times


def summarize(times: dict[str, list[float]], n_queries: int, batch: int) -> dict[str, float]:
    total = np.asarray(times["total"])
    return {
        "qps": n_queries / float(total.sum()),
        "p50_batch_ms": float(np.percentile(total, 50) * 1000),
        "p99_batch_ms": float(np.percentile(total, 99) * 1000),
        "encode_share": float(np.sum(times["encode"]) / total.sum()),
        "encode_ms_per_query": float(np.sum(times["encode"]) / n_queries * 1000),
        "batches": len(total),
        "batch_size": batch,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--url", default=os.environ.get("LR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    ap.add_argument("--dataset", default=None)
    ap.add_argument("--index", default=None)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=None,
                    help="hits per hybrid sub-query (default: the Retriever's)")
    ap.add_argument("--mode", choices=("hybrid", "dense"), default="hybrid")
    ap.add_argument("--clients", type=int, default=0,
                    help="K concurrent client threads, one query at a time each (0: batches)")
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="with --clients: seconds per encoder per round")
    ap.add_argument("--out", default=str(REPO / "results" / "bench" / "e2e.json"))
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("opensearch").setLevel(logging.WARNING)

    from lr_opensearch.model import DocEncoder

    bundle = load_bundle(args.bundle)
    client = make_client(args.url, timeout=120)
    if args.index and args.dataset:  # both named: no lr-eval index needed
        dataset, index = load_beir(Path(args.dataset)), args.index
    else:
        dataset, index = pick_dataset(client, bundle, args.dataset)
        index = args.index or index
    extra = {} if args.candidates is None else {"candidates": args.candidates}
    retriever = Retriever(bundle, client, index, **extra)
    texts = list(dataset.queries.values())
    full = DocEncoder.from_bundle(bundle, batch_size=args.batch_size)
    instruction = bundle.instructions[bundle.resolve_instruction(None)]

    def lr_encode(chunk: list[str]) -> tuple[np.ndarray, list[dict[str, float]]]:
        b = retriever.encoder.encode_batch(chunk)
        return b.dense, b.sparse

    def full_encode(chunk: list[str]) -> tuple[np.ndarray, list[dict[str, float]]]:
        dense = full.encode([instruction + t for t in chunk]).dense
        return dense, retriever.encoder.encode_batch(chunk).sparse  # same sparse side

    encoders = {"lightretriever": lr_encode, "full": full_encode}
    if args.clients > 0:
        return concurrent(args, retriever, encoders, texts, dataset, index, client, bundle)
    for enc in encoders.values():  # warm-up: JIT, caches, first requests
        run_encoder(
            "warmup", enc, retriever, texts[: args.batch_size], args.batch_size, args.mode, args.k
        )
    run_bm25(retriever, texts[: args.batch_size], args.batch_size, args.k)
    times: dict[str, dict[str, list[float]]] = {
        n: {"encode": [], "search": [], "total": []} for n in [*encoders, "bm25"]
    }
    for r in range(args.rounds):
        for name in times:
            t = (run_bm25(retriever, texts, args.batch_size, args.k) if name == "bm25" else
                 run_encoder(name, encoders[name], retriever, texts, args.batch_size, args.mode,
                             args.k))
            for key in t:
                times[name][key] += t[key]
            logger.info("round %d %s: %.1f q/s", r + 1, name, len(texts) / sum(t["total"]))
    n_total = len(texts) * args.rounds
    results = {n: summarize(t, n_total, args.batch_size) for n, t in times.items()}
    lr, fl, bm = results["lightretriever"], results["full"], results["bm25"]
    ratios = {
        "qps_lightretriever_over_full": lr["qps"] / fl["qps"],
        "p50_full_over_lightretriever": fl["p50_batch_ms"] / lr["p50_batch_ms"],
        "p99_full_over_lightretriever": fl["p99_batch_ms"] / lr["p99_batch_ms"],
        "p50_lightretriever_over_bm25": lr["p50_batch_ms"] / bm["p50_batch_ms"],
        "p99_lightretriever_over_bm25": lr["p99_batch_ms"] / bm["p99_batch_ms"],
    }
    print(
        f"dataset {dataset.name} ({dataset.n_docs} docs, {len(texts)} queries x {args.rounds} rounds), "
        f"index {index}, mode {args.mode}, batch {args.batch_size}"
    )
    print(
        f"{'encoder':<15} {'QPS':>8} {'p50 ms':>9} {'p99 ms':>9} {'encode ms/q':>12} {'encode share':>13}"
    )
    for name, res in results.items():
        print(
            f"{name:<15} {res['qps']:>8.1f} {res['p50_batch_ms']:>9.1f} {res['p99_batch_ms']:>9.1f} "
            f"{res['encode_ms_per_query']:>12.2f} {res['encode_share']:>13.1%}"
        )
    print(
        f"QPS ratio LightRetriever / full: {ratios['qps_lightretriever_over_full']:.2f}x; "
        f"p50 full / LR: {ratios['p50_full_over_lightretriever']:.2f}x; "
        f"p99 full / LR: {ratios['p99_full_over_lightretriever']:.2f}x; "
        f"p50 LR / BM25: {ratios['p50_lightretriever_over_bm25']:.2f}x; "
        f"p99 LR / BM25: {ratios['p99_lightretriever_over_bm25']:.2f}x"
    )
    import torch

    caps = cluster_capabilities(client)
    report = {
        "bench": "e2e",
        "dataset": dataset.name,
        "docs": dataset.n_docs,
        "queries": len(texts),
        "rounds": args.rounds,
        "index": index,
        "mode": args.mode,
        "k": args.k,
        "candidates": retriever.candidates,
        "bundle": str(bundle.path),
        "bundle_id": bundle.bundle_id,
        "results": results,
        "ratios": ratios,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(),
            "load_avg": os.getloadavg(),
        },
        "engine": {"version": caps.version, "plugins": list(caps.plugins)},
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 0


def concurrent(args: Any, retriever: Retriever, encoders: dict[str, Any], texts: list[str],
               dataset: Any, index: str, client: Any, bundle: Any) -> int:
    """The ``--clients`` mode: each encoder (and BM25) under K client threads for S seconds."""
    sys.path.insert(0, str(REPO / "bench"))
    from load import run_clients

    adapter = retriever.adapter

    def one(encode: Any) -> Any:
        def search(text: str) -> None:
            dense, sparse = encode([text])
            retriever.search_encoded(dense, sparse, args.k, texts=[text], mode=args.mode,
                                     source=False)
        return search

    def bm25(text: str) -> None:
        adapter.msearch(retriever.index, [adapter.body(adapter.text_query(text), size=args.k,
                                                       source=False)], what="bm25 search")

    runs = {name: one(enc) for name, enc in encoders.items()} | {"bm25": bm25}
    for fn in runs.values():  # warm-up
        fn(texts[0])
    rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in runs}
    for r in range(args.rounds):
        for name in (list(runs) if r % 2 == 0 else list(runs)[::-1]):
            res = run_clients(runs[name], texts, args.clients, args.seconds)
            rounds[name].append(res)
            logger.info("round %d %s: %.1f q/s, p50 %.1f ms, %d errors", r + 1, name,
                        res["qps"], res["p50_ms"] or float("nan"), res["errors"])

    def merged(rs: list[dict[str, Any]]) -> dict[str, Any]:
        return {"searches": sum(x["searches"] for x in rs),
                "qps": sum(x["searches"] for x in rs) / sum(x["seconds"] for x in rs),
                **{f"p{q}_ms": float(np.median([x[f"p{q}_ms"] for x in rs if x[f"p{q}_ms"]]
                                               or [np.nan])) for q in (50, 90, 99)},
                "errors": sum(x["errors"] for x in rs),
                "first_errors": [e for x in rs for e in x["first_errors"]][:5]}

    results = {n: merged(rs) for n, rs in rounds.items()}
    print(f"dataset {dataset.name} ({dataset.n_docs} docs), index {index}, mode {args.mode}, "
          f"{args.clients} clients x {args.seconds:.0f} s x {args.rounds} rounds, "
          f"candidates {retriever.candidates}")
    print(f"{'encoder':<15} {'searches':>9} {'QPS':>8} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} "
          f"{'errors':>7}")
    for name, res in results.items():
        print(f"{name:<15} {res['searches']:>9} {res['qps']:>8.1f} {res['p50_ms']:>8.1f} "
              f"{res['p90_ms']:>8.1f} {res['p99_ms']:>8.1f} {res['errors']:>7}")
    lr, fl, bm = results["lightretriever"], results["full"], results["bm25"]
    ratios = {"qps_lightretriever_over_full": lr["qps"] / fl["qps"],
              "p50_full_over_lightretriever": fl["p50_ms"] / lr["p50_ms"],
              "p50_lightretriever_over_bm25": lr["p50_ms"] / bm["p50_ms"]}
    print(f"QPS LR / full: {ratios['qps_lightretriever_over_full']:.2f}x; p50 full / LR: "
          f"{ratios['p50_full_over_lightretriever']:.2f}x; p50 LR / BM25: "
          f"{ratios['p50_lightretriever_over_bm25']:.2f}x")
    report = {"bench": "e2e-concurrent", "dataset": dataset.name, "docs": dataset.n_docs,
              "index": index, "mode": args.mode, "k": args.k, "clients": args.clients,
              "seconds": args.seconds, "rounds": args.rounds, "candidates": retriever.candidates,
              "bundle": str(bundle.path), "bundle_id": bundle.bundle_id, "results": results,
              "per_round": rounds, "ratios": ratios,
              "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                          "load_avg": os.getloadavg()},
              "engine": {"version": cluster_capabilities(client).version}}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return 1 if any(r["errors"] for r in results.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
