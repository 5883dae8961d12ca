"""The ridge fit of a query table: ``min_E ||W (A E - F)||^2 + lam ||E - P||^2`` (numpy, scipy).

``A`` holds the (pseudo-)queries' row-normalised token bags (:func:`token_bags`: ``A @ E``
is the query side's mean of rows), ``F`` the full model's embeddings of the same queries,
``P`` the prior. Solved by Jacobi-preconditioned conjugate gradients on the rows the
queries use; ``lam`` is chosen on a held-back share (:func:`fit_table`). ``fit.tables``
runs it for each table of a bundle.

The prior is the unfitted table ``E0`` mapped into the fitted rows' space
(:func:`mapped_prior`: one affine map, least squares from the ``E0`` rows of tokens that
many queries use onto their fitted rows), not ``E0`` itself: a row the queries seldom or
never use then lands where fitted rows live instead of in ``E0``'s space, whose rows differ
from fitted ones in scale and offset. Chosen on SciFact *train* queries (dense nDCG@10,
exact search): whole corpus 0.632 -> 0.638; a simulated 82-document corpus (its
pseudo-queries only, searching the whole collection) 0.349 -> 0.448.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from lr_opensearch.fit.distill import DistillStats

logger = logging.getLogger(__name__)

# lam candidates, tried strong -> weak. The held-back cosine alone would pick 0.03 on larger
# corpora; SciFact *train* queries prefer 0.01 (dense nDCG@10 0.633 vs 0.620 with passages,
# 0.617 vs 0.606 without), so the search starts there.
LAMS = (0.01, 0.003, 0.001, 0.0003, 0.0001)
# A token's row teaches the prior's map when at least this many queries use it.
MAP_MIN_QUERIES = 20


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


def mapped_prior(e0: np.ndarray, fitted: np.ndarray, rows: np.ndarray,
                 ridge: float = 1e-2) -> np.ndarray:
    """[V, H] ``[E0 1] M``: every row of ``e0`` through the affine map M that best sends the
    ``e0`` rows ``rows`` to the ``fitted`` rows (least squares, ``ridge`` on M)."""
    x = np.hstack([e0[rows], np.ones((len(rows), 1))])
    m = np.linalg.solve(x.T @ x + ridge * np.eye(x.shape[1]), x.T @ fitted[rows])
    return e0 @ m[:-1] + m[-1]


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
    prior_rows: int = 0
    encode_seconds: float = 0.0
    solve_seconds: float = 0.0
    distill: DistillStats | None = None


@dataclass(frozen=True)
class RidgeSolve:
    """How :func:`fit_table` solves: the ``lams`` tried (strong to weak), the ``holdout``
    share and ``seed`` that choose one, the ``patience`` (worse lams before stopping), the
    CG solver's ``maxiter`` / ``tol``, and ``map_min_queries`` (the prior's rows: see
    :func:`fit_table`; None: the unfitted table is the prior)."""

    lams: Sequence[float] = LAMS
    holdout: float = 0.1
    seed: int = 0
    patience: int = 2
    maxiter: int = 300
    tol: float = 1e-4
    map_min_queries: int | None = MAP_MIN_QUERIES


def fit_table(e0: np.ndarray, bags: sp.csr_matrix, targets: np.ndarray, *,
              weights: np.ndarray | None = None, solve: RidgeSolve | None = None,
              progress: bool = False) -> tuple[np.ndarray, TableFit]:
    """Fit the query table: ``argmin_E ||W (A E - F)||^2 + lam ||E - P||^2``.

    The prior ``P`` (also the value of rows no query uses) is :func:`mapped_prior`, mapped
    from a first fit toward ``E0`` at ``lams[0]`` on the rows of tokens that at least
    ``map_min_queries`` queries use (``E0`` itself when ``map_min_queries`` is None or
    fewer than H + 1 tokens qualify). ``lam`` is chosen on a random ``holdout`` share of the
    rows (highest mean cosine of ``A_h E`` vs ``F_h`` when fitted on the rest), trying
    ``lams`` from strong to weak (each solve warm-starts the next) and stopping after
    ``patience`` worse ones; then the table is refitted on every row with that ``lam``.

    Args:
        e0: [V, H] the unfitted table.
        bags: [n, V] row-normalised token bags (:func:`token_bags`), n >= 2.
        targets: [n, H] the full model's embeddings of the same queries.
        weights: [n] row weights W (default 1); the held-back cosine is unweighted.
        solve: the lams and the solver's settings (:class:`RidgeSolve`; default its defaults).

    Returns:
        (table [V, H] float32, :class:`TableFit`). Serve the table as is: the query side
        takes the plain mean of its rows.
    """
    from lr_opensearch.progress import progress_bar

    s = solve or RidgeSolve()
    holdout, seed, patience, maxiter, tol = s.holdout, s.seed, s.patience, s.maxiter, s.tol
    map_min_queries = s.map_min_queries
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
    lams = sorted(s.lams, reverse=True)
    prior, prior_rows = e0f, 0
    with progress_bar(total=len(lams) + 2, desc="fit table", unit="solve", disable=not progress) as bar:
        if map_min_queries is not None:
            prior, prior_rows = _prior(a_tr, f_tr, e0f, lams[0], map_min_queries, maxiter, tol)
        bar.update(1)
        best, best_cos, table, worse = lams[0], -np.inf, prior, 0
        warm = prior
        for lam in lams:
            fitted, it = _solve(a_tr, f_tr, prior, lam, warm, maxiter=maxiter, tol=tol)
            cos = per_lam[f"{lam:g}"] = mean_cosine(a_h @ fitted, f_h)
            logger.debug("lam=%g: held-back cosine %.4f (%d CG iterations)", lam, cos, it)
            bar.update(1)
            bar.set_postfix(lam=f"{lam:g}", cos=f"{cos:.4f}")
            if cos > best_cos:
                best, best_cos, table, worse = lam, cos, fitted, 0
            elif (worse := worse + 1) >= patience:
                break
            warm = fitted
        table, _ = _solve(bags, f, prior, best, table, maxiter=maxiter, tol=tol)
        bar.update(bar.total - bar.n)
    rows = int(np.count_nonzero(np.diff(bags.tocsc().indptr)))
    return table.astype(np.float32), TableFit(best, cos_e0, best_cos, per_lam, rows, prior_rows)


def _prior(bags: sp.csr_matrix, targets: np.ndarray, e0: np.ndarray, lam: float, min_queries: int,
           maxiter: int, tol: float) -> tuple[np.ndarray, int]:
    """(the mapped prior, the number of rows that taught it), or (``e0``, 0) when fewer than
    H + 1 tokens are used by ``min_queries`` queries."""
    rows = np.flatnonzero(np.diff(bags.tocsc().indptr) >= min_queries)
    if len(rows) <= e0.shape[1]:
        logger.info("prior: only %d tokens in >= %d queries; the unfitted table is the prior",
                    len(rows), min_queries)
        return e0, 0
    first, _ = _solve(bags, targets, e0, lam, e0, maxiter=maxiter, tol=tol)
    return mapped_prior(e0, first, rows), len(rows)
