"""Choosing the table fit's prior and token weights (issue 30, continued) on TRAIN queries.

    python bench/fit_variants.py --dataset ../shared/data/scifact --split train \\
        --work W [--variant ridge --variant mapped ...] [--small 100] [--out result.json]

Caches under ``--work`` the slow parts exactly as ``bench/distill_fit.py`` does (same file
names: the unfitted table ``e0.npy``, the full model's vectors of the fit's pseudo-queries
``targets.npy``, of every corpus document ``docs.npy`` and of the judged queries). Each
variant then refits the table from the cache with the library's functions and is scored by
exact inner-product search over all documents (dense nDCG@10, as ``lr-dense`` ranks
without HNSW). ``--small N`` simulates a small corpus: only the pseudo-queries cut from N
sampled documents (and the IDF of those N documents) are given to the fit, while the
judged queries still search the whole collection, so a small corpus's few contexts are
measured on the same train judgments. Never use a test split to choose (``--report-split
test`` scores the same tables for a report). Variants: ``ridge`` (the library's default),
``e0`` (the unfitted table as the prior), ``mapped[:N]`` (two full fits), ``generic`` /
``genmix[:w]`` (keyword lists of vocabulary words as a prior / mixed in), ``idf[:p]``
(IDF^p-weighted mean), ``distill`` (the default, then the listwise step).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from distill_fit import _cached, _embed, _model, _ndcg, _paired, fit_bench_parser  # noqa: E402

from lr_opensearch.bundle.fit import doc_frequencies, idf_weights, prepare_fit, query_tokenizer  # noqa: E402
from lr_opensearch.bundle.pseudo import MAX_QUERIES, make_pseudo_queries, plan_counts  # noqa: E402
from lr_opensearch.bundle.ridge import fit_table, token_bags  # noqa: E402
from lr_opensearch.evaluation.beir import iter_jsonl, load_beir  # noqa: E402
from lr_opensearch.instructions import document_text  # noqa: E402

logger = logging.getLogger("fit_variants")


def weighted_bags(flat: np.ndarray, lengths: np.ndarray, vocab: int, w: np.ndarray | None) -> sp.csr_matrix:
    """Row i = sum_t count * w_t / sum_t count * w_t (the plain mean when w is None)."""
    bags = token_bags(flat, lengths, vocab)
    if w is None:
        return bags
    bags = (bags @ sp.diags(w.astype(np.float64))).tocsr()
    s = np.asarray(bags.sum(1)).ravel()
    return (sp.diags(1.0 / np.maximum(s, 1e-12)) @ bags).tocsr()


def linear_map(e0: np.ndarray, table: np.ndarray, rows: np.ndarray, lam: float = 1e-2) -> np.ndarray:
    """[V, H] ``[E0 1] M`` with M the ridge least squares map of E0 rows onto ``table`` rows."""
    x = np.hstack([e0[rows], np.ones((len(rows), 1))]).astype(np.float64)
    m = np.linalg.solve(x.T @ x + lam * np.eye(x.shape[1]), x.T @ table[rows].astype(np.float64))
    return (np.hstack([e0, np.ones((len(e0), 1))]) @ m).astype(np.float32)


def run_variant(name: str, ctx: dict[str, Any]) -> np.ndarray:
    """The fitted table of a variant; its query side is ``ctx['qbags'](weights)``."""
    e0, bags, targets, wts = ctx["e0"], ctx["bags"], ctx["targets"], ctx["weights"]
    kind, _, arg = name.partition(":")
    if kind == "ridge":  # the library's default
        return fit_table(e0, bags, targets, weights=wts)[0]
    if kind == "e0":  # the unfitted table as the prior (the default before 2026-11-25)
        return fit_table(e0, bags, targets, weights=wts, map_min_queries=None)[0]
    if kind == "mapped":  # two full fits: toward E0, then toward E0 mapped by the first
        base = fit_table(e0, bags, targets, weights=wts, map_min_queries=None)[0]
        counts = np.diff(bags.tocsc().indptr)
        rows = np.flatnonzero(counts >= int(arg or 20))
        prior = linear_map(e0, base, rows)
        return fit_table(prior, bags, targets, weights=wts, map_min_queries=None)[0]
    if kind == "idf":  # IDF^p-weighted mean, served as rows w_t E_t under the plain mean
        p = float(arg or 1.0)
        w = ctx["idf"] ** p
        wb = weighted_bags(ctx["flat"], ctx["lengths"], e0.shape[0], w)
        table = fit_table(e0, wb, targets, weights=wts)[0]
        return table * w[:, None].astype(np.float32)
    if kind in ("generic", "genmix"):  # corpus-free keyword lists of vocabulary words
        gb, gt = ctx["generic"]()
        if kind == "generic":  # fit on them first, then toward that table
            prior = fit_table(e0, gb, gt)[0]
            return fit_table(prior, bags, targets, weights=wts)[0]
        share = float(arg or 0.5)
        return fit_table(e0, sp.vstack([bags, gb]).tocsr(), np.vstack([targets, gt]),
                         weights=np.concatenate([wts, np.full(gb.shape[0], share)]))[0]
    if kind == "distill":  # the library's default fit, then the listwise step (bundle.distill)
        from lr_opensearch.bundle.distill import DistillConfig, distill_table

        table = fit_table(e0, bags, targets, weights=wts)[0]
        docs = ctx["docs"] if ctx.get("sample") is None else ctx["docs"][ctx["sample"]]
        return distill_table(table, bags, targets, docs, DistillConfig())[0]
    raise ValueError(f"unknown variant {name}")


def vocabulary_queries(tokenizer: Any, n: int, seed: int = 0, words: tuple[int, int] = (2, 8)) -> list[str]:
    """``n`` keyword lists of random whole-word vocabulary entries (alphabetic, >= 3 letters)."""
    vocab = [w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) >= 3]
    vocab.sort()
    rng = np.random.default_rng(seed)
    return [" ".join(vocab[j] for j in rng.choice(len(vocab), int(rng.integers(words[0], words[1] + 1)),
                                                 replace=False)) for _ in range(n)]


def _small_subset(ctx: dict[str, Any], docs_text: list[tuple[str, str]], n: int, tokenizer: Any,
                  work: Path, encoder: Any) -> None:
    """Replace the fit inputs by those of a sample of ``n`` documents (new targets cached)."""
    rng = np.random.default_rng(1)
    pick = np.sort(rng.choice(len(docs_text), n, replace=False))
    docs = [docs_text[i] for i in pick]
    s, sp_ = plan_counts(len(docs))
    pq = make_pseudo_queries(docs, sentences_per_doc=s, spans_per_doc=sp_, seed=0)
    qt = query_tokenizer(tokenizer)
    flat, lengths = qt(pq.texts)
    keep = lengths > 0
    texts = [t for t, k in zip(pq.texts, keep, strict=True) if k]
    flat, lengths = qt(texts)
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    ctx["targets"] = _cached(work / f"targets-small{n}.npy", lambda: _embed(encoder(), texts))
    ctx["bags"] = token_bags(flat, lengths, vocab)
    ctx["flat"], ctx["lengths"] = flat, lengths
    ctx["sample"] = pick  # the listwise step's candidates: the small corpus's own documents
    ctx["weights"] = np.asarray([3.0 if r == "passage" else 1.0 for r, k in zip(pq.recipe, keep, strict=True) if k])
    dflat, dlen = query_tokenizer(tokenizer, 1 << 20)([f"{t} {x}" for t, x in docs])
    ctx["idf"] = idf_weights(doc_frequencies(dflat, dlen, vocab), len(docs))
    logger.info("small corpus: %d documents, %d pseudo-queries %s", n, len(texts), pq.counts())


def main(argv: list[str] | None = None) -> int:
    p = fit_bench_parser(__doc__)
    p.add_argument("--small", type=int, default=0)
    p.add_argument("--report-split", default=None, help="also score on this split (report only)")
    p.add_argument("--save", action="store_true", help="keep each table as WORK/table-VARIANT.npy")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    from tokenizers import Tokenizer

    from lr_opensearch.packaged import resolve_model

    source, _ = resolve_model(None)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    cache: dict[str, Any] = {}

    def encoder() -> Any:
        if "enc" not in cache:
            cache["enc"] = _model()[2]
        return cache["enc"]

    data = load_beir(args.dataset, args.split)
    inputs = prepare_fit(tokenizer, [data.corpus_path], max_queries=MAX_QUERIES)
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    e0 = _cached(args.work / "e0.npy", lambda: _model()[0].token_table([], vocab).numpy())
    targets = _cached(args.work / "targets.npy", lambda: _embed(encoder(), inputs.texts))
    recs = [(str(r["_id"]), r.get("title") or "", r.get("text") or "") for _, r in iter_jsonl(data.corpus_path)]
    doc_ids = [d for d, _, _ in recs]
    docs = _cached(args.work / "docs.npy", lambda: _embed(encoder(), [document_text(t, x) for _, t, x in recs], 64))
    qids = list(data.queries)  # noqa: F841 (the cache key's order)
    qfull = _cached(args.work / f"queries-{args.split}.npy", lambda: _embed(encoder(), [data.queries[q] for q in qids]))
    flat, lengths = query_tokenizer(tokenizer)(inputs.texts)
    ctx: dict[str, Any] = {"e0": e0, "bags": inputs.bags, "targets": targets, "weights": inputs.weights,
                           "idf": inputs.idf, "flat": flat, "lengths": lengths, "docs": docs}
    def generic() -> tuple[sp.csr_matrix, np.ndarray]:
        texts = vocabulary_queries(tokenizer, 10_000)
        gt = _cached(args.work / "targets-generic.npy", lambda: _embed(encoder(), texts))
        gf, gl = query_tokenizer(tokenizer)(texts)
        return token_bags(gf, gl, vocab), gt

    ctx["generic"] = generic
    if args.small:
        _small_subset(ctx, [(t, x) for _, t, x in recs], args.small, tokenizer, args.work, encoder)
    splits = [(args.split, data, qfull)]
    if args.report_split:  # figures for the report only, never for a choice
        rep = load_beir(args.dataset, args.report_split)
        rq = list(rep.queries)
        splits.append((args.report_split, rep, _cached(args.work / f"queries-{args.report_split}.npy",
                                                      lambda: _embed(encoder(), [rep.queries[q] for q in rq]))))
    results: dict[str, Any] = {}
    base: dict[str, list[float]] = {}
    for split, d, qf in splits:
        sq = list(d.queries)
        results[f"{split}/full-dense"] = float(np.mean(_ndcg(qf, docs, doc_ids, sq, d.qrels)))
    logger.info("full-dense %s", results)
    for name in args.variant or ["ridge"]:
        t0 = time.perf_counter()
        table = run_variant(name, ctx)
        seconds = round(time.perf_counter() - t0, 1)
        if args.save:
            np.save(args.work / f"table-{name.replace(':', '_')}.npy", table)
        for split, d, _ in splits:
            sq = list(d.queries)
            qflat, qlen = query_tokenizer(tokenizer)([d.queries[q] for q in sq])
            qv = np.asarray(token_bags(qflat, qlen, vocab) @ table, np.float32)
            per = _ndcg(qv, docs, doc_ids, sq, d.qrels)
            base.setdefault(split, per)
            results[f"{split}/{name}"] = {"ndcg@10": float(np.mean(per)), "vs_first": _paired(base[split], per),
                                          "seconds": seconds}
            logger.info("%s/%s: %s", split, name, results[f"{split}/{name}"])
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
