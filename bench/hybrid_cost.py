"""Where hybrid search time goes, and what the candidates knob costs in quality.

    python bench/hybrid_cost.py --bundle B --index I [--url URL] [--dataset DIR]
        [--split train] [--candidates 10,20,30,50,100] [--batch 32] [--queries 320]
        [--rounds 2] [--weights 0.4,0.2,0.4]

On an index built for the bundle (``lr eval`` / ingest), with the dataset's ``--split``
queries (train by default: choices made here never see test judgments):

1. per candidates value C: nDCG@10 and R@100 of LR hybrid (server fusion when the cluster
   has it; the same ranking as client fusion, tested) over every judged query of the split;
2. per C, latency per ``_msearch`` batch of ``--batch`` queries (wall, median and p99 over
   ``--queries`` queries x ``--rounds``, shapes alternating): BM25 alone (size 10, what
   users run today), LR hybrid server side, LR hybrid client side, and each leg alone at
   size C (dense knn, sparse rank_features, BM25) - where the time goes;
3. the search profile of one hybrid query at the largest C (``profile: true``): time per
   query part and collector, summed over shards.

Prints the tables and the hybrid / BM25 ratios (same process, same node), writes
results/bench/hybrid_cost.json and a plot (latency and nDCG@10 against C) next to it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPES = ("bm25@10", "hybrid-server", "hybrid-client", "dense", "sparse", "bm25")


def batches(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def time_shape(retriever: Any, shape: str, texts: list[str], c: int) -> float:
    """Wall seconds of one batch of ``texts`` in ``shape`` at candidates ``c``."""
    t0 = time.perf_counter()
    if shape == "bm25@10":
        retriever.search_batch(texts, 10, mode="bm25", source=False)
    elif shape.startswith("hybrid"):
        retriever.candidates = c
        retriever.search_batch(texts, 10, fusion=shape.split("-")[1], source=False)
    else:
        retriever.search_batch(texts, c, mode=shape, source=False)
    return time.perf_counter() - t0


def latency_ms(timing: dict[Any, dict[str, list[float]]]) -> dict[Any, dict[str, dict[str, float]]]:
    """Per variant and shape: median and p99 of the batch wall times, in ms."""
    return {key: {s: {"p50_ms": 1000 * float(np.median(v)),
                      "p99_ms": 1000 * float(np.percentile(v, 99))}
                  for s, v in shapes.items()} for key, shapes in timing.items()}


def add_common_args(p: argparse.ArgumentParser) -> None:
    """The options the search-cost benches share (node, bundle, index, queries, rounds)."""
    p.add_argument("--url", default=os.environ.get("LR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--index", required=True)
    p.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "data" / "scifact")
    p.add_argument("--split", default="train")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--queries", type=int, default=320)
    p.add_argument("--rounds", type=int, default=2)


def ndcg_at_10(retriever: Any, dataset: Any, qids: list[str], texts: list[str], batch: int,
               k: int = 10, **search: Any) -> dict[str, float]:
    """Metrics (``compute_metrics``) of ``retriever.search_batch(..., k, **search)`` over the
    judged queries, in batches of ``batch`` without sources."""
    from lr_opensearch.evaluation import compute_metrics

    run: dict[str, list[tuple[str, float]]] = {}
    for chunk in batches(list(range(len(qids))), batch):
        hits = retriever.search_batch([texts[i] for i in chunk], k, source=False, **search)
        for i, hs in zip(chunk, hits, strict=True):
            run[qids[i]] = [(h.doc_id, h.score) for h in hs]
    return compute_metrics(dataset.qrels, run)


def profile_hybrid(retriever: Any, text: str, c: int) -> dict[str, float]:
    """Milliseconds per query part / collector / phase of one server hybrid search."""
    q = retriever.encoder.encode(text)
    req = retriever.request(10, "hybrid", None, "server", None, None, 0, False, None, False)
    retriever.candidates = c
    sub = retriever.sub_queries(q.dense[None, :], [q.sparse], [text], req, 1)[0]
    body = retriever.adapter.hybrid_body(sub, req.config, size=c, source=False)
    body["profile"] = True
    resp = retriever.adapter.client.search(index=retriever.index, body=body)
    out: dict[str, float] = defaultdict(float)

    def walk(node: dict[str, Any], depth: int) -> None:
        name = node.get("type", "?")
        desc = node.get("description", "")[:40]
        out[f"{'  ' * depth}{name} {desc}".rstrip()] += node.get("time_in_nanos", 0) / 1e6
        for child in node.get("children", []) if depth < 2 else []:
            walk(child, depth + 1)

    for shard in resp.get("profile", {}).get("shards", []):
        for search in shard.get("searches", []):
            for query in search.get("query", []):
                walk(query, 0)
            for coll in search.get("collector", []):
                out[f"collector {coll.get('name', '?')}"] += coll.get("time_in_nanos", 0) / 1e6
        fetch = shard.get("fetch")
        if isinstance(fetch, dict):
            out["fetch phase"] += fetch.get("time_in_nanos", 0) / 1e6
    out["took (whole search)"] = float(resp.get("took", 0))
    return dict(out)


def main(argv: list[str] | None = None) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.evaluation import load_beir
    from lr_opensearch.legs import parse_weights
    from lr_opensearch.search import Retriever, connect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--candidates", default="10,20,30,50,100")
    p.add_argument("--weights", default=None, help="dense,sparse,bm25 (default: the bundle's)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "hybrid_cost.json")
    args = p.parse_args(argv)

    bundle = load_bundle(args.bundle)
    client = connect(args.url, timeout=120)
    weights = parse_weights(args.weights) if args.weights else None
    retriever = Retriever(bundle, client, args.index, weights=weights)
    dataset = load_beir(args.dataset, args.split)
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    cs = [int(x) for x in args.candidates.split(",")]
    print(f"{dataset.name} {args.split}: {len(qids)} judged queries; index {args.index}; "
          f"weights {retriever.defaults.weights}; path {retriever._resolve_path('auto', retriever.defaults)}",
          flush=True)

    quality: dict[int, dict[str, float]] = {}
    for c in cs:
        m = ndcg_at_10(retriever, dataset, qids, texts, args.batch, 100 if c >= 100 else c,
                       candidates=c)
        quality[c] = {"ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"]}
        print(f"C={c:>4}: nDCG@10 {m['ndcg@10']:.4f}  R@C {m['recall@100']:.4f}", flush=True)

    sample = (texts * (1 + args.queries // max(1, len(texts))))[: args.queries]
    timing: dict[int, dict[str, list[float]]] = {c: defaultdict(list) for c in cs}
    retriever.search_batch(sample[: args.batch], 10)  # warm
    for r in range(args.rounds):
        for c in cs:
            for b in batches(sample, args.batch):
                order = SHAPES if r % 2 == 0 else SHAPES[::-1]
                for shape in order:
                    timing[c][shape].append(time_shape(retriever, shape, b, c))
    latency = latency_ms(timing)
    print(f"\nper batch of {args.batch} queries (wall ms, median / p99):")
    print(f"{'C':>5} " + " ".join(f"{s:>20}" for s in SHAPES) + "   hybrid/bm25@10 (p50)")
    for c in cs:
        row = latency[c]
        ratio = row["hybrid-server"]["p50_ms"] / row["bm25@10"]["p50_ms"]
        ratio_c = row["hybrid-client"]["p50_ms"] / row["bm25@10"]["p50_ms"]
        print(f"{c:>5} " + " ".join(f"{row[s]['p50_ms']:>9.1f} / {row[s]['p99_ms']:>7.1f}"
                                    for s in SHAPES)
              + f"   server x{ratio:.2f}, client x{ratio_c:.2f}")
    prof = profile_hybrid(retriever, texts[0], max(cs))
    print(f"\nprofile of one server hybrid search at C={max(cs)} (ms, summed over shards):")
    for name, ms in prof.items():
        print(f"  {ms:9.2f}  {name}")

    report = {"dataset": dataset.name, "split": args.split, "index": args.index,
              "bundle": str(bundle.path), "weights": list(retriever.defaults.weights),
              "batch": args.batch, "queries": args.queries, "rounds": args.rounds,
              "quality": quality, "latency": latency, "profile": prof,
              "load_avg": os.getloadavg()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    png = args.out.with_suffix(".png")
    plot(report, cs, png)
    print(f"wrote {args.out} and {png}")
    return 0


def plot(report: dict[str, Any], cs: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for shape, style in (("hybrid-server", "o-"), ("hybrid-client", "s--"), ("bm25@10", "k:")):
        ax.plot(cs, [report["latency"][c][shape]["p50_ms"] for c in cs], style, label=shape)
    ax.set_xlabel("candidates per leg (C)")
    ax.set_ylabel(f"p50 ms per batch of {report['batch']}")
    ax.grid(alpha=0.3)
    ax2 = ax.twinx()
    ax2.plot(cs, [report["quality"][c]["ndcg@10"] for c in cs], "g^-", label="nDCG@10 (right)")
    ax2.set_ylabel(f"nDCG@10, {report['dataset']} {report['split']}")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=8, loc="center right")
    ax.set_title("LR hybrid: latency and quality against candidates")
    save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> None:
    """Write a bench plot (tight layout, 120 dpi) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
