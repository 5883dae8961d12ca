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
(IDF^p-weighted mean), ``distill`` (the default, then the listwise step), ``pairs[:N]``
(issue 37: extra rows for the N adjacent token pairs in most corpus documents, at least 2,
fitted jointly with the token rows; a text's vector is the mean over its tokens' rows and
its known pairs' rows; a pair row's prior is the mean of its two tokens' prior rows),
``wpairs[:N]`` (the same, pairs of word tokens in at most a fifth of the documents only),
``tokw[:PxK]`` (issue 37: a learned weight per token in the mean, started at IDF^P, K
rounds of "weights by gradient steps with the table fixed, then the table refitted"),
``instruct[:w]`` / ``keywords[:w]`` / ``both[:w]`` / ``kwall[:w]`` (issue 37 item 3: rows of weight w added to
the default fit: the queries ``bench/instruct_queries.py`` generated for the fit's documents
(``--instruct``, default WORK/instruct.jsonl), keyword lists of 2-5 of the same documents'
highest tf-idf words (:func:`keyword_queries`), or both; ``kwall[:w]``: one keyword list for
every document of the fit; all embedded as the pseudo-queries are).
``--small`` makes the pseudo-queries' full-model vectors of the whole corpus unnecessary.

With ``--legs DIR --bm25 FILE`` (``bench/model_choice.py legs`` / ``bm25`` outputs, model
``minilm``) each scored split of the collection (the ``--dataset`` folder's name) also gets
the hybrids, fused exactly as ``model_choice.py score`` fuses them (the bundle's weights and
semantics, each leg's top-100): ``lr_hybrid`` = the product's sparse and BM25 lists with
the dense list replaced by the variant's exact top-100 over the product's documents (the
engine's score transform applied); per split once, the product's own runs from the legs
file (``product``: LR dense, LR hybrid, full dense, the full-encoder hybrid) and
``full-hybrid-own`` (the reference hybrid with this bench's own full-model vectors).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))

from distill_fit import _cached, _embed, _model, _ndcg, _paired, fit_bench_parser  # noqa: E402
from model_choice import DEPTH, fused_run, leg_lists, model_arrays, read_legs, runs_of, top_k  # noqa: E402

from lr_opensearch.evaluation.beir import compute_metrics, iter_jsonl, load_beir  # noqa: E402
from lr_opensearch.fit.pseudo import MAX_QUERIES, make_pseudo_queries, plan_counts  # noqa: E402
from lr_opensearch.fit.ridge import LAMS, RidgeSolve, fit_table, token_bags  # noqa: E402
from lr_opensearch.fit.tables import doc_frequencies, idf_weights, prepare_fit, query_tokenizer  # noqa: E402
from lr_opensearch.instructions import document_text  # noqa: E402
from lr_opensearch.legs.builtin import DENSE, FULL  # noqa: E402
from lr_opensearch.legs.registry import reference_weights  # noqa: E402
from lr_opensearch.legs.scores import score_from_inner_product  # noqa: E402

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


def adjacent_pairs(flat: np.ndarray, lengths: np.ndarray, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """(owner [M], code [M]) of every adjacent token pair inside one text: code = a * V + b."""
    flat = np.asarray(flat, np.int64)
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    inside = owner[:-1] == owner[1:]
    return owner[:-1][inside], (flat[:-1] * vocab + flat[1:])[inside]


def pair_keys(doc_flat: np.ndarray, doc_lengths: np.ndarray, vocab: int, n: int, min_df: int = 2,
              allowed: np.ndarray | None = None) -> np.ndarray:
    """Sorted codes of the ``n`` adjacent pairs in most documents (those in >= ``min_df`` only;
    both tokens ``allowed`` [V] bool, when given)."""
    owner, code = adjacent_pairs(doc_flat, doc_lengths, vocab)
    if allowed is not None:
        both = allowed[code // vocab] & allowed[code % vocab]
        owner, code = owner[both], code[both]
    codes, df = np.unique(np.unique(owner * vocab * vocab + code) % (vocab * vocab), return_counts=True)
    top = np.argsort(-df, kind="stable")[:n]
    top = top[df[top] >= min_df]
    logger.info("pairs: %d distinct, %d in >= %d documents, kept %d (df >= %d)", len(codes),
                int(np.sum(df >= min_df)), min_df, len(top), int(df[top].min()) if len(top) else 0)
    return np.sort(codes[top])


def pair_bags(flat: np.ndarray, lengths: np.ndarray, vocab: int, keys: np.ndarray | None) -> sp.csr_matrix:
    """[n, V + P] bags whose row i is the mean over text i's tokens and its known pairs (pair k
    is column V + k); the plain token bags when ``keys`` is None."""
    if keys is None:
        return token_bags(flat, lengths, vocab)
    owner, code = adjacent_pairs(flat, lengths, vocab)
    at = np.minimum(np.searchsorted(keys, code), len(keys) - 1)
    known = keys[at] == code
    owners = np.concatenate([np.repeat(np.arange(len(lengths), dtype=np.int64), lengths), owner[known]])
    ids = np.concatenate([np.asarray(flat, np.int64), vocab + at[known]])
    order = np.argsort(owners, kind="stable")
    return token_bags(ids[order], np.bincount(owners, minlength=len(lengths)), vocab + len(keys))


def fit_token_weights(table: np.ndarray, bags: sp.csr_matrix, targets: np.ndarray, wts: np.ndarray,
                      a: np.ndarray, steps: int = 30, mu: float = 0.01) -> np.ndarray:
    """Per-token weights of the mean, ``q_i = sum_t B_it a_t E_t / sum_t B_it a_t``, with the
    table E fixed: gradient descent on u = log a (backtracking step) of the row-weighted squared
    error plus ``mu * mean (u - u_start)^2`` over the rows the texts use."""
    e, f, w2 = table.astype(np.float64), np.asarray(targets, np.float64), np.asarray(wts, np.float64) ** 2
    bt = bags.T.tocsr()
    used = np.diff(bags.tocsc().indptr) > 0
    u0 = np.log(a)
    u = u0.copy()

    def loss_grad(u: np.ndarray, grad: bool) -> tuple[float, np.ndarray | None]:
        a = np.exp(u)
        s = bags @ a
        q = (bags @ (e * a[:, None])) / s[:, None]
        r = q - f
        loss = float(w2 @ np.einsum("ij,ij->i", r, r)) / w2.sum() + mu * float(np.mean((u - u0)[used] ** 2))
        if not grad:
            return loss, None
        g = (2 * w2 / w2.sum() / s)[:, None] * r  # dL/dq_i / s_i
        ga = np.einsum("ij,ij->i", e, bt @ g) - bt @ np.einsum("ij,ij->i", q, g)  # dL/da
        return loss, a * ga + 2 * mu * (u - u0) * used / used.sum()

    step = 1.0
    loss, g = loss_grad(u, True)
    for _ in range(steps):
        while step > 1e-6:
            new, _ = loss_grad(u - step * g, False)
            if new < loss:
                break
            step /= 4
        u = u - step * g
        loss, g = loss_grad(u, True)
        step *= 2
    logger.info("token weights: loss %.5f, a in [%.3g, %.3g] on used rows", loss, np.exp(u[used]).min(),
                np.exp(u[used]).max())
    return np.exp(u)


def run_variant(name: str, ctx: dict[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """(the fitted table, the pair keys of its extra rows or None); the query side is the
    plain mean of the rows of ``pair_bags`` with those keys."""
    e0, bags, targets, wts = ctx["e0"], ctx["bags"], ctx["targets"], ctx["weights"]
    kind, _, arg = name.partition(":")
    if kind in ("pairs", "wpairs"):  # rows for frequent adjacent token pairs, fitted with the token rows
        vocab = e0.shape[0]
        dflat, dlen = ctx["doc_tokens"]
        # wpairs: both tokens letters/digits and in at most a fifth of the documents (no function words)
        allowed = (ctx["word_ids"] & (doc_frequencies(dflat, dlen, vocab) <= len(dlen) / 5)) if kind == "wpairs" else None
        keys = pair_keys(dflat, dlen, vocab, int(arg or 20_000), allowed=allowed)
        e0p = np.vstack([e0, (e0[keys // vocab] + e0[keys % vocab]) / 2])  # mapped alike: the mean of the two
        pb = pair_bags(ctx["flat"], ctx["lengths"], vocab, keys)
        table, fit = fit_table(e0p, pb, targets, weights=wts)
        logger.info("%s: lam %g, held-back cosine %.4f", name, fit.lam, fit.holdout_cosine)
        return table, keys
    if kind == "tokw":  # a learned weight per token in the mean, alternating with the table fit
        p, _, steps = arg.partition("x")
        a = ctx["idf"].astype(np.float64) ** float(p or 0.0)
        lams: tuple[float, ...] = LAMS
        for k in range(int(steps or 2) + 1):
            table, fit = fit_table(e0, weighted_bags(ctx["flat"], ctx["lengths"], e0.shape[0], a), targets,
                                   weights=wts, solve=RidgeSolve(lams=lams))
            lams = (fit.lam,)
            logger.info("tokw round %d: lam %g, held-back cosine %.4f", k, fit.lam, fit.holdout_cosine)
            if k < int(steps or 2):
                a = fit_token_weights(table, bags, targets, wts, a)
        return table * a[:, None].astype(np.float32), None  # a_t E_t under the plain mean ranks alike
    return _run_token_variant(kind, arg, ctx), None


def _run_token_variant(kind: str, arg: str, ctx: dict[str, Any]) -> np.ndarray:
    """The table of a variant served as the plain mean of token rows."""
    e0, bags, targets, wts = ctx["e0"], ctx["bags"], ctx["targets"], ctx["weights"]
    if kind == "ridge":  # the library's default
        return fit_table(e0, bags, targets, weights=wts)[0]
    if kind == "e0":  # the unfitted table as the prior (the default before 2026-11-25)
        return fit_table(e0, bags, targets, weights=wts, solve=RidgeSolve(map_min_queries=None))[0]
    if kind == "mapped":  # two full fits: toward E0, then toward E0 mapped by the first
        base = fit_table(e0, bags, targets, weights=wts, solve=RidgeSolve(map_min_queries=None))[0]
        counts = np.diff(bags.tocsc().indptr)
        rows = np.flatnonzero(counts >= int(arg or 20))
        prior = linear_map(e0, base, rows)
        return fit_table(prior, bags, targets, weights=wts, solve=RidgeSolve(map_min_queries=None))[0]
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
    if kind.partition("@")[0] in ("instruct", "keywords", "both", "kwall"):  # issue 37 item 3: query-like rows
        xb, xt = ctx["extra"](kind)
        share = float(arg or 1.0)
        return fit_table(e0, sp.vstack([bags, xb]).tocsr(), np.vstack([targets, xt]),
                         weights=np.concatenate([wts, np.full(xb.shape[0], share)]))[0]
    if kind == "distill":  # the library's default fit, then the listwise step (bundle.distill)
        from lr_opensearch.fit.distill import DistillConfig, distill_table

        table = fit_table(e0, bags, targets, weights=wts)[0]
        docs = ctx["docs"] if ctx.get("sample") is None else ctx["docs"][ctx["sample"]]
        return distill_table(table, bags, targets, docs, DistillConfig())[0]
    raise ValueError(f"unknown variant {kind}")


def vocabulary_queries(tokenizer: Any, n: int, seed: int = 0, words: tuple[int, int] = (2, 8)) -> list[str]:
    """``n`` keyword lists of random whole-word vocabulary entries (alphabetic, >= 3 letters)."""
    vocab = [w for w in tokenizer.get_vocab() if w.isalpha() and w.isascii() and len(w) >= 3]
    vocab.sort()
    rng = np.random.default_rng(seed)
    return [" ".join(vocab[j] for j in rng.choice(len(vocab), int(rng.integers(words[0], words[1] + 1)),
                                                 replace=False)) for _ in range(n)]


_WORD = re.compile(r"[a-z][a-z0-9-]{2,}")


def keyword_queries(docs: list[str], which: list[int], seed: int = 0, top: int = 8,
                    words: tuple[int, int] = (2, 5)) -> list[str]:
    """For each document ``docs[i]``, i in ``which``: 2-5 (``words``) of its ``top`` words of
    highest tf-idf (count in the document x log(N / df) over ``docs``; lowercase words of >= 3
    characters; ties by first occurrence), in random order."""
    found = [_WORD.findall(d.lower()) for d in docs]
    df: dict[str, int] = {}
    for f in found:
        for w in set(f):
            df[w] = df.get(w, 0) + 1
    rng = np.random.default_rng(seed)
    out = []
    for i in which:
        tf: dict[str, int] = {}
        for w in found[i]:
            tf[w] = tf.get(w, 0) + 1
        best = sorted(tf, key=lambda w: -tf[w] * np.log(len(docs) / df[w]))[:top]  # stable
        k = min(len(best), int(rng.integers(words[0], words[1] + 1)))
        out.append(" ".join(best[j] for j in rng.permutation(len(best))[:k]))
    return out


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
    ctx["doc_tokens"] = (dflat, dlen)
    logger.info("small corpus: %d documents, %d pseudo-queries %s", n, len(texts), pq.counts())


class ProductLegs:
    """One collection's lists from ``model_choice.py legs`` (model ``minilm``) and ``bm25``,
    and this bench's documents restricted to the product's (mapped by id, not by order)."""

    def __init__(self, legs_dir: Path, bm25_file: Path, collection: str, doc_ids: list[str],
                 model: str = "minilm"):
        report, stored, self.bm25 = read_legs(legs_dir, bm25_file)
        facts = report["models"].get(model, {}).get(collection)
        if facts is None:
            raise SystemExit(f"{legs_dir}/legs.json has no {model} {collection}; pass the legs of this collection")
        self.arrays = model_arrays(stored, model)
        self.facts, self.collection = facts, collection
        self.weights, self.semantics = facts["weights"], facts["semantics"]
        where = {d: i for i, d in enumerate(doc_ids)}
        missing = [d for d in facts["doc_ids"] if d not in where]
        if missing:
            raise SystemExit(f"{len(missing)} documents of the legs file are not in the corpus, e.g. {missing[:3]}")
        self.rows = np.asarray([where[d] for d in facts["doc_ids"]])  # this bench's row of each product document
        self.ids = list(facts["doc_ids"])
        logger.info("legs %s: %d of this bench's %d documents are the product's", collection, len(self.rows),
                    len(doc_ids))

    def lists(self, split: str, qids: list[str]) -> dict[str, Any] | None:
        """model_choice's per-leg lists of ``split`` (None when the legs file has no such split)."""
        if split not in self.facts["splits"]:
            return None
        if sorted(self.facts["splits"][split]) != sorted(qids):
            raise SystemExit(f"{self.collection} {split}: the legs file's queries differ from the dataset's")
        return leg_lists(self.arrays, self.facts, self.bm25, self.collection, split)

    def exact(self, qvecs: np.ndarray, docs: np.ndarray, qids: list[str]) -> dict[str, list[tuple[str, float]]]:
        """The exact inner-product top-DEPTH over the product's documents, as the engine scores a dense leg."""
        idx, best = top_k(np.asarray(qvecs, np.float32) @ docs[self.rows].T, DEPTH)
        return {q: [(self.ids[j], score_from_inner_product(float(s))) for j, s in zip(idx[i], best[i], strict=True)]
                for i, q in enumerate(qids)}

    def hybrid(self, lists: dict[str, Any], leg: str, run: dict[str, Any], reference: bool = False) -> dict[str, Any]:
        """The bundle's fusion (or the full-encoder reference's) with ``leg``'s list replaced by ``run``."""
        weights = reference_weights(self.weights) if reference else self.weights
        return fused_run({**lists, leg: run}, weights, self.semantics)


def main(argv: list[str] | None = None) -> int:
    p = fit_bench_parser(__doc__)
    p.add_argument("--small", type=int, default=0)
    p.add_argument("--report-split", default=None, help="also score on this split (report only)")
    p.add_argument("--save", action="store_true", help="keep each table as WORK/table-VARIANT.npy")
    p.add_argument("--instruct", type=Path, action="append", default=None,
                   help="generated queries (bench/instruct_queries.py; default WORK/instruct.jsonl); "
                        "repeatable: variant instruct@STEM:w takes the file named STEM.jsonl, instruct:w the first")
    p.add_argument("--legs", type=Path, default=None,
                   help="bench/model_choice.py legs output (legs.npz + legs.json): also score the hybrids")
    p.add_argument("--bm25", type=Path, default=None, help="bench/model_choice.py bm25 output (with --legs)")
    args = p.parse_args(argv)
    if (args.legs is None) != (args.bm25 is None):
        p.error("--legs and --bm25 go together")
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
    targets = None if args.small else _cached(args.work / "targets.npy", lambda: _embed(encoder(), inputs.texts))
    recs = [(str(r["_id"]), r.get("title") or "", r.get("text") or "") for _, r in iter_jsonl(data.corpus_path)]
    doc_ids = [d for d, _, _ in recs]
    docs = _cached(args.work / "docs.npy", lambda: _embed(encoder(), [document_text(t, x) for _, t, x in recs], 64))
    qids = list(data.queries)  # noqa: F841 (the cache key's order)
    qfull = _cached(args.work / f"queries-{args.split}.npy", lambda: _embed(encoder(), [data.queries[q] for q in qids]))
    flat, lengths = query_tokenizer(tokenizer)(inputs.texts)
    ctx: dict[str, Any] = {"e0": e0, "bags": inputs.bags, "targets": targets, "weights": inputs.weights,
                           "idf": inputs.idf, "flat": flat, "lengths": lengths, "docs": docs,
                           "doc_tokens": query_tokenizer(tokenizer, 1 << 20)([f"{t} {x}" for _, t, x in recs])}
    def generic() -> tuple[sp.csr_matrix, np.ndarray]:
        texts = vocabulary_queries(tokenizer, 10_000)
        gt = _cached(args.work / "targets-generic.npy", lambda: _embed(encoder(), texts))
        gf, gl = query_tokenizer(tokenizer)(texts)
        return token_bags(gf, gl, vocab), gt

    ctx["generic"] = generic
    ctx["word_ids"] = np.zeros(vocab, bool)
    ctx["word_ids"][[i for w, i in tokenizer.get_vocab().items() if w.removeprefix("##").isalnum()]] = True
    if args.small:
        _small_subset(ctx, [(t, x) for _, t, x in recs], args.small, tokenizer, args.work, encoder)
    def extra_rows(kind: str) -> tuple[sp.csr_matrix, np.ndarray]:
        """Bags and full-model vectors of the generated queries of the fit's documents
        (``instruct``), keyword lists of the same documents (``keywords``) or both."""
        if kind.partition("@")[0] == "both":
            source = kind[len("both"):]  # "" or "@STEM"
            pairs = [extra_rows("instruct" + source), extra_rows("keywords" + source)]
            return sp.vstack([b for b, _ in pairs]).tocsr(), np.vstack([t for _, t in pairs])
        kind, _, stem = kind.partition("@")
        fit_docs = ctx.get("sample")
        allowed = {doc_ids[i] for i in (range(len(recs)) if fit_docs is None else fit_docs)}
        files = args.instruct or [args.work / "instruct.jsonl"]
        named = [f for f in files if f.stem == stem]
        if stem and not named:
            raise SystemExit(f"variant {kind}@{stem}: no --instruct file is named {stem}.jsonl (given: {files})")
        path = named[0] if stem else files[0]
        rows = [r for r in map(json.loads, path.read_text().splitlines()) if r["query"] and r["_id"] in allowed]
        pool = [j for j, d in enumerate(doc_ids) if d in allowed]  # the fit's documents (tf-idf over them)
        at = {doc_ids[j]: k for k, j in enumerate(pool)}
        which = {"instruct": None, "kwall": list(range(len(pool))), "keywords": [at[r["_id"]] for r in rows]}[kind]
        texts = ([r["query"] for r in rows] if which is None
                 else keyword_queries([f"{recs[j][1]} {recs[j][2]}" for j in pool], which))
        texts = [t for t, n in zip(texts, query_tokenizer(tokenizer)(texts)[1], strict=True) if n > 0]  # no empty lists
        key = hashlib.sha1("\n".join(texts).encode()).hexdigest()[:10]
        xt = _cached(args.work / f"targets-{kind}-{len(texts)}-{key}.npy", lambda: _embed(encoder(), texts))
        xf, xl = query_tokenizer(tokenizer)(texts)
        logger.info("%s: %d queries of %d documents, e.g. %s", kind, len(texts), len(allowed), texts[:3])
        return token_bags(xf, xl, vocab), xt

    ctx["extra"] = extra_rows
    splits = [(args.split, data, qfull)]
    if args.report_split:  # figures for the report only, never for a choice
        rep = load_beir(args.dataset, args.report_split)
        rq = list(rep.queries)
        splits.append((args.report_split, rep, _cached(args.work / f"queries-{args.report_split}.npy",
                                                      lambda: _embed(encoder(), [rep.queries[q] for q in rq]))))
    results: dict[str, Any] = {}
    base: dict[str, list[float]] = {}
    legs = ProductLegs(args.legs, args.bm25, args.dataset.name, doc_ids) if args.legs else None
    lists: dict[str, Any] = {}
    for split, d, qf in splits:
        sq = list(d.queries)
        results[f"{split}/full-dense"] = float(np.mean(_ndcg(qf, docs, doc_ids, sq, d.qrels)))
        found = legs.lists(split, sq) if legs else None
        if legs and found is not None:  # the product's own runs, and the reference with this bench's vectors
            lists[split] = found
            own = legs.exact(qf, docs, sq)
            results[f"{split}/product"] = {run: compute_metrics(d.qrels, r)["ndcg@10"] for run, r in
                                           runs_of(found, legs.weights, legs.semantics).items()}
            results[f"{split}/full-dense-own"] = compute_metrics(d.qrels, own)["ndcg@10"]
            results[f"{split}/full-hybrid-own"] = compute_metrics(
                d.qrels, legs.hybrid(found, FULL.name, own, reference=True))["ndcg@10"]
    logger.info("full-dense %s", results)
    for name in args.variant or ["ridge"]:
        t0 = time.perf_counter()
        table, keys = run_variant(name, ctx)
        seconds = round(time.perf_counter() - t0, 1)
        extra = {"pair_rows": len(keys), "pair_rows_mb_f16": round(len(keys) * table.shape[1] * 2 / 1e6, 1)} \
            if keys is not None else {}
        if args.save:
            np.save(args.work / f"table-{name.replace(':', '_')}.npy", table)
        for split, d, _ in splits:
            sq = list(d.queries)
            qflat, qlen = query_tokenizer(tokenizer)([d.queries[q] for q in sq])
            qv = np.asarray(pair_bags(qflat, qlen, vocab, keys) @ table, np.float32)
            per = _ndcg(qv, docs, doc_ids, sq, d.qrels)
            base.setdefault(split, per)
            results[f"{split}/{name}"] = {"ndcg@10": float(np.mean(per)), "vs_first": _paired(base[split], per),
                                          "seconds": seconds, **extra}
            if split in lists and legs is not None:  # over the product's documents, fused as the product fuses
                own = legs.exact(qv, docs, sq)
                results[f"{split}/{name}"].update(
                    lr_dense=compute_metrics(d.qrels, own)["ndcg@10"],
                    lr_hybrid=compute_metrics(d.qrels, legs.hybrid(lists[split], DENSE.name, own))["ndcg@10"])
            logger.info("%s/%s: %s", split, name, results[f"{split}/{name}"])
    text = json.dumps(results, indent=1)
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
