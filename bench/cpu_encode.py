"""Document encoding on a CPU per precision (issue 28 part 3): speed, agreement, quality.

    python bench/cpu_encode.py --dataset ../shared/data/cisi --bundle B \\
        [--variant fp32 --variant bf16] [--docs N] [--queries N] [--out r.json]

Every variant is the library's ``DocEncoder`` at one ``--encode-precision`` (loaded from
the bundle as ingest loads it). The corpus's documents are encoded in slices of
``--slice`` (ingest's chunk, length-sorted inside as ingest sorts them); every slice is
encoded by every variant in turn, the order rotated per slice, so that load from other
processes hits all variants alike. Then the same for pseudo-queries cut from the corpus
(``bundle.pseudo``: what ``lr bundle build --fit-corpus`` embeds, dense only). Printed per
variant: documents and pseudo-queries per second, the ratio to ``fp32-plain`` (fp32 in
float32 throughout: without the bfloat16 screen of the sparse projection; of the summed times,
and the median of the per-slice ratios), the cosine to it (min / mean) of the dense
document vectors, of the stored sparse vectors ({token: weight}, top-k as indexed) and of
the pseudo-query vectors, and nDCG@10 on the collection's test queries:

- ``lr-dense`` / ``lr-sparse``: the bundle's model-free queries (``QueryEncoder``) against
  the variant's document vectors, exact inner products (as the index ranks without HNSW);
- ``lr-hybrid``: the two fused by the library's client fusion (default weights, top 100);
- ``full-dense``: the variant's own query vectors (instruction + query) against its documents.

Test judgments measure here; they never choose anything.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.evaluation.beir import compute_metrics, load_beir
from lr_opensearch.instructions import document_text
from lr_opensearch.options import ENCODE_PRECISIONS

logger = logging.getLogger("cpu_encode")
# the reference: fp32 computed in float32 throughout (the encoder before this bench's
# issue: no bfloat16 screen of the sparse projection), as every ratio and cosine compares
REFERENCE = "fp32-plain"


def _timed_rounds(encoders: dict[str, Any], items: list[str], size: int, call: str,
                  ) -> tuple[dict[str, float], dict[str, list[float]], dict[str, list[Any]]]:
    """Every slice of ``items`` through every encoder (order rotated per slice): summed
    seconds, per-slice seconds and outputs per variant."""
    names = list(encoders)
    seconds = {n: 0.0 for n in names}
    per_slice: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, list[Any]] = {n: [] for n in names}
    for r, start in enumerate(range(0, len(items), size)):
        part = items[start:start + size]
        for k in range(len(names)):
            name = names[(r + k) % len(names)]
            began = time.perf_counter()
            outputs[name].append(getattr(encoders[name], call)(part))
            took = time.perf_counter() - began
            seconds[name] += took
            per_slice[name].append(took)
        logger.info("%s %d/%d: %s", call, min(start + size, len(items)), len(items),
                    ", ".join(f"{n} {len(part) / per_slice[n][-1]:.1f}/s" for n in names))
    return seconds, per_slice, outputs


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    num = (a * b).sum(1)
    return num / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)


def _sparse_cosines(a: list[dict[int, float]], b: list[dict[int, float]]) -> np.ndarray:
    out = []
    for x, y in zip(a, b, strict=True):
        dot = sum(w * y.get(t, 0.0) for t, w in x.items())
        nx = np.sqrt(sum(w * w for w in x.values()))
        ny = np.sqrt(sum(w * w for w in y.values()))
        out.append(dot / max(nx * ny, 1e-30) if nx or ny else 1.0)
    return np.asarray(out)


def _run(scores: np.ndarray, doc_ids: list[str], qids: list[str], depth: int = 100,
         ) -> dict[str, list[tuple[str, float]]]:
    top = np.argsort(-scores, axis=1, kind="stable")[:, :depth]
    return {q: [(doc_ids[j], float(scores[i, j])) for j in top[i]] for i, q in enumerate(qids)}


def _quality(bundle: Any, data: Any, doc_ids: list[str], dense: np.ndarray,
             sparse: list[dict[int, float]], full_queries: np.ndarray, qids: list[str]) -> dict[str, float]:
    """nDCG@10 of the lr-dense, lr-sparse, lr-hybrid and full-dense runs (see the module doc)."""
    from lr_opensearch.query.encoder import QueryEncoder
    from lr_opensearch.search.fusion import fuse

    enc = QueryEncoder(bundle)
    batch = [enc.encode(data.queries[q]) for q in qids]
    keys = enc.key_array
    qd = np.stack([np.asarray(e.dense, np.float32) for e in batch])
    runs = {"lr-dense": _run(qd @ dense.T, doc_ids, qids)}
    doc_terms = [{keys[t]: w for t, w in d.items()} for d in sparse]
    sparse_scores = np.asarray([[sum(w * d.get(k, 0.0) for k, w in e.sparse.items()) for d in doc_terms]
                                for e in batch], np.float32)
    runs["lr-sparse"] = _run(sparse_scores, doc_ids, qids)
    runs["lr-hybrid"] = {q: [(h.doc_id, h.score) for h in fuse(runs["lr-dense"][q], runs["lr-sparse"][q])]
                         for q in qids}
    runs["full-dense"] = _run(full_queries @ dense.T, doc_ids, qids)
    qrels = {q: data.qrels[q] for q in qids}
    return {name: compute_metrics(qrels, run)["ndcg@10"] for name, run in runs.items()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", type=Path, required=True, help="BEIR directory (corpus, queries, qrels)")
    p.add_argument("--bundle", type=Path, required=True, help="a MiniLM bundle fitted on the corpus")
    p.add_argument("--variant", action="append", choices=ENCODE_PRECISIONS, default=[],
                   help="precisions to measure (default all) against fp32-plain")
    p.add_argument("--docs", type=int, default=0, help="first N documents only (0: all)")
    p.add_argument("--queries", type=int, default=2048, help="pseudo-queries timed")
    p.add_argument("--slice", type=int, default=128, help="documents per timed call")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.bundle.pseudo import make_pseudo_queries, read_records
    from lr_opensearch.model import DocEncoder
    from lr_opensearch.model.full_model import full_query_encoder

    names = list(dict.fromkeys([REFERENCE, *(args.variant or ENCODE_PRECISIONS)]))
    bundle = load_bundle(args.bundle)
    data = load_beir(args.dataset, "test")
    records = list(read_records(data.corpus_path, ("_id", "title", "text")))
    if args.docs:
        records = records[: args.docs]
    doc_ids = [r[0] for r in records]
    texts = [document_text(r[1], r[2]) for r in records]
    encoders = {n: DocEncoder.from_bundle(bundle, device="cpu", batch_size=args.batch_size,
                                          precision=n.removesuffix("-plain")) for n in names}
    encoders[REFERENCE]._exact_top = None  # float32 throughout: no bf16 screen
    logger.info("sparse screen per variant: %s", {n: e._exact_top for n, e in encoders.items()})
    doc_s, doc_slices, doc_out = _timed_rounds(encoders, texts, args.slice, "encode")
    pseudo = make_pseudo_queries([(r[1], r[2]) for r in records]).texts
    pseudo = [pseudo[i] for i in np.random.default_rng(0).permutation(len(pseudo))[: args.queries]]
    q_s, q_slices, q_out = _timed_rounds(encoders, pseudo, 256, "encode_dense")
    qids = sorted(data.queries)
    report: dict[str, Any] = {"dataset": str(args.dataset), "documents": len(texts),
                              "pseudo_queries": len(pseudo), "test_queries": len(qids),
                              "threads": torch.get_num_threads(), "variants": {}}
    base_dense = np.concatenate([b.dense for b in doc_out[REFERENCE]])
    base_sparse = [d for b in doc_out[REFERENCE] for d in b.sparse]
    base_q = np.concatenate(q_out[REFERENCE])
    for n in names:
        dense = np.concatenate([b.dense for b in doc_out[n]])
        sparse = [d for b in doc_out[n] for d in b.sparse]
        qvecs = np.concatenate(q_out[n])
        full_q = full_query_encoder(bundle, encoder=encoders[n])([data.queries[q] for q in qids])
        cos_d, cos_s, cos_q = _cosines(dense, base_dense), _sparse_cosines(sparse, base_sparse), _cosines(qvecs, base_q)
        report["variants"][n] = {
            "docs_per_s": len(texts) / doc_s[n], "queries_per_s": len(pseudo) / q_s[n],
            "docs_ratio": doc_s[REFERENCE] / doc_s[n], "queries_ratio": q_s[REFERENCE] / q_s[n],
            "docs_ratio_median_slice": statistics.median(
                f / v for f, v in zip(doc_slices[REFERENCE], doc_slices[n], strict=True)),
            "dense_cos_min": float(cos_d.min()), "dense_cos_mean": float(cos_d.mean()),
            "sparse_cos_min": float(cos_s.min()), "sparse_cos_mean": float(cos_s.mean()),
            "query_cos_min": float(cos_q.min()), "query_cos_mean": float(cos_q.mean()),
            "ndcg@10": _quality(bundle, data, doc_ids, dense, sparse, np.asarray(full_q, np.float32), qids),
        }
    _print(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return 0


def _print(report: dict[str, Any]) -> None:
    print(f"{report['dataset']}: {report['documents']} documents, {report['pseudo_queries']} "
          f"pseudo-queries, {report['test_queries']} test queries, {report['threads']} threads")
    runs = list(next(iter(report["variants"].values()))["ndcg@10"])
    print("variant  docs/s  x fp32 (median slice)  pq/s  x fp32  dense cos min/mean  "
          "sparse cos min/mean  pq cos min  " + "  ".join(f"{r}" for r in runs))
    base = report["variants"][REFERENCE]["ndcg@10"]
    for name, v in report["variants"].items():
        nd = "  ".join(f"{v['ndcg@10'][r]:.4f} ({v['ndcg@10'][r] - base[r]:+.4f})" for r in runs)
        print(f"{name:7s} {v['docs_per_s']:7.2f}  {v['docs_ratio']:.2f} ({v['docs_ratio_median_slice']:.2f})"
              f"  {v['queries_per_s']:6.1f}  {v['queries_ratio']:.2f}  {v['dense_cos_min']:.5f}/"
              f"{v['dense_cos_mean']:.5f}  {v['sparse_cos_min']:.5f}/{v['sparse_cos_mean']:.5f}  "
              f"{v['query_cos_min']:.5f}  {nd}")


if __name__ == "__main__":
    raise SystemExit(main())
