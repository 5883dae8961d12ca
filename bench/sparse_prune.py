"""Sparse query pruning: what leaving low-IDF tokens out of the sparse leg costs and saves.

    python bench/sparse_prune.py --bundle B --index I [--url URL] [--dataset DIR]
        [--split train] [--min-idf 0,0.1,0.3,0.5,1.0] [--candidates 100] [--batch 32]
        [--queries 320] [--rounds 2]

For each threshold (``QueryEncoder(sparse_min_idf=...)``, 0 = every token, the default), on
the dataset's ``--split`` queries (train by default: never test judgments): nDCG@10 of LR
hybrid at ``--candidates`` and of the sparse leg alone, the sparse terms per query, and
the wall time per ``_msearch`` batch (median / p99) of the sparse leg at size C, of the
hybrid search at C and of BM25 at size 10 (the baseline), thresholds alternating within
each round on the same node. Writes results/bench/sparse_prune.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from hybrid_cost import add_common_args, batches, latency_ms, ndcg_at_10, time_shape  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.evaluation import load_beir
    from lr_opensearch.legs import parse_weights
    from lr_opensearch.query import QueryEncoder
    from lr_opensearch.search import Retriever, connect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--min-idf", default="0,0.1,0.3,0.5,1.0")
    p.add_argument("--candidates", type=int, default=100)
    p.add_argument("--weights", default=None, help="dense,sparse,bm25 (default: the bundle's)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "sparse_prune.json")
    args = p.parse_args(argv)

    bundle = load_bundle(args.bundle)
    client = connect(args.url, timeout=120)
    weights = parse_weights(args.weights) if args.weights else None
    retriever = Retriever(bundle, client, args.index, weights=weights, candidates=args.candidates)
    dataset = load_beir(args.dataset, args.split)
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    thresholds = [float(x) for x in args.min_idf.split(",")]
    encoders = {t: QueryEncoder(bundle, sparse_min_idf=t) for t in thresholds}
    print(f"{dataset.name} {args.split}: {len(qids)} judged queries; index {args.index}; "
          f"weights {retriever.defaults.weights}; candidates {args.candidates}", flush=True)

    quality: dict[float, dict[str, float]] = {}
    for t, enc in encoders.items():
        retriever.encoder = enc
        terms = [len(q.sparse) for q in enc.encode_batch(texts)]
        row: dict[str, float] = {"sparse_terms_per_query": float(np.mean(terms)),
                                 "queries_without_sparse_terms": float(sum(n == 0 for n in terms))}
        for mode in ("hybrid", "sparse"):
            row[f"{mode}_ndcg@10"] = ndcg_at_10(retriever, dataset, qids, texts, args.batch,
                                                mode=mode)["ndcg@10"]
        quality[t] = row
        print(f"min idf {t:>4}: {row['sparse_terms_per_query']:5.1f} sparse terms/query "
              f"({int(row['queries_without_sparse_terms'])} queries with none); nDCG@10 hybrid "
              f"{row['hybrid_ndcg@10']:.4f}, sparse alone {row['sparse_ndcg@10']:.4f}", flush=True)

    sample = (texts * (1 + args.queries // max(1, len(texts))))[: args.queries]
    timing: dict[float, dict[str, list[float]]] = {t: defaultdict(list) for t in thresholds}
    shapes = ("bm25@10", "sparse", "hybrid-server")
    retriever.search_batch(sample[: args.batch], 10)  # warm
    for r in range(args.rounds):
        for b in batches(sample, args.batch):
            order = thresholds if r % 2 == 0 else thresholds[::-1]
            for t in order:
                retriever.encoder = encoders[t]
                for shape in shapes:
                    timing[t][shape].append(time_shape(retriever, shape, b, args.candidates))
    latency = latency_ms(timing)
    print(f"\nper batch of {args.batch} queries (wall ms, median / p99), C = {args.candidates}:")
    print(f"{'min idf':>8} " + " ".join(f"{s:>18}" for s in shapes) + "   hybrid/bm25 (p50)")
    for t in thresholds:
        row = latency[t]
        print(f"{t:>8} " + " ".join(f"{row[s]['p50_ms']:>8.1f} / {row[s]['p99_ms']:>7.1f}"
                                    for s in shapes)
              + f"   x{row['hybrid-server']['p50_ms'] / row['bm25@10']['p50_ms']:.2f}")
    report = {"dataset": dataset.name, "split": args.split, "index": args.index,
              "bundle": str(bundle.path), "weights": list(retriever.defaults.weights),
              "candidates": args.candidates, "batch": args.batch, "queries": args.queries,
              "rounds": args.rounds, "quality": {str(t): q for t, q in quality.items()},
              "latency": {str(t): v for t, v in latency.items()}, "load_avg": os.getloadavg()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
