"""The sparse field's two layouts on one collection: rank_features vs sparse_vector (SEISMIC).

    python bench/seismic.py --bundle B --source-url URL --source-index I --url URL
        [--dataset DIR] [--split train] [--threshold 0] [--top-n 0,10] [--queries 300]
        [--rounds 2] [--out results/bench/seismic.json]

Copies every document of ``--source-index`` (an lr index on ``--source-url``, with its
vectors in ``_source``) into two indices on ``--url``: ``<I>-rf`` as it is and ``<I>-sv``
with the ``sparse_vector`` layout (SEISMIC ``approximate_threshold`` = ``--threshold``; its
companion index filled by ``sync_sparse_index``), each force-merged to one segment. Then,
on the ``--split`` queries (train by default: never test judgments): nDCG@10 of the sparse
leg alone and of the hybrid (rank_features: server and client fusion; sparse_vector:
client fusion, once per ``--top-n``; 0 = every query token), and the latency of one
sparse-leg search (size 100, one query a request; layouts alternating query by query in
this process) and of one hybrid search. Writes ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from hybrid_cost import ndcg_at_10  # noqa: E402

CANDIDATES = 100


def copy_documents(source: Any, index: str, adapter: Any, target: str, bundle: Any,
                   layout: str, threshold: int) -> dict[str, float]:
    """Every document of ``index`` into a new ``target`` of ``layout``; seconds taken."""
    from opensearchpy import helpers

    from lr_opensearch.engine.seismic import SPARSE_VECTOR, SeismicIndexParams, id_keyed, token_ids

    if adapter.index_exists(target):
        adapter.delete_index(target)
    opts: dict[str, Any] = {"sparse_layout": layout}
    if layout == SPARSE_VECTOR:
        opts["seismic"] = SeismicIndexParams(approximate_threshold=threshold)
    adapter.create_index(target, bundle, **opts)
    ids = token_ids(bundle)
    t0 = time.perf_counter()
    actions: list[dict[str, Any]] = []
    docs = 0

    def flush() -> None:
        failed = [item for ok, item in adapter.bulk(actions, max_chunk_bytes=50 << 20) if not ok]
        if failed:
            raise SystemExit(f"bulk into {target} failed: {failed[:2]}")
        actions.clear()

    adapter.put_index_settings(target, {"refresh_interval": "-1"})
    for hit in helpers.scan(source, index=index, query={"query": {"match_all": {}}}, size=500):
        doc = dict(hit["_source"])
        if layout == SPARSE_VECTOR:
            doc[adapter.sparse_field] = id_keyed(doc[adapter.sparse_field], ids)
        actions.append({"_index": target, "_id": hit["_id"], "_source": doc})
        docs += 1
        if len(actions) == 500:
            flush()
    if actions:
        flush()
    adapter.put_index_settings(target, {"refresh_interval": None})
    adapter.refresh(target)
    adapter.client.indices.forcemerge(index=target, max_num_segments=1, request_timeout=3600)
    written = time.perf_counter() - t0
    copied = adapter.sync_sparse_index(target)  # the sparse_vector layout's companion
    if copied:
        from lr_opensearch.engine.seismic import companion_name

        adapter.client.indices.forcemerge(index=companion_name(target), max_num_segments=1,
                                          request_timeout=3600)
    return {"docs": docs, "write_s": written,
            "companion_s": time.perf_counter() - t0 - written}


def latencies(retrievers: dict[str, Any], texts: list[str], rounds: int,
              **search: Any) -> dict[str, dict[str, float]]:
    """Per retriever: p50 / p99 ms of one search per text, the retrievers alternating."""
    times: dict[str, list[float]] = {name: [] for name in retrievers}
    for r in retrievers.values():  # warm-up
        r.search_batch(texts[:20], source=False, **search)
    for _ in range(rounds):
        for text in texts:
            for name, r in retrievers.items():
                t0 = time.perf_counter()
                r.search(text, source=False, **search)
                times[name].append(1000 * (time.perf_counter() - t0))
    return {name: {"p50_ms": float(np.median(v)), "p99_ms": float(np.percentile(v, 99)),
                   "n": len(v)} for name, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.evaluation import load_beir
    from lr_opensearch.search import Retriever, connect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, required=True)
    p.add_argument("--source-url", required=True)
    p.add_argument("--source-index", required=True)
    p.add_argument("--url", required=True, help="the node that gets the two copies")
    p.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "data" / "scifact")
    p.add_argument("--split", default="train")
    p.add_argument("--threshold", type=int, default=0, help="SEISMIC approximate_threshold")
    p.add_argument("--top-n", default="0,10", help="seismic_top_n values (0: all tokens)")
    p.add_argument("--queries", type=int, default=300, help="queries timed per round")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--reuse", action="store_true", help="keep copies made by an earlier run")
    p.add_argument("--no-quality", action="store_true",
                   help="latency only (a corpus the queries are not judged on)")
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "seismic.json")
    args = p.parse_args(argv)

    bundle = load_bundle(args.bundle)
    client = connect(args.url, timeout=600)
    adapter = make_adapter(client)
    names = {"rank_features": f"{args.source_index}-rf", "sparse_vector": f"{args.source_index}-sv"}
    build = {}
    if not args.reuse:
        source = connect(args.source_url, timeout=600)
        for layout, target in names.items():
            build[layout] = copy_documents(source, args.source_index, adapter, target, bundle,
                                           layout, args.threshold)
            print(f"{target}: {build[layout]}", flush=True)
    dataset = load_beir(args.dataset, args.split)
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    plain = Retriever(bundle, client, names["rank_features"], candidates=CANDIDATES)
    seismic = Retriever(bundle, client, names["sparse_vector"], candidates=CANDIDATES)
    quality: dict[str, dict[str, float]] = {}

    def measure(name: str, retriever: Any, **search: Any) -> None:
        quality[name] = ndcg_at_10(retriever, dataset, qids, texts, 32, **search)
        print(f"{name}: nDCG@10 {quality[name]['ndcg@10']:.4f}", flush=True)

    top_ns = [int(x) for x in args.top_n.split(",")]
    if not args.no_quality:
        measure("rank_features sparse", plain, mode="sparse")
        measure("rank_features hybrid server", plain, fusion="server")
        measure("rank_features hybrid client", plain, fusion="client")
        for n in top_ns:
            knobs = {"seismic_top_n": n or None}
            measure(f"sparse_vector sparse top_n={n or 'all'}", seismic, mode="sparse", **knobs)
            measure(f"sparse_vector hybrid client top_n={n or 'all'}", seismic, **knobs)
    timed = texts[: args.queries]
    leg = {"rank_features": plain}
    leg.update({f"sparse_vector top_n={n or 'all'}": Retriever(
        bundle, client, names["sparse_vector"], candidates=CANDIDATES, seismic_top_n=n or None)
        for n in top_ns})
    sparse_ms = latencies(leg, timed, args.rounds, k=CANDIDATES, mode="sparse")
    hybrid_ms = latencies({"rank_features server": plain, "rank_features client": Retriever(
        bundle, client, names["rank_features"], candidates=CANDIDATES, fusion="client"),
        "sparse_vector client": seismic}, timed, args.rounds, k=10)
    report = {"source_index": args.source_index, "dataset": dataset.name,
              "split": args.split, "queries": len(qids),
              "threshold": args.threshold, "candidates": CANDIDATES, "build": build,
              "quality": quality, "sparse_leg_ms": sparse_ms, "hybrid_ms": hybrid_ms}
    print(json.dumps({"sparse_leg_ms": sparse_ms, "hybrid_ms": hybrid_ms}, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
