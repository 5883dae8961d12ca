"""Document encoding on a CPU per precision (issues 28 and 36): speed against the
machine's peak, agreement, quality, the gate.

    python bench/cpu_encode.py --dataset ../shared/data/cisi --bundle B \\
        [--variant fp32 --variant mixed --variant bf16] [--docs N] [--queries N] [--out r.json]

Every variant is the library's ``DocEncoder`` at one ``--encode-precision`` (loaded from
the bundle as ingest loads it); ``fp32-plain`` is fp32 in float32 throughout (without the
bfloat16 screen of the sparse projection); ``onnx``, ``onnx-int8`` and ``onnx-int8-jar``
run the backbone on ONNX Runtime (``bench/onnx_variants.py``; issue 47), timed in the same
rounds; item 2 (the anatomy) covers the torch variants only. The reference of every ratio, cosine and of
the gate is ``--reference`` (default ``fp32``: today's default encoder).

1. **Speed.** The corpus's documents are encoded in slices of ``--slice`` (ingest's
   chunk, length-sorted inside as ingest sorts them); every slice is encoded by every
   variant in turn, the order rotated per slice, so that load from other processes hits
   all variants alike. Then the same for pseudo-queries cut from the corpus
   (``fit.pseudo``: what ``lr bundle build --fit-corpus`` embeds, dense only).
2. **Against the limit.** On the first ``--anatomy`` documents, in the same batches as
   ``DocEncoder`` (length-sorted, ``--batch-size``), the two halves are timed apart: the
   backbone (``encode_documents_dense``: the body and pooling) and the sparse projection
   (the whole document forward ``encode_documents`` at the variant's screen, less the
   backbone's time of the same batch). Their arithmetic is counted from
   the model's shapes (the backbone: 2 x tokens x (4 H^2 + 2 H I) per layer plus
   4 x b x L^2 x H for attention; the projection: 2 x tokens x H x V, plus the float32
   candidates of the screen), tokens counted with their padding, as computed. The
   machine's peak is a GEMM of the same shapes in the same run (``[b L, H] x [H, I]`` for
   the backbone, ``[b L, H] x [H, chunk]`` for the projection) in float32 and in
   bfloat16; each half's rate is reported as a fraction of the peak of the precision its
   matrix products run in.
3. **Agreement and quality.** The cosine to the reference (min / mean) of the dense
   document vectors, of the stored sparse vectors ({token: weight}, top-k as indexed) and
   of the pseudo-query vectors, and nDCG@10 on the collection's test queries:

   - ``lr-dense`` / ``lr-sparse``: the bundle's model-free queries (``QueryEncoder``)
     against the variant's document vectors, exact inner products (as the index ranks
     without HNSW);
   - ``lr-hybrid``: the two fused by the library's client fusion (the legs' default
     weights, top 100);
   - ``full-dense``: the variant's own query vectors (instruction + query) against its
     documents.

   Every ``--split`` is measured (SciFact's train queries: ``--split test --split train``);
   the runs and issue 47's checks (equality with torch, the int8 gate, each variant's end
   to end rate against the float32 GEMM peak) are ``bench/encode_checks.py``.
4. **The gate** (issue 36): dense cosine >= 0.999 to the reference for every document,
   and every nDCG@10 above within 0.003 of the reference's (or the sparse vectors equal:
   the same terms, weights within 1e-5).
5. **Projection** to 100k and 1M documents on 2, 16 and 64 cores, from the measured
   documents/s per core of this run (``torch.get_num_threads()`` threads), assuming one
   encoding process per core scales linearly (ingest's ``--workers``, the Ray ingest).

Test judgments measure here; they never choose anything.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.evaluation.beir import load_beir
from lr_opensearch.instructions import document_text
from lr_opensearch.options import ENCODE_PRECISIONS


def _sibling(name: str) -> Any:
    """A sibling module, by name so that mypy sees one module, not two names of it."""
    try:
        return importlib.import_module(name)  # run as a script: bench/ on sys.path
    except ImportError:  # imported as bench.cpu_encode
        return importlib.import_module(f"bench.{name}")


_variants, _checks = _sibling("onnx_variants"), _sibling("encode_checks")
ONNX_VARIANTS, onnx_encoder = _variants.ONNX_VARIANTS, _variants.onnx_encoder

logger = logging.getLogger("cpu_encode")
PEAK = "peak-gemm"  # the float32 GEMM timed among the variants (encode_checks.PeakGemm)
PLAIN = "fp32-plain"  # fp32 in float32 throughout: no bfloat16 screen of the projection
GATE_COSINE = 0.999  # issue 36: dense cosine to today's default, every document
GATE_NDCG = 0.003  # issue 36: nDCG@10 of every run within this of today's default
PROJECTED_DOCS = (100_000, 1_000_000)
PROJECTED_CORES = (2, 16, 64)


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


def _batches(encoder: Any, texts: list[str]) -> list[tuple[Any, Any]]:
    """``DocEncoder``'s batches of ``texts`` (length-sorted, ``batch_size``) as tensors."""
    from lr_opensearch.model.doc_encoder import length_batches, padded
    from lr_opensearch.model.framing import tokenize_texts

    ids, _ = tokenize_texts(encoder.tokenizer, texts, encoder._doc_framing, encoder.max_length)
    return [padded([ids[i] for i in chunk]) for chunk in length_batches(ids, encoder.batch_size)]


def _shapes(encoder: Any) -> dict[str, int]:
    cfg = encoder.model.hf.config
    weight, _ = encoder.model.head.projection(encoder.model.hf)
    return {"layers": int(cfg.num_hidden_layers), "hidden": int(cfg.hidden_size),
            "intermediate": int(cfg.intermediate_size), "vocab": int(weight.shape[0])}


def _anatomy(encoders: dict[str, Any], batches: list[tuple[Any, Any]]) -> dict[str, dict[str, float]]:
    """Seconds and FLOPs of the backbone and of the sparse projection apart, per variant,
    and the peak GEMMs of each batch's shapes, interleaved batch by batch (the variants'
    order rotated per batch) so that load from other processes hits all alike."""
    import torch

    names = list(encoders)
    shape = _shapes(encoders[names[0]])
    h, inter, vocab = shape["hidden"], shape["intermediate"], shape["vocab"]
    keys = ("backbone_s", "projection_s", "backbone_flop", "projection_flop")
    out = {n: dict.fromkeys(keys, 0.0) for n in names}
    peak = dict.fromkeys(("flop", "backbone_fp32", "backbone_bf16", "projection_fp32", "projection_bf16"), 0.0)
    with torch.inference_mode():
        for r, (x, mask) in enumerate(batches):
            b, length = x.shape
            tokens = b * length
            for k in range(len(names)):
                name = names[(r + k) % len(names)]
                model, encoder = encoders[name].model, encoders[name]
                began = time.perf_counter()
                model.encode_documents_dense(x, mask)
                mid = time.perf_counter()
                model.encode_documents(x, mask, exact_top=encoder._exact_top,
                                       prompt_tokens=encoder._prompt_tokens)
                whole = time.perf_counter() - mid
                half = out[name]
                half["backbone_s"] += mid - began
                half["projection_s"] += max(whole - (mid - began), 0.0)
                half["backbone_flop"] += shape["layers"] * (2 * tokens * (4 * h * h + 2 * h * inter)
                                                            + 4 * b * length * length * h)
                screened = 8 * encoder._exact_top if encoder._exact_top else 0
                half["projection_flop"] += 2 * tokens * h * (vocab + screened)
            for key, seconds in _peak_seconds(tokens, h, inter).items():
                peak[key] += seconds
            peak["flop"] += 2 * tokens * h * inter
    return {**out, "peak": peak}


def _peak_seconds(tokens: int, hidden: int, width: int) -> dict[str, float]:
    """Seconds of one ``[tokens, hidden] x [hidden, width]`` GEMM per dtype, timed twice
    (two samples of the load), for the backbone's and the projection's peak: the
    backbone's feed-forward shape; the projection's GEMMs have the same inner dimension
    and a rate flat in the width here."""
    import torch

    gen = torch.Generator().manual_seed(tokens)
    a, w = torch.randn(tokens, hidden, generator=gen), torch.randn(hidden, width, generator=gen)
    out = {}
    for part in ("backbone", "projection"):
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            x, y = a.to(dtype), w.to(dtype)
            began = time.perf_counter()
            torch.matmul(x, y)
            out[f"{part}_{name}"] = time.perf_counter() - began
    return out


def _limits(half: dict[str, float], peak: dict[str, float], name: str,
            exact_top: int | None) -> dict[str, float]:
    """A torch variant's anatomy with its rates as fractions of the peak of its precision."""
    body_peak = peak["backbone_fp32" if name.startswith("fp32") else "backbone_bf16"]
    proj_peak = peak["projection_bf16" if exact_top else "projection_fp32"]
    return {**half,
            "backbone_gflops": half["backbone_flop"] / half["backbone_s"] / 1e9,
            "projection_gflops": half["projection_flop"] / half["projection_s"] / 1e9,
            "backbone_peak_fraction": half["backbone_flop"] / half["backbone_s"] / 1e9 / body_peak,
            "projection_peak_fraction": half["projection_flop"] / half["projection_s"] / 1e9 / proj_peak}


def _gate(v: dict[str, Any], ref: dict[str, Any]) -> bool:
    """Issue 36's gate against the reference (module doc, item 4)."""
    close = all(abs(v["ndcg@10"][r] - ref["ndcg@10"][r]) <= GATE_NDCG for r in ref["ndcg@10"])
    return v["dense_cos_min"] >= GATE_COSINE and (close or v["sparse_equal"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", type=Path, required=True, help="BEIR directory (corpus, queries, qrels)")
    p.add_argument("--bundle", type=Path, required=True, help="a bundle fitted on the corpus")
    choices = [PLAIN, *ENCODE_PRECISIONS, *ONNX_VARIANTS]
    p.add_argument("--variant", action="append", choices=choices, default=[],
                   help=f"variants to measure (default {', '.join(ENCODE_PRECISIONS)})")
    p.add_argument("--reference", choices=choices, default="fp32",
                   help="what every ratio, cosine and the gate compare with (default: fp32, today's default)")
    p.add_argument("--docs", type=int, default=0, help="first N documents only (0: all)")
    p.add_argument("--queries", type=int, default=2048, help="pseudo-queries timed")
    p.add_argument("--slice", type=int, default=128, help="documents per timed call")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--anatomy", type=int, default=256, help="documents timed part by part")
    p.add_argument("--int8-graph", type=Path, help="the -q jar's int8 .onnx (onnx-int8-jar)")
    p.add_argument("--split", action="append", default=[],
                   help="qrels split(s) of the quality runs (repeatable; default test; the first is "
                        "the one of issue 36's gate)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.fit.pseudo import make_pseudo_queries, read_records
    from lr_opensearch.model import DocEncoder
    from lr_opensearch.model.full_model import full_query_encoder

    ref = args.reference
    names = list(dict.fromkeys([ref, *(args.variant or ENCODE_PRECISIONS)]))
    bundle = load_bundle(args.bundle)
    splits = list(dict.fromkeys(args.split or ["test"]))
    judged = {s: load_beir(args.dataset, s) for s in splits}
    data = judged[splits[0]]
    records = list(read_records(data.corpus_path, ("_id", "title", "text")))
    if args.docs:
        records = records[: args.docs]
    doc_ids = [r[0] for r in records]
    texts = [document_text(r[1], r[2]) for r in records]
    encoders = {n: onnx_encoder(n, bundle, args.batch_size, args.int8_graph) if n in ONNX_VARIANTS
                else DocEncoder.from_bundle(bundle, device="cpu", batch_size=args.batch_size,
                                            precision=n.removesuffix("-plain")) for n in names}
    if PLAIN in encoders:
        encoders[PLAIN]._exact_top = None  # float32 throughout: no bf16 screen
    on_torch = {n: e for n, e in encoders.items() if n not in ONNX_VARIANTS}
    logger.info("sparse screen per variant: %s", {n: e._exact_top for n, e in on_torch.items()})
    batches = _batches(next(iter(on_torch.values())), texts[: args.anatomy])
    _anatomy(on_torch, batches[:2])  # warm-up
    anatomy = _anatomy(on_torch, batches)
    tokens = statistics.median(int(x.numel()) for x, _ in batches)
    sample = anatomy.pop("peak")
    peak = {k: sample["flop"] / v / 1e9 for k, v in sample.items() if k != "flop"}
    some_torch = next(iter(on_torch.values()))
    shape = _shapes(some_torch)
    slices = [_batches(some_torch, texts[i:i + args.slice]) for i in range(0, len(texts), args.slice)]
    flops = sum(_checks.forward_flops(shape, b) for b in slices)
    gemm = _checks.PeakGemm([sum(int(x.numel()) for x, _ in b) for b in slices], shape["hidden"],
                            shape["intermediate"])
    doc_s, doc_slices, doc_out = _timed_rounds({**encoders, PEAK: gemm}, texts, args.slice, "encode")
    peak["e2e_fp32"] = sum(doc_out.pop(PEAK)) / doc_s.pop(PEAK) / 1e9  # timed in the same rounds
    doc_slices.pop(PEAK)
    pseudo = make_pseudo_queries([(r[1], r[2]) for r in records]).texts
    pseudo = [pseudo[i] for i in np.random.default_rng(0).permutation(len(pseudo))[: args.queries]]
    q_s, q_slices, q_out = _timed_rounds(encoders, pseudo, 256, "encode_dense")
    qids = sorted(data.queries)
    lengths = [len(x) for x, _ in batches]
    report: dict[str, Any] = {"dataset": str(args.dataset), "documents": len(texts),
                              "pseudo_queries": len(pseudo), "test_queries": len(qids),
                              "judged_queries": {s: len(d.queries) for s, d in judged.items()},
                              "document_pass_flop": flops,
                              "threads": torch.get_num_threads(), "reference": ref,
                              "anatomy_documents": sum(lengths), "anatomy_batch_tokens_median": tokens,
                              "peak_gflops": peak, "variants": {}}
    base_dense = np.concatenate([b.dense for b in doc_out[ref]])
    base_sparse = [d for b in doc_out[ref] for d in b.sparse]
    base_q = np.concatenate(q_out[ref])
    for n in names:
        dense = np.concatenate([b.dense for b in doc_out[n]])
        sparse = [d for b in doc_out[n] for d in b.sparse]
        qvecs = np.concatenate(q_out[n])
        full = full_query_encoder(bundle, encoder=encoders[n])
        by_split = {s: _checks.quality(bundle, d, doc_ids, dense, sparse,
                                       np.asarray(full([d.queries[q] for q in sorted(d.queries)]), np.float32))
                    for s, d in judged.items()}
        cos_q = _checks.cosines(qvecs, base_q)
        report["variants"][n] = {
            "docs_per_s": len(texts) / doc_s[n], "queries_per_s": len(pseudo) / q_s[n],
            "docs_ratio": doc_s[ref] / doc_s[n], "queries_ratio": q_s[ref] / q_s[n],
            "docs_ratio_median_slice": statistics.median(
                f / v for f, v in zip(doc_slices[ref], doc_slices[n], strict=True)),
            **(_limits(anatomy[n], peak, n, encoders[n]._exact_top) if n in anatomy else {}),
            **_checks.vector_gaps(dense, base_dense, sparse, base_sparse),
            "sparse_equal": all(a.keys() == b.keys() and all(abs(a[t] - b[t]) <= 1e-5 for t in a)
                                for a, b in zip(sparse, base_sparse, strict=True)),
            "query_cos_min": float(cos_q.min()), "query_cos_mean": float(cos_q.mean()),
            "ndcg@10": by_split[splits[0]], "ndcg@10_by_split": by_split,
            "e2e_gflops": flops / doc_s[n] / 1e9,
            "e2e_fp32_peak_fraction": flops / doc_s[n] / 1e9 / peak["e2e_fp32"],
        }
    base = report["variants"][ref] if ref in anatomy else report["variants"][next(iter(anatomy))]
    # how much faster the reference's arithmetic could run at this machine's GEMM peak:
    # "exact" with the backbone at the float32 peak (float32 vectors) and the screened
    # projection at the bfloat16 one; "bf16" with every FLOP at the bfloat16 peak
    spent = base["backbone_s"] + base["projection_s"]
    projection = base["projection_flop"] / peak["projection_bf16"] / 1e9
    report["ceiling_x"] = {
        "exact": spent / (base["backbone_flop"] / peak["backbone_fp32"] / 1e9 + projection),
        "bf16": spent / (base["backbone_flop"] / peak["backbone_bf16"] / 1e9 + projection)}
    for v in report["variants"].values():
        v["gate"] = _gate(v, base)
        v["equal"] = _checks.equal(v)
        v["int8_gate"] = _checks.int8_gate(v, report["variants"][ref])
        per_core = v["docs_per_s"] / report["threads"]
        v["projected_hours"] = {f"{d}@{c}": d / (per_core * c) / 3600
                                for d in PROJECTED_DOCS for c in PROJECTED_CORES}
    _print(report)
    _checks.print_checks(report)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1))
    return 0


def _print(report: dict[str, Any]) -> None:
    ref = report["reference"]
    peak = report["peak_gflops"]
    print(f"{report['dataset']}: {report['documents']} documents, {report['pseudo_queries']} "
          f"pseudo-queries, {report['test_queries']} test queries, {report['threads']} threads; "
          f"ratios, cosines and the gate against {ref}")
    print("peak GFLOP/s (GEMMs of the same shapes): " + ", ".join(f"{k} {v:.0f}" for k, v in peak.items()))
    runs = list(next(iter(report["variants"].values()))["ndcg@10"])
    print("variant     docs/s  x ref (median slice)  pq/s  x ref  dense cos min/mean  "
          "sparse cos min/mean  pq cos min  " + "  ".join(f"{r}" for r in runs) + "  gate")
    base = report["variants"][ref]["ndcg@10"]
    for name, v in report["variants"].items():
        nd = "  ".join(f"{v['ndcg@10'][r]:.4f} ({v['ndcg@10'][r] - base[r]:+.4f})" for r in runs)
        print(f"{name:10s} {v['docs_per_s']:7.2f}  {v['docs_ratio']:.2f} ({v['docs_ratio_median_slice']:.2f})"
              f"  {v['queries_per_s']:6.1f}  {v['queries_ratio']:.2f}  {v['dense_cos_min']:.5f}/"
              f"{v['dense_cos_mean']:.5f}  {v['sparse_cos_min']:.5f}/{v['sparse_cos_mean']:.5f}  "
              f"{v['query_cos_min']:.5f}  {nd}  {'pass' if v['gate'] else 'FAIL'}")
    print(f"against the limit ({report['anatomy_documents']} documents, batches of "
          f"{report['anatomy_batch_tokens_median']:.0f} tokens at the median):")
    print("variant     backbone s  GFLOP/s  of peak  projection s  GFLOP/s  of peak")
    for name, v in report["variants"].items():
        if "backbone_s" not in v:
            continue  # ONNX Runtime: timed end to end only
        print(f"{name:10s} {v['backbone_s']:10.2f}  {v['backbone_gflops']:7.0f}  {v['backbone_peak_fraction']:6.0%}"
              f"  {v['projection_s']:12.2f}  {v['projection_gflops']:7.0f}  {v['projection_peak_fraction']:6.0%}")
    ceiling = report["ceiling_x"]
    print(f"ceiling: {report['reference']}'s arithmetic at the GEMM peak would run {ceiling['exact']:.2f}x "
          f"faster with a float32 backbone, {ceiling['bf16']:.2f}x with every FLOP in bfloat16")
    print("projected hours (documents @ cores, one process per core scaling linearly):")
    for name, v in report["variants"].items():
        print(f"{name:10s} " + "  ".join(f"{k} {h:.1f}" for k, h in v["projected_hours"].items()))


if __name__ == "__main__":
    raise SystemExit(main())
