"""Quality of the calibrated one query against min-max fusion, per form and query shape.

    python bench/calibrated.py --dataset ../shared/data/scifact --split train --bundle B
        [--url URL] [--index I] [--out results/bench/calibrated-scifact-train.json]

On one index (ingested and calibrated if needed, as ``lr eval`` does), the same legs and
weights (the bundle's) searched over the ``--split`` queries:

- ``minmax``: min-max fusion (client side, 100 candidates per leg, as ``lr eval``'s
  ``lr-hybrid``);
- ``calibrated``, one factor at a time from the defaults: each calibration form
  (``options.CALIBRATION_FORMS``) in the default shape; each query shape in the default
  form: the sparse leg's heaviest N query tokens (all, 10, 5, 3) x BM25 on title + text
  (``multi_match``) or ``text`` alone; the knn ``k`` (10, 50; 100 above);
- ``affine`` (not a bool query: scored here from the legs' lists): each leg's engine score
  s as ``(s - top10_mean) / (top1_mean - top10_mean)``, a missing document 0 - what an
  offset would give if the engine allowed negative boosts.

Prints nDCG@10 per variant and its difference from ``minmax``; writes ``--out``. Choices
(the defaults in ``lr_opensearch/options.py``) are made on SciFact *train* only; other
splits are for reporting.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TOKENS = (None, 10, 5, 3)
FIELDS = (None, ("text",))
KNN_KS = (10, 50, 100)
DEPTH = 100


def run_variant(retriever: Any, dataset: Any, depth: int = DEPTH,
                **opts: Any) -> tuple[dict[str, Any], float]:
    from lr_opensearch.evaluation.model_runs import hits_of
    from lr_opensearch.evaluation.runs import timed_run

    def search(texts: list[str]) -> list[list[tuple[str, float]]]:
        return hits_of(retriever.search_batch(texts, depth, **opts))

    return timed_run("variant", dataset, 32, search)


def affine_run(retriever: Any, dataset: Any, calibration: Any) -> dict[str, Any]:
    """Each leg's client-side list (100 candidates), re-scored by the affine form."""
    from lr_opensearch.search.calibration import Shape, leg_key

    req = retriever.request(retriever.options.replace(k=DEPTH, fusion="client"))
    weights = req.config.weights
    run: dict[str, Any] = {}
    qids = list(dataset.queries)
    for start in range(0, len(qids), 32):
        chunk = qids[start : start + 32]
        texts = [dataset.queries[q] for q in chunk]
        inputs = retriever.inputs(texts, req.legs)
        sub = retriever.sub_queries(inputs, req, len(texts))
        grouped = retriever._search_legs(sub, req, False, what="affine")
        for qid, results in zip(chunk, grouped, strict=True):
            fused: dict[str, float] = {}
            for name, res in zip(req.legs, results, strict=True):
                leg = calibration.scales[leg_key(name, Shape())]
                span = max(leg.top1_mean - leg.top10_mean, 1e-9)
                for h in res.hits:
                    fused[h.doc_id] = fused.get(h.doc_id, 0.0) + weights[name] * (
                        h.score - leg.top10_mean) / span
            run[qid] = sorted(fused.items(), key=lambda kv: -kv[1])[:DEPTH]
    return run


def main(argv: list[str] | None = None) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.engine.client import make_client
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.evaluation.beir import compute_metrics, load_beir
    from lr_opensearch.evaluation.runs import default_index_name, ensure_indexed
    from lr_opensearch.options import (
        CALIBRATED,
        CALIBRATED_SPARSE_TOKENS,
        CALIBRATED_TEXT_FIELDS,
        CALIBRATION_FORMS,
        DEFAULT_CALIBRATION_FORM,
    )
    from lr_opensearch.search import Retriever
    from lr_opensearch.search.calibration import Shape, calibrate

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--bundle", required=True)
    p.add_argument("--url", default="http://127.0.0.1:9200")
    p.add_argument("--index", default=None)
    p.add_argument("--quick", action="store_true", help="sparse tokens all or 5 only")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    client = make_client(args.url, timeout=120)
    bundle = load_bundle(args.bundle)
    dataset = load_beir(args.dataset, args.split)
    index = args.index or default_index_name(dataset, bundle)
    ensure_indexed(client, dataset, bundle, index, args.url)
    adapter = make_adapter(client)
    shapes = [Shape(t, f) for t in TOKENS for f in FIELDS]
    calibration = calibrate(adapter, index, bundle, shapes=shapes)
    r = Retriever(bundle, client, index, candidates=DEPTH)
    out: dict[str, Any] = {"dataset": dataset.name, "split": args.split,
                           "queries": len(dataset.queries), "index": index,
                           "bundle_id": bundle.bundle_id, "weights": dict(r.defaults.weights),
                           "calibration": calibration.to_meta(), "variants": {}}

    def record(name: str, run: dict[str, Any], seconds: float | None = None) -> None:
        m = compute_metrics(dataset.qrels, run)
        out["variants"][name] = {"ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"],
                                 "seconds": seconds}
        base = out["variants"].get("minmax", {}).get("ndcg@10", m["ndcg@10"])
        print(f"{name:<44} nDCG@10 {m['ndcg@10']:.4f} ({m['ndcg@10'] - base:+.4f})  "
              f"R@100 {m['recall@100']:.4f}", flush=True)

    run, s = run_variant(r, dataset, fusion="client")
    record("minmax", run, s)
    t0 = time.perf_counter()
    record("affine (offline, full shape)", affine_run(r, dataset, calibration),
           time.perf_counter() - t0)
    # one factor at a time from the default (options.DEFAULT_CALIBRATION_FORM and the
    # CALIBRATED_* shape): each form in the default shape, each shape in the default form
    default_shape = (CALIBRATED_SPARSE_TOKENS, CALIBRATED_TEXT_FIELDS)
    variants = [(form, default_shape) for form in CALIBRATION_FORMS]
    variants += [(DEFAULT_CALIBRATION_FORM, (t, f)) for t in TOKENS for f in FIELDS
                 if (t, f) != default_shape and not (args.quick and t not in (None, 5))]
    for form, (t, f) in variants:
        name = (f"{form}, sparse {t or 'all'}, bm25 {'+'.join(f) if f else 'title+text'}, "
                f"knn k {DEPTH}")
        run, s = run_variant(r, dataset, fusion=CALIBRATED, calibration_form=form,
                             sparse_tokens=t or 0, text_fields=f or ("title", "text"))
        record(name, run, s)
    for k in KNN_KS[:-1]:  # 10 hits per query (nDCG@10 only), the knn k = candidates
        run, s = run_variant(Retriever(bundle, client, index, candidates=k), dataset, depth=10,
                             fusion=CALIBRATED)
        record(f"default form and shape, knn k {k} (10 hits)", run, s)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
