"""Fitting a bundle's query table and sparse query weights to a corpus (numpy + scipy, no torch).

The query side encodes a query as the plain mean of table rows ``E[t]`` over its token ids
(no special tokens, repeats counted, no re-normalisation of rows or of the mean). The
unfitted table has row t = Enc(instruction + t), a poor stand-in for Enc(instruction +
query). :func:`fit_bundle_tables` fits the table so that the mean of rows matches the full
model's embedding of whole (pseudo-)queries:

1. :func:`make_pseudo_queries` cuts pseudo-queries out of the fit corpus's documents
   (title, random sentences, random word spans), deduplicated; :func:`plan_counts` raises
   the per-document counts for small corpora. Real training queries may be added.
2. The caller's ``embed`` (the ``full-dense`` query forward: instruction + text through the
   document forward) gives the targets ``F`` [n, H].
3. :func:`token_bags` builds ``A`` [n, V], the row-normalised token counts of the
   pseudo-queries tokenized exactly as the query side tokenizes (``A @ E`` is what the
   query side computes).
4. :func:`fit_table` solves ``min ||A E - F||^2 + lam ||E - E0||^2`` by Jacobi-preconditioned
   conjugate gradients, ``lam`` chosen on a held-back 10 %. Rows of tokens that occur in
   no pseudo-query keep ``E0`` exactly.

:func:`idf_weights` gives the sparse query weight of each token, from the fit corpus's
document frequencies. Measured on SciFact (see the project's fit report): dense nDCG@10
0.063 unfitted, 0.648 fitted on the corpus, 0.645 for the full model; IDF query weights
0.565 vs counts 0.495 (train queries).

Never reads qrels. Corpora: BEIR ``corpus.jsonl[.gz]`` (``title``, ``text``) or ``.txt``
(one document per non-empty line); queries: BEIR ``queries.jsonl[.gz]`` (``text``) or
``.txt`` (one query per non-empty line).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from lr_opensearch.bundle.files import tokenizer_specials
from lr_opensearch.bundle.pseudo import (
    MAX_QUERIES,
    RECIPE_WEIGHTS,
    PseudoQueries,
    clean_text,
    file_facts,
    make_pseudo_queries,
    plan_counts,
    read_records,
)
from lr_opensearch.errors import ConfigError
from lr_opensearch.query.tokens import DEFAULT_MAX_TOKENS, QueryTokenizer

logger = logging.getLogger(__name__)

# lam candidates, tried strong -> weak. The held-back cosine alone would pick 0.03 on larger
# corpora; SciFact *train* queries prefer 0.01 (dense nDCG@10 0.633 vs 0.620 with passages,
# 0.617 vs 0.606 without), so the search starts there.
LAMS = (0.01, 0.003, 0.001, 0.0003, 0.0001)

Embed = Callable[[list[str]], np.ndarray]


# ----------------------------------------------------------------------------- the fit


def token_bags(flat: np.ndarray, lengths: np.ndarray, vocab_size: int) -> sp.csr_matrix:
    """[n, V] float64 CSR: row i = count(t in query i) / len(query i), so ``bags @ E`` is the
    query side's mean of rows.

    Args:
        flat: [N] int64 ids of all queries back to back (as ``QueryEncoder.tokenize`` gives).
        lengths: [n] tokens per query (all >= 1).
        vocab_size: V.
    """
    lengths = np.asarray(lengths, np.int64)
    if len(lengths) and lengths.min() < 1:
        raise ValueError("every query needs at least one token")
    rows = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    vals = 1.0 / np.repeat(lengths, lengths).astype(np.float64)
    bags = sp.csr_matrix((vals, (rows, np.asarray(flat, np.int64))), shape=(len(lengths), vocab_size))
    bags.sum_duplicates()
    return bags


def _pcg(gram: Callable[[np.ndarray], np.ndarray], rhs: np.ndarray, x: np.ndarray,
         inv_diag: np.ndarray, *, maxiter: int, tol: float) -> tuple[np.ndarray, int]:
    """Jacobi-preconditioned CG for the SPD ``gram``, each column of ``rhs`` its own system.

    Stops when max_j ||r_j|| / ||rhs_j|| <= tol or after ``maxiter`` iterations.
    """
    r = rhs - gram(x)
    z = inv_diag[:, None] * r
    p = z.copy()
    rz = np.einsum("ij,ij->j", r, z)
    bnorm = np.maximum(np.linalg.norm(rhs, axis=0), 1e-30)
    it = 0
    while it < maxiter and np.max(np.linalg.norm(r, axis=0) / bnorm) > tol:
        ap = gram(p)
        pap = np.einsum("ij,ij->j", p, ap)
        alpha = np.where(pap > 0, rz / np.where(pap > 0, pap, 1.0), 0.0)
        x += alpha * p
        r -= alpha * ap
        z = inv_diag[:, None] * r
        rz_new = np.einsum("ij,ij->j", r, z)
        p = z + np.where(rz > 0, rz_new / np.where(rz > 0, rz, 1.0), 0.0) * p
        rz = rz_new
        it += 1
    return x, it


def _solve(bags: sp.csr_matrix, targets: np.ndarray, e0: np.ndarray, lam: float,
           start: np.ndarray, *, maxiter: int, tol: float) -> tuple[np.ndarray, int]:
    """(A^T A + lam I) E = A^T F + lam E0 over the tokens A uses; other rows stay E0."""
    used = np.flatnonzero(np.diff(bags.tocsc().indptr))
    a = bags[:, used].tocsr()
    at = a.T.tocsr()
    rhs = at @ targets + lam * e0[used]
    inv_diag = 1.0 / (np.asarray(a.multiply(a).sum(0)).ravel() + lam)
    xu, it = _pcg(lambda x: at @ (a @ x) + lam * x, rhs, start[used].copy(), inv_diag,
                  maxiter=maxiter, tol=tol)
    out = e0.copy()
    out[used] = xu
    return out, it


def mean_cosine(pred: np.ndarray, targets: np.ndarray) -> float:
    """Mean over rows of cos(pred_i, targets_i) (0 for a zero row)."""
    num = np.einsum("ij,ij->i", pred, targets)
    den = np.linalg.norm(pred, axis=1) * np.linalg.norm(targets, axis=1)
    return float(np.mean(np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)))


@dataclass
class TableFit:
    """How one table was fitted (recorded in the manifest under ``fit.tables``)."""

    lam: float
    holdout_cosine_e0: float
    holdout_cosine: float
    holdout_cosine_per_lam: dict[str, float]
    rows_fitted: int
    encode_seconds: float = 0.0
    solve_seconds: float = 0.0


def fit_table(e0: np.ndarray, bags: sp.csr_matrix, targets: np.ndarray, *,
              weights: np.ndarray | None = None,
              lams: Sequence[float] = LAMS, holdout: float = 0.1, seed: int = 0,
              patience: int = 2, maxiter: int = 300, tol: float = 1e-4,
              progress: bool = False) -> tuple[np.ndarray, TableFit]:
    """Fit the query table: ``argmin_E ||W (A E - F)||^2 + lam ||E - E0||^2``.

    ``lam`` is chosen on a random ``holdout`` share of the rows (highest mean cosine of
    ``A_h E`` vs ``F_h`` when fitted on the rest), trying ``lams`` from strong to weak
    (each solve warm-starts the next) and stopping after ``patience`` worse ones; then the
    table is refitted on every row with that ``lam``.

    Args:
        e0: [V, H] the unfitted table (the prior).
        bags: [n, V] row-normalised token bags (:func:`token_bags`), n >= 2.
        targets: [n, H] the full model's embeddings of the same queries.
        weights: [n] row weights W (default 1); the held-back cosine is unweighted.

    Returns:
        (table [V, H] float32, :class:`TableFit`). Serve the table as is: the query side
        takes the plain mean of its rows.
    """
    from lr_opensearch.progress import progress_bar

    n = bags.shape[0]
    if n < 2 or bags.shape[1] != e0.shape[0] or targets.shape != (n, e0.shape[1]):
        raise ValueError(f"shapes disagree (or fewer than 2 queries): bags {bags.shape}, "
                         f"targets {targets.shape}, e0 {e0.shape}")
    bags = sp.csr_matrix(bags, dtype=np.float64)
    f = np.asarray(targets, np.float64)
    if weights is not None:
        w = np.asarray(weights, np.float64)
        if w.shape != (n,) or not np.all(np.isfinite(w)) or w.min() <= 0:
            raise ValueError(f"weights must be [n={n}] finite and > 0, got shape {w.shape}")
        bags, f = sp.diags(w) @ bags, f * w[:, None]
        bags = bags.tocsr()
    e0f = np.asarray(e0, np.float64)
    held = np.zeros(n, bool)
    held[np.random.default_rng(seed).choice(n, size=max(1, round(holdout * n)), replace=False)] = True
    a_tr, f_tr, a_h, f_h = bags[~held], f[~held], bags[held], f[held]
    cos_e0 = mean_cosine(a_h @ e0f, f_h)
    per_lam: dict[str, float] = {}
    best, best_cos, table, worse = lams[0], -np.inf, e0f, 0
    warm = e0f
    with progress_bar(total=len(lams) + 1, desc="fit table", unit="solve", disable=not progress) as bar:
        for lam in sorted(lams, reverse=True):
            fitted, it = _solve(a_tr, f_tr, e0f, lam, warm, maxiter=maxiter, tol=tol)
            cos = per_lam[f"{lam:g}"] = mean_cosine(a_h @ fitted, f_h)
            logger.debug("lam=%g: held-back cosine %.4f (%d CG iterations)", lam, cos, it)
            bar.update(1)
            bar.set_postfix(lam=f"{lam:g}", cos=f"{cos:.4f}")
            if cos > best_cos:
                best, best_cos, table, worse = lam, cos, fitted, 0
            elif (worse := worse + 1) >= patience:
                break
            warm = fitted
        table, _ = _solve(bags, f, e0f, best, table, maxiter=maxiter, tol=tol)
        bar.update(bar.total - bar.n)
    rows = int(np.count_nonzero(np.diff(bags.tocsc().indptr)))
    return table.astype(np.float32), TableFit(best, cos_e0, best_cos, per_lam, rows)


def doc_frequencies(flat: np.ndarray, lengths: np.ndarray, vocab_size: int) -> np.ndarray:
    """[V] int64: in how many of the given documents each token id occurs."""
    owner = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
    pair = np.unique(owner * vocab_size + np.asarray(flat, np.int64))
    return np.bincount(pair % vocab_size, minlength=vocab_size).astype(np.int64)


def idf_weights(df: np.ndarray, n_docs: int) -> np.ndarray:
    """[V] float32 ``log(1 + (N - df + 0.5) / (df + 0.5))`` (Lucene BM25's IDF; always > 0,
    largest for a token in no document)."""
    df = np.asarray(df, np.float64)
    return np.log1p((n_docs - df + 0.5) / (df + 0.5)).astype(np.float32)


# ----------------------------------------------------------------------------- the bundle fit


@dataclass
class FitStats:
    """What the fit did (the manifest's ``fit`` entry; ``lr bundle info`` shows it)."""

    corpora: list[dict[str, Any]]
    query_files: list[dict[str, Any]]
    documents: int
    documents_sampled: int
    sentences_per_doc: int
    spans_per_doc: int
    queries: dict[str, int]
    max_queries: int
    seed: int
    tables: dict[str, TableFit] = field(default_factory=dict)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FitResult:
    """Fitted tables (name -> [V, H] float32), IDF weights [V] float32 and the stats."""

    tables: dict[str, np.ndarray]
    idf: np.ndarray
    stats: FitStats


def query_tokenizer(tokenizer: Any, max_tokens: int = DEFAULT_MAX_TOKENS) -> QueryTokenizer:
    """The tokenizer ``QueryEncoder`` builds for a bundle with this tokenizer."""
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    return QueryTokenizer(tokenizer, tokenizer_specials(tokenizer), vocab, max_tokens)


def _read_corpora(paths: Sequence[Path], tokenizer: Any, keep: int, seed: int,
                  ) -> tuple[list[tuple[str, str]], np.ndarray, int]:
    """(a uniform sample of at most ``keep`` documents, df [V], number of documents)."""
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    doc_tok = query_tokenizer(tokenizer, max_tokens=1 << 20)  # whole documents
    rng = np.random.default_rng(seed)
    sample: list[tuple[str, str]] = []
    df = np.zeros(vocab, np.int64)
    n = 0
    chunk: list[str] = []

    def count(texts: list[str]) -> None:
        flat, lengths = doc_tok(texts)
        df[:] += doc_frequencies(flat, lengths, vocab)
        texts.clear()

    for path in paths:
        for title, text in read_records(path, ("title", "text")):
            n += 1
            if len(sample) < keep:
                sample.append((title, text))
            elif (j := int(rng.integers(0, n))) < keep:  # reservoir sampling
                sample[j] = (title, text)
            chunk.append(f"{title} {text}")
            if len(chunk) >= 1024:
                count(chunk)
    if chunk:
        count(chunk)
    if n == 0:
        raise ConfigError(f"the fit corpora {[str(p) for p in paths]} hold no documents")
    return sample, df, n


def _embed_all(embed: Embed, texts: list[str], desc: str, progress: bool,
               chunk: int = 256) -> np.ndarray:
    """``embed`` over ``texts`` in length-sorted chunks (less padding), in input order."""
    from lr_opensearch.progress import progress_bar

    order = np.argsort([-len(t) for t in texts], kind="stable")
    out: np.ndarray | None = None
    with progress_bar(total=len(texts), desc=desc, unit="q", disable=not progress) as bar:
        for s in range(0, len(texts), chunk):
            idx = order[s : s + chunk]
            vecs = np.asarray(embed([texts[i] for i in idx]), np.float32)
            if out is None:
                out = np.empty((len(texts), vecs.shape[1]), np.float32)
            out[idx] = vecs
            bar.update(len(idx))
    assert out is not None
    return out


def fit_bundle_tables(
    tokenizer: Any,
    tables: Mapping[str, np.ndarray],
    instructions: Mapping[str, str],
    embed: Embed,
    corpora: Sequence[str | Path],
    *,
    queries: Sequence[str | Path] = (),
    max_queries: int = MAX_QUERIES,
    seed: int = 0,
    progress: bool = True,
) -> FitResult:
    """Fit every query table of a bundle to corpora, and compute IDF sparse query weights.

    Args:
        tokenizer: the bundle's ``tokenizers.Tokenizer``.
        tables: instruction name -> unfitted table E0 [V, H].
        instructions: instruction name -> instruction text.
        embed: texts -> [n, H] full-model embeddings, exactly as the ``full-dense`` run
            encodes a query (the caller prepends nothing: texts already hold the instruction).
        corpora: fit corpus files (documents; pseudo-queries and document frequencies).
        queries: optional real training query files, added to the pseudo-queries.
        max_queries: cap on pseudo-queries + queries.
        seed: seed of every random choice.
        progress: tqdm bars.
    """
    if max_queries < 10:
        raise ConfigError(f"--fit-max-queries must be >= 10, got {max_queries}")
    start = time.perf_counter()
    paths, qpaths = [Path(p) for p in corpora], [Path(p) for p in queries]
    docs, df, n_docs = _read_corpora(paths, tokenizer, max(1, max_queries // 6), seed)
    sentences, spans = plan_counts(len(docs))
    pq = make_pseudo_queries(docs, sentences_per_doc=sentences, spans_per_doc=spans, seed=seed)
    texts, recipe = _with_queries(pq, qpaths, max_queries, seed)
    tok = query_tokenizer(tokenizer)
    flat, lengths = tok(texts)
    keep = lengths > 0
    if not keep.all():  # e.g. a text of special tokens only: the query side refuses it too
        starts = np.cumsum(lengths) - lengths
        flat = np.concatenate([flat[s : s + n] for s, n in zip(starts[keep], lengths[keep], strict=True)])
        texts, recipe, lengths = [t for t, k in zip(texts, keep, strict=True) if k], recipe[keep], lengths[keep]
    if len(texts) < 10:
        raise ConfigError(f"the fit corpora {[str(p) for p in paths]} give only {len(texts)} "
                          "queries; the fit needs at least 10 (give a larger corpus)")
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    bags = token_bags(flat, lengths, vocab)
    weights = np.asarray([RECIPE_WEIGHTS.get(r, 1.0) for r in recipe], np.float64)
    stats = FitStats(
        corpora=[file_facts(p) for p in paths],
        query_files=[file_facts(p) for p in qpaths], documents=n_docs,
        documents_sampled=len(docs), sentences_per_doc=sentences, spans_per_doc=spans,
        queries=PseudoQueries(texts, recipe).counts(), max_queries=max_queries, seed=seed)
    logger.info("fit: %d documents (%d sampled), %d queries %s", n_docs, len(docs), len(texts),
                stats.queries)
    fitted: dict[str, np.ndarray] = {}
    for name, instruction in instructions.items():
        t0 = time.perf_counter()
        targets = _embed_all(embed, [instruction + t for t in texts], f"fit targets {name}", progress)
        t1 = time.perf_counter()
        fitted[name], fit = fit_table(tables[name], bags, targets, weights=weights, seed=seed,
                                      progress=progress)
        fit.encode_seconds, fit.solve_seconds = t1 - t0, time.perf_counter() - t1
        stats.tables[name] = fit
        logger.info("fit table %r: lam %g, held-back cosine %.4f (unfitted %.4f), %d rows fitted",
                    name, fit.lam, fit.holdout_cosine, fit.holdout_cosine_e0, fit.rows_fitted)
    stats.seconds = time.perf_counter() - start
    return FitResult(fitted, idf_weights(df, n_docs), stats)


def _with_queries(pq: PseudoQueries, paths: Sequence[Path], max_queries: int,
                  seed: int) -> tuple[list[str], np.ndarray]:
    """Real queries first (deduplicated), then pseudo-queries, sampled down to the cap."""
    real: list[str] = []
    seen: set[str] = set()
    for path in paths:
        for (text,) in read_records(path, ("text",)):
            text = clean_text(text)
            if text and text.lower() not in seen:
                seen.add(text.lower())
                real.append(text)
    real = real[:max_queries]
    pseudo = [i for i, t in enumerate(pq.texts) if t.lower() not in seen]
    room = max_queries - len(real)
    if len(pseudo) > room:
        pick = np.random.default_rng(seed).choice(len(pseudo), size=room, replace=False)
        pseudo = [pseudo[i] for i in np.sort(pick)]
    texts = real + [pq.texts[i] for i in pseudo]
    recipe = np.asarray(["query"] * len(real) + [pq.recipe[i] for i in pseudo], dtype=object)
    return texts, recipe
