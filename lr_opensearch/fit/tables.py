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
3. ``ridge.token_bags`` builds ``A`` [n, V], the row-normalised token counts of the
   pseudo-queries tokenized exactly as the query side tokenizes (``A @ E`` is what the
   query side computes).
4. ``ridge.fit_table`` solves ``min ||A E - F||^2 + lam ||E - P||^2`` by Jacobi-preconditioned
   conjugate gradients, ``lam`` chosen on a held-back 10 %. The prior ``P`` is the unfitted
   table mapped into the fitted rows' space (``ridge.mapped_prior``); rows of tokens that
   occur in no pseudo-query take ``P``.
5. Optionally (``distill``), ``distill.distill_table`` then refines the table so that it
   ranks the sampled documents as the full model does (a listwise KL over candidates).

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
from lr_opensearch.errors import ConfigError
from lr_opensearch.fit.distill import (
    DEFAULT_DISTILL,
    DistillConfig,
    distill_table,
    sample_doc_texts,
)
from lr_opensearch.fit.pseudo import (
    MAX_QUERIES,
    RECIPE_WEIGHTS,
    PseudoQueries,
    file_facts,
    make_pseudo_queries,
    plan_counts,
    read_records,
    with_queries,
)
from lr_opensearch.fit.ridge import RidgeSolve, TableFit, fit_table, token_bags
from lr_opensearch.fit.sparse import (
    DEFAULT_SPARSE_FIT,
    DEFAULT_SPARSE_LOWRANK,
    LowRankFitConfig,
    SparseFitConfig,
)
from lr_opensearch.options import DEFAULT_ENCODE_PRECISION, DEFAULT_RUNTIME
from lr_opensearch.query.tokens import DEFAULT_MAX_TOKENS, QueryTokenizer

logger = logging.getLogger(__name__)

Embed = Callable[[list[str]], np.ndarray]


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
class FitRecipe:
    """How a bundle's query tables are fitted (``lr bundle build --fit-*``; one object where
    ``build_bundle``, ``build_bundle_from_model`` and the table fit each repeated the list).

    Attributes:
        corpora: corpus files (BEIR JSONL[.gz] or text) the pseudo-queries are cut from and
            the IDF query weights counted on; none: no fit (the unfitted table).
        queries: real training query files added to the pseudo-queries.
        max_queries: cap on the fit's (pseudo-)queries.
        distill: the listwise step after the ridge fit (``fit.distill``); None: off.
        encode_precision: how the full model's vectors of the fit are computed
            (``options.ENCODE_PRECISIONS``; the saved weights never change).
        runtime: where they are computed (``options.RUNTIMES``, ``model.runtime``).
        sparse: the document side's per-term scale and bias fitted on the same
            pseudo-queries (``fit.sparse``); None: the sparse head as it is.
        sparse_lowrank: a low-rank correction of the sparse projection fitted on the same
            pseudo-queries (``fit.sparse_lowrank``); None: the projection as it is.

    >>> FitRecipe(corpora=("corpus.jsonl.gz",)).enabled
    True
    """

    corpora: Sequence[str | Path] = ()
    queries: Sequence[str | Path] = ()
    max_queries: int = MAX_QUERIES
    distill: DistillConfig | None = DEFAULT_DISTILL
    encode_precision: str = DEFAULT_ENCODE_PRECISION
    runtime: str = DEFAULT_RUNTIME
    sparse: SparseFitConfig | None = DEFAULT_SPARSE_FIT
    sparse_lowrank: LowRankFitConfig | None = DEFAULT_SPARSE_LOWRANK

    @property
    def enabled(self) -> bool:
        return bool(self.corpora)

    @property
    def sparse_fits(self) -> tuple[str, ...]:
        """The options of the sparse document side's fits this recipe asks for (they train
        on torch: ``fit.sparse_build``); none without corpora.

        >>> FitRecipe(corpora=("c.jsonl",), sparse=SparseFitConfig()).sparse_fits
        ('--fit-sparse',)
        """
        asked = (("--fit-sparse-lowrank", self.sparse_lowrank), ("--fit-sparse", self.sparse))
        return tuple(flag for flag, setting in asked if setting is not None and self.enabled)


@dataclass(frozen=True)
class FitResult:
    """Fitted tables (name -> [V, H] float32), IDF weights [V] float32, the stats and the
    inputs they were fitted on (the sparse fit reuses them)."""

    tables: dict[str, np.ndarray]
    idf: np.ndarray
    stats: FitStats
    inputs: FitInputs | None = None


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


@dataclass(frozen=True)
class FitInputs:
    """What the fit reads from its files, before any model runs.

    Attributes:
        texts: the (pseudo-)queries, without instruction.
        bags: [n, V] their token bags (:func:`token_bags`).
        weights: [n] their row weights (``RECIPE_WEIGHTS``).
        docs: the sampled documents (title, text) the pseudo-queries come from.
        idf: [V] the IDF sparse query weights of the corpora.
        stats: the fit's stats so far (no tables yet).
        sources: [n] the index in ``docs`` each pseudo-query was cut from; -1 for a real
            query (``PseudoQueries.sources``).
    """

    texts: list[str]
    bags: sp.csr_matrix
    weights: np.ndarray
    docs: list[tuple[str, str]]
    idf: np.ndarray
    stats: FitStats
    sources: np.ndarray


def prepare_fit(tokenizer: Any, corpora: Sequence[str | Path], *,
                queries: Sequence[str | Path] = (), max_queries: int = MAX_QUERIES,
                seed: int = 0) -> FitInputs:
    """Read the fit files: document sample, pseudo-queries, token bags, IDF weights."""
    if max_queries < 10:
        raise ConfigError(f"--fit-max-queries must be >= 10, got {max_queries}")
    paths, qpaths = [Path(p) for p in corpora], [Path(p) for p in queries]
    docs, df, n_docs = _read_corpora(paths, tokenizer, max(1, max_queries // 6), seed)
    sentences, spans = plan_counts(len(docs))
    pq = make_pseudo_queries(docs, sentences_per_doc=sentences, spans_per_doc=spans, seed=seed)
    chosen = with_queries(pq, qpaths, max_queries, seed)
    texts, recipe, sources = chosen.texts, chosen.recipe, chosen.sources
    flat, lengths = query_tokenizer(tokenizer)(texts)
    keep = lengths > 0
    if not keep.all():  # e.g. a text of special tokens only: the query side refuses it too
        starts = np.cumsum(lengths) - lengths
        flat = np.concatenate([flat[s : s + n] for s, n in zip(starts[keep], lengths[keep], strict=True)])
        texts = [t for t, k in zip(texts, keep, strict=True) if k]
        recipe, sources, lengths = recipe[keep], sources[keep], lengths[keep]
    if len(texts) < 10:
        raise ConfigError(f"the fit corpora {[str(p) for p in paths]} give only {len(texts)} "
                          "queries; the fit needs at least 10 (give a larger corpus)")
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    weights = np.asarray([RECIPE_WEIGHTS.get(r, 1.0) for r in recipe], np.float64)
    stats = FitStats(
        corpora=[file_facts(p) for p in paths],
        query_files=[file_facts(p) for p in qpaths], documents=n_docs,
        documents_sampled=len(docs), sentences_per_doc=sentences, spans_per_doc=spans,
        queries=PseudoQueries(texts, recipe, sources).counts(), max_queries=max_queries, seed=seed)
    logger.info("fit: %d documents (%d sampled), %d queries %s", n_docs, len(docs), len(texts),
                stats.queries)
    return FitInputs(texts, token_bags(flat, lengths, vocab), weights, docs,
                     idf_weights(df, n_docs), stats, sources)


def fit_bundle_tables(
    tokenizer: Any,
    tables: Mapping[str, np.ndarray],
    instructions: Mapping[str, str],
    embed: Embed,
    recipe: FitRecipe,
    *,
    seed: int = 0,
    progress: bool = True,
    embed_docs: Embed | None = None,
) -> FitResult:
    """Fit every query table of a bundle to corpora, and compute IDF sparse query weights.

    Args:
        tokenizer: the bundle's ``tokenizers.Tokenizer``.
        tables: instruction name -> unfitted table E0 [V, H].
        instructions: instruction name -> instruction text.
        embed: texts -> [n, H] full-model embeddings, exactly as the ``full-dense`` run
            encodes a query (the caller prepends nothing: texts already hold the instruction).
        recipe: the fit corpora (documents: pseudo-queries and document frequencies), real
            training queries added to the pseudo-queries, their cap, and ``distill``: when
            given, each ridge-fitted table is then refined to rank the sampled documents as
            the full model does (``fit.distill``; needs ``embed_docs``). Its
            ``encode_precision`` is the caller's, who made ``embed``.
        seed: seed of every random choice.
        progress: tqdm bars.
        embed_docs: document texts -> [n, H] full-model document vectors (as ingest
            encodes a document).
    """
    distill = recipe.distill
    if distill is not None and embed_docs is None:
        raise ValueError("distill needs embed_docs (the full model's document vectors)")
    start = time.perf_counter()
    inputs = prepare_fit(tokenizer, recipe.corpora, queries=recipe.queries,
                         max_queries=recipe.max_queries, seed=seed)
    stats, doc_vectors = inputs.stats, None
    fitted: dict[str, np.ndarray] = {}
    for name, instruction in instructions.items():
        t0 = time.perf_counter()
        targets = _embed_all(embed, [instruction + t for t in inputs.texts], f"fit targets {name}",
                             progress)
        t1 = time.perf_counter()
        fitted[name], fit = fit_table(tables[name], inputs.bags, targets, weights=inputs.weights,
                                      solve=RidgeSolve(seed=seed), progress=progress)
        fit.encode_seconds, fit.solve_seconds = t1 - t0, time.perf_counter() - t1
        if distill is not None and embed_docs is not None:
            if doc_vectors is None:
                doc_vectors = _embed_all(embed_docs, sample_doc_texts(inputs.docs, distill, seed),
                                         "fit documents", progress, chunk=64)
            fitted[name], fit.distill = distill_table(fitted[name], inputs.bags, targets,
                                                      doc_vectors, distill, seed=seed)
        stats.tables[name] = fit
        logger.info("fit table %r: lam %g, held-back cosine %.4f (unfitted %.4f), %d rows fitted",
                    name, fit.lam, fit.holdout_cosine, fit.holdout_cosine_e0, fit.rows_fitted)
    stats.seconds = time.perf_counter() - start
    return FitResult(fitted, inputs.idf, stats, inputs)
