"""Choosing the listwise step of the table fit (issue 30) on a collection's TRAIN queries.

    python bench/distill_fit.py --dataset ../shared/data/scifact --split train \\
        --work W [--variant off --variant epochs=3,tau=0.05 ...] [--out result.json]

Everything the fit computes is the library's (``fit.tables.prepare_fit``, ``fit.ridge.fit_table``,
``fit.distill.distill_table``); the slow parts (the unfitted table, the full model's
vectors of the pseudo-queries, of every corpus document and of the judged queries) are
cached under ``--work``. Each variant (``off`` = the ridge fit alone, else ``key=value``
fields of ``DistillConfig``) then refits from the cache and is scored exactly: dense
nDCG@10 of the table's query vectors (the query side's mean of rows) against all
document vectors by inner product, as the ``lr-dense`` run ranks them without HNSW; the
full model's query vectors give the ``full-dense`` reference the same way. The candidate
documents of the listwise step are the fit's document sample (all documents when the
corpus has at most ``--fit-max-queries``/6 of them, as SciFact's 5,183). Use it on train
judgments only: the choice must never see a test judgment.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.evaluation.beir import compute_metrics, iter_jsonl, load_beir
from lr_opensearch.fit.distill import DistillConfig, distill_table
from lr_opensearch.fit.pseudo import MAX_QUERIES
from lr_opensearch.fit.ridge import fit_table, token_bags
from lr_opensearch.fit.tables import prepare_fit, query_tokenizer
from lr_opensearch.instructions import document_text

logger = logging.getLogger("distill_fit")


def _cached(path: Path, make: Any) -> np.ndarray:
    if path.is_file():
        return np.load(path)
    start = time.perf_counter()
    value = np.asarray(make(), np.float32)
    np.save(path, value)
    logger.info("%s: %s in %.0f s", path.name, value.shape, time.perf_counter() - start)
    return value


def _model() -> tuple[Any, Any, Any]:
    from tokenizers import Tokenizer

    from lr_opensearch.fit.build import default_max_length
    from lr_opensearch.model import DocEncoder, DocSettings, LightRetrieverModel, RetrieverSettings
    from lr_opensearch.packaged import resolve_model

    source, name = resolve_model(None)
    # None: the sentence-transformers settings (mean pooling, L2 normalisation), as lr bundle build
    model = LightRetrieverModel.from_pretrained(source, RetrieverSettings(normalize=None),
                                                name=name)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    encoder = DocEncoder(model, tokenizer, DocSettings(default_max_length(model, source)),
                         device="cpu", batch_size=64)
    return model, tokenizer, encoder


def _embed(encoder: Any, texts: list[str], chunk: int = 256) -> np.ndarray:
    from lr_opensearch.fit.tables import _embed_all

    return _embed_all(encoder.encode_dense, texts, "embed", progress=True, chunk=chunk)


def _variant(spec: str) -> DistillConfig | None:
    if spec == "off":
        return None
    fields = {f.name: f.type for f in dataclasses.fields(DistillConfig)}
    values: dict[str, Any] = {}
    for item in spec.split(","):
        key, _, raw = item.partition("=")
        values[key] = float(raw) if fields[key] in ("float", float) else int(raw)
    return DistillConfig(**values)


def _ndcg(qvecs: np.ndarray, docs: np.ndarray, doc_ids: list[str], qids: list[str],
          qrels: dict[str, dict[str, int]]) -> list[float]:
    """nDCG@10 per query (in ``qids`` order) of exact inner-product search; the mean is
    ``compute_metrics``'s (checked)."""
    import ir_measures

    scores = qvecs @ docs.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = {q: {doc_ids[j]: float(100 - r) for r, j in enumerate(top[i])} for i, q in enumerate(qids)}
    per = {m.query_id: float(m.value) for m in
           ir_measures.iter_calc([ir_measures.parse_measure("nDCG@10")], {q: qrels[q] for q in qids}, run)}
    values = [per.get(q, 0.0) for q in qids]
    ranked = {q: [(d, s) for d, s in run[q].items()] for q in qids}
    assert abs(np.mean(values) - compute_metrics({q: qrels[q] for q in qids}, ranked)["ndcg@10"]) < 1e-9
    return values


def _paired(a: list[float], b: list[float]) -> str:
    from scipy.stats import ttest_rel

    t = ttest_rel(b, a)
    return f"{np.mean(b) - np.mean(a):+.4f} (paired t-test p {t.pvalue:.3g})"


def fit_bench_parser(doc: str | None) -> argparse.ArgumentParser:
    """The arguments the table-fit benches share (dataset, split, work dir, variants, out)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--variant", action="append", default=[])
    p.add_argument("--out", type=Path, default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = fit_bench_parser(__doc__).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    args.work.mkdir(parents=True, exist_ok=True)
    data = load_beir(args.dataset, args.split)
    model, tokenizer, encoder = _model()
    corpus = data.corpus_path
    inputs = prepare_fit(tokenizer, [corpus], max_queries=MAX_QUERIES)
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    e0 = _cached(args.work / "e0.npy", lambda: model.token_table([], vocab).numpy())
    targets = _cached(args.work / "targets.npy", lambda: _embed(encoder, inputs.texts))
    records = [(str(r["_id"]), document_text(r.get("title") or "", r.get("text") or ""))
               for _, r in iter_jsonl(corpus)]
    doc_ids = [d for d, _ in records]
    docs = _cached(args.work / "docs.npy", lambda: _embed(encoder, [t for _, t in records], 64))
    qids = list(data.queries)
    qfull = _cached(args.work / f"queries-{args.split}.npy",
                    lambda: _embed(encoder, [data.queries[q] for q in qids]))
    flat, lengths = query_tokenizer(tokenizer)([data.queries[q] for q in qids])
    qbags = token_bags(flat, lengths, vocab)
    full = _ndcg(qfull, docs, doc_ids, qids, data.qrels)
    results: dict[str, Any] = {"full-dense": float(np.mean(full)), "queries": len(qids)}
    logger.info("full-dense nDCG@10 %.4f", results["full-dense"])
    off: list[float] | None = None
    ridge, fit = fit_table(e0, inputs.bags, targets, weights=inputs.weights)
    for spec in args.variant or ["off"]:
        config = _variant(spec)
        table, stats = (ridge, None) if config is None else distill_table(
            ridge, inputs.bags, targets, docs, config)
        per = _ndcg(np.asarray(qbags @ table, np.float32), docs, doc_ids, qids, data.qrels)
        off = off or (_ndcg(np.asarray(qbags @ ridge, np.float32), docs, doc_ids, qids, data.qrels)
                      if config is not None else per)
        results[spec] = {"ndcg@10": float(np.mean(per)), "vs_off": _paired(off, per),
                         "stats": stats and dataclasses.asdict(stats)}
        logger.info("%s: lr-dense nDCG@10 %.4f, vs off %s; %s", spec, np.mean(per),
                    results[spec]["vs_off"], stats)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
