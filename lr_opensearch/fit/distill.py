"""Listwise distillation of the full model's ranking into a fitted query table (numpy).

The ridge fit (``fit.ridge.fit_table``) makes the mean of a query's rows close to the
full model's query vector. Ranking needs less and something else: that the documents come
out in the full model's order. This step starts from the ridge table and, for each
pseudo-query ``i``, takes candidate documents ``C_i`` (the teacher's top ``top`` plus
``random`` uniform others) and minimises

    KL( softmax(F_i . D_c / tau)  ||  softmax(q_i . D_c / tau) ),   c in C_i

where ``F_i`` is the full model's query vector (the ridge targets), ``q_i = A_i E`` the
query side's mean of table rows and ``D`` the full model's document vectors, by a few
epochs of sparse Adam on the rows the batch's queries use (the moments of other rows are
not touched, as in torch's ``SparseAdam``). Rows of tokens in no pseudo-query keep their
value. It needs the document vectors of the fit sample: the caller encodes them.

No judgment and no real query is read: teacher, candidates and queries all come from the
fit corpus's documents.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from lr_opensearch.instructions import document_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DistillConfig:
    """Settings of the listwise step (defaults chosen on SciFact *train* queries).

    Attributes:
        epochs: passes over the pseudo-queries.
        tau: softmax temperature of teacher and student scores.
        top: the teacher's top documents per query among the candidates.
        random: uniform random other documents per query (drawn anew each epoch).
        lr: Adam step size.
        batch: queries per step.
        holdout: share of queries held back to report top-10 agreement with the teacher.
        max_docs: cap on the documents encoded as candidates (a uniform sample).
    """

    epochs: int = 3
    tau: float = 0.05
    top: int = 64
    random: int = 64
    lr: float = 3e-3
    batch: int = 256
    holdout: float = 0.05
    max_docs: int = 6000


# The default of `lr bundle build --fit-corpus` (None: the ridge fit alone); see DistillConfig.
DEFAULT_DISTILL: DistillConfig | None = None


@dataclass
class DistillStats:
    """What the step did (the manifest's ``fit.tables[name].distill``)."""

    epochs: int
    tau: float
    candidates: int
    documents: int
    queries: int
    loss_first: float
    loss_last: float
    top10_agreement_before: float
    top10_agreement_after: float
    seconds: float


def sample_doc_texts(docs: Sequence[tuple[str, str]], config: DistillConfig, seed: int) -> list[str]:
    """The candidate documents' texts, as ingest reads a document: a uniform sample of at
    most ``config.max_docs`` of ``docs`` (title, text), in their order."""
    keep = np.arange(len(docs))
    if len(docs) > config.max_docs:
        keep = np.sort(np.random.default_rng(seed).choice(len(docs), config.max_docs, replace=False))
    return [document_text(*docs[int(i)]) for i in keep]


def teacher_top(targets: np.ndarray, docs: np.ndarray, k: int, chunk: int = 2048) -> np.ndarray:
    """[n, k] ids of the documents with the highest ``targets @ docs.T`` per row, best first."""
    k = min(k, docs.shape[0])
    out = np.empty((targets.shape[0], k), np.int64)
    for s in range(0, targets.shape[0], chunk):
        scores = targets[s : s + chunk] @ docs.T
        part = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(scores, part, 1), axis=1, kind="stable")
        out[s : s + chunk] = np.take_along_axis(part, order, 1)
    return out


def top10_agreement(pred: np.ndarray, targets: np.ndarray, docs: np.ndarray) -> float:
    """Mean share of the teacher's top 10 documents that ``pred`` also ranks in its top 10."""
    if len(pred) == 0:
        return float("nan")
    a, b = teacher_top(pred, docs, 10), teacher_top(targets, docs, 10)
    return float(np.mean([len(set(x) & set(y)) / len(y) for x, y in zip(a, b, strict=True)]))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _candidates(top: np.ndarray, n_docs: int, extra: int, rng: np.random.Generator) -> np.ndarray:
    """[b, top + extra] candidate ids: the teacher's top then uniform draws (repeats possible:
    a repeated document only weighs more, in teacher and student alike)."""
    if extra <= 0:
        return top
    return np.concatenate([top, rng.integers(0, n_docs, (len(top), extra))], axis=1)


class _SparseAdam:
    """Adam on the rows a step touches; a row's moments move only when it gets a gradient."""

    def __init__(self, shape: tuple[int, int], lr: float, b1: float = 0.9, b2: float = 0.999,
                 eps: float = 1e-8) -> None:
        self.m = np.zeros(shape, np.float32)
        self.v = np.zeros(shape, np.float32)
        self.lr, self.b1, self.b2, self.eps, self.t = lr, b1, b2, eps, 0

    def step(self, table: np.ndarray, rows: np.ndarray, grad: np.ndarray) -> None:
        self.t += 1
        m = self.m[rows] = self.b1 * self.m[rows] + (1 - self.b1) * grad
        v = self.v[rows] = self.b2 * self.v[rows] + (1 - self.b2) * grad * grad
        m_hat = m / (1 - self.b1 ** self.t)
        v_hat = v / (1 - self.b2 ** self.t)
        table[rows] -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


def _step(table: np.ndarray, bags: sp.csr_matrix, teacher: np.ndarray, docs: np.ndarray,
          cand: np.ndarray, tau: float, opt: _SparseAdam) -> float:
    """One batch: KL loss (mean over queries) and its sparse Adam step on the used rows."""
    rows = np.unique(bags.indices)
    a = bags[:, rows].tocsr()
    q = a @ table[rows]  # [b, H]
    dc = docs[cand]  # [b, c, H]
    p_t = _softmax(np.einsum("bh,bch->bc", teacher, dc) / tau)
    log_s = np.einsum("bh,bch->bc", q, dc) / tau
    log_s = log_s - log_s.max(axis=1, keepdims=True)
    log_s -= np.log(np.exp(log_s).sum(axis=1, keepdims=True))
    loss = float(np.mean(np.sum(p_t * (np.log(np.maximum(p_t, 1e-30)) - log_s), axis=1)))
    g_s = (np.exp(log_s) - p_t) / (tau * len(cand))  # d loss / d (q . d)
    g_q = np.einsum("bc,bch->bh", g_s, dc)
    opt.step(table, rows, np.asarray(a.T @ g_q, np.float32))
    return loss


def distill_table(table: np.ndarray, bags: sp.csr_matrix, targets: np.ndarray, docs: np.ndarray,
                  config: DistillConfig = DistillConfig(), *, seed: int = 0,
                  ) -> tuple[np.ndarray, DistillStats]:
    """Refine a fitted table so that it ranks ``docs`` as the full model does.

    Args:
        table: [V, H] the ridge-fitted table (not modified).
        bags: [n, V] the pseudo-queries' row-normalised token bags (``fit.token_bags``).
        targets: [n, H] the full model's vectors of the same pseudo-queries (the teacher).
        docs: [m, H] the full model's vectors of the candidate documents, m >= 2.
        config: the step's settings.
        seed: seed of the holdout, the batches and the random candidates.

    Returns:
        (the refined table [V, H] float32, :class:`DistillStats`).
    """
    start = time.perf_counter()
    n, m = bags.shape[0], docs.shape[0]
    if targets.shape[0] != n or docs.ndim != 2 or docs.shape[1] != table.shape[1] or m < 2:
        raise ValueError(f"shapes disagree: table {table.shape}, bags {bags.shape}, targets "
                         f"{targets.shape}, docs {docs.shape} (need >= 2 documents)")
    rng = np.random.default_rng(seed)
    bags = sp.csr_matrix(bags, dtype=np.float32)
    teacher = np.asarray(targets, np.float32)
    docs = np.asarray(docs, np.float32)
    held = rng.random(n) < config.holdout
    train = np.flatnonzero(~held)
    top = teacher_top(teacher[train], docs, config.top)
    out = np.array(table, np.float32, copy=True)
    before = top10_agreement(bags[held] @ out, teacher[held], docs)
    opt = _SparseAdam(out.shape, config.lr)
    losses: list[float] = []
    for epoch in range(config.epochs):
        order = rng.permutation(len(train))
        total = 0.0
        for s in range(0, len(order), config.batch):
            pick = order[s : s + config.batch]
            cand = _candidates(top[pick], m, config.random, rng)
            idx = train[pick]
            total += _step(out, bags[idx], teacher[idx], docs, cand, config.tau, opt) * len(pick)
        losses.append(total / max(len(order), 1))
        logger.info("distill epoch %d: KL %.4f", epoch + 1, losses[-1])
    after = top10_agreement(bags[held] @ out, teacher[held], docs)
    stats = DistillStats(config.epochs, config.tau, top.shape[1] + config.random, m, n,
                         losses[0] if losses else float("nan"),
                         losses[-1] if losses else float("nan"), before, after,
                         time.perf_counter() - start)
    logger.info("distill: top-10 agreement with the full model on %d held-back queries "
                "%.3f -> %.3f (%.0f s)", int(held.sum()), before, after, stats.seconds)
    return out, stats
