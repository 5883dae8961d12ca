"""Pruned document sparse vectors: fewer stored terms per document, measured.

    python bench/doc_prune.py --bundle B --index I [--url URL] [--dataset DIR]
        [--split train] [--top-k 64,128] [--candidates 100] [--batch 32] [--queries 320]
        [--rounds 2]

Ingest keeps a document's ``sparse_top_k`` heaviest terms (256 in the bundles here). The
top k of those are exactly what an ingest with ``sparse_top_k = k`` stores, so this bench
copies index I into ``I-top<k>`` (same mapping and ``_meta``, each document's ``lr_sparse``
cut to its k heaviest terms; no model needed) and compares, on the ``--split`` queries
(train by default, never test judgments): nDCG@10 of the sparse leg alone and of LR hybrid,
the index size, and the wall time per ``_msearch`` batch (median / p99) of the sparse leg at
size C and of the hybrid search, the indexes alternating within each round. Copies that
exist are reused; writes results/bench/doc_prune.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from hybrid_cost import add_common_args, batches, latency_ms, ndcg_at_10, time_shape  # noqa: E402


def copy_pruned(client: Any, index: str, k: int) -> str:
    """``index-top<k>``: the documents of ``index`` with ``lr_sparse`` cut to the k heaviest."""
    from opensearchpy import helpers

    name = f"{index}-top{k}"
    if client.indices.exists(index=name):
        return name
    src = client.indices.get(index=index)[index]
    settings = {k2: v for k2, v in src["settings"]["index"].items()
                if k2 in ("number_of_shards", "knn", "number_of_replicas")}
    client.indices.create(index=name, body={"settings": {"index": settings},
                                            "mappings": src["mappings"]})

    def actions() -> Any:
        for doc in helpers.scan(client, index=index, query={"query": {"match_all": {}}}, size=500):
            body = doc["_source"]
            sparse = body.get("lr_sparse") or {}
            body["lr_sparse"] = dict(sorted(sparse.items(), key=lambda kv: -kv[1])[:k])
            yield {"_index": name, "_id": doc["_id"], "_source": body}

    ok, errors = helpers.bulk(client, actions(), chunk_size=200, raise_on_error=False)
    if errors:
        raise SystemExit(f"copying {index} into {name}: {len(errors)} failures, first {errors[0]}")
    client.indices.refresh(index=name)
    client.indices.forcemerge(index=name, max_num_segments=1, request_timeout=600)
    client.indices.refresh(index=name)  # the merged-away segments leave the store size
    return name


def main(argv: list[str] | None = None) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.evaluation import load_beir
    from lr_opensearch.search import Retriever, connect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--top-k", default="64,128")
    p.add_argument("--candidates", type=int, default=100)
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "doc_prune.json")
    args = p.parse_args(argv)

    bundle = load_bundle(args.bundle)
    client = connect(args.url, timeout=300)
    if client.indices.stats(index=args.index)["indices"][args.index]["primaries"]["segments"]["count"] > 1:
        client.indices.forcemerge(index=args.index, max_num_segments=1, request_timeout=600)
        client.indices.refresh(index=args.index)
    stored = bundle.config.sparse_top_k
    indexes = {stored: args.index} | {int(k): copy_pruned(client, args.index, int(k))
                                      for k in args.top_k.split(",")}
    dataset = load_beir(args.dataset, args.split)
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    retrievers = {k: Retriever(bundle, client, name, candidates=args.candidates)
                  for k, name in indexes.items()}
    print(f"{dataset.name} {args.split}: {len(qids)} judged queries; base index {args.index} "
          f"(top {stored}); candidates {args.candidates}", flush=True)

    quality: dict[int, dict[str, float]] = {}
    for k, retriever in retrievers.items():
        stats = client.indices.stats(index=indexes[k])["indices"][indexes[k]]["primaries"]
        row: dict[str, float] = {"store_mb": stats["store"]["size_in_bytes"] / 2**20,
                                 "segments": stats["segments"]["count"]}
        for mode in ("sparse", "hybrid"):
            row[f"{mode}_ndcg@10"] = ndcg_at_10(retriever, dataset, qids, texts, args.batch,
                                                mode=mode)["ndcg@10"]
        quality[k] = row
        print(f"top {k:>4}: index {row['store_mb']:.1f} MB; nDCG@10 sparse {row['sparse_ndcg@10']:.4f}, "
              f"hybrid {row['hybrid_ndcg@10']:.4f}", flush=True)

    sample = (texts * (1 + args.queries // max(1, len(texts))))[: args.queries]
    timing: dict[int, dict[str, list[float]]] = {k: defaultdict(list) for k in indexes}
    shapes = ("bm25@10", "sparse", "hybrid-server")
    for r in retrievers.values():
        r.search_batch(sample[: args.batch], 10)  # warm
    order0 = list(indexes)
    for r in range(args.rounds):
        for b in batches(sample, args.batch):
            for k in (order0 if r % 2 == 0 else order0[::-1]):
                for shape in shapes:
                    timing[k][shape].append(time_shape(retrievers[k], shape, b, args.candidates))
    latency = latency_ms(timing)
    print(f"\nper batch of {args.batch} queries (wall ms, median / p99), C = {args.candidates}:")
    print(f"{'top k':>6} " + " ".join(f"{s:>18}" for s in shapes))
    for k in indexes:
        print(f"{k:>6} " + " ".join(f"{latency[k][s]['p50_ms']:>8.1f} / {latency[k][s]['p99_ms']:>7.1f}"
                                    for s in shapes))
    report = {"dataset": dataset.name, "split": args.split, "indexes": indexes,
              "bundle": str(bundle.path), "candidates": args.candidates, "batch": args.batch,
              "queries": args.queries, "rounds": args.rounds,
              "quality": {str(k): q for k, q in quality.items()},
              "latency": {str(k): v for k, v in latency.items()}, "load_avg": os.getloadavg()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
