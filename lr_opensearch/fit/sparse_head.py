"""The per-term scale and bias fit itself (torch, CPU): see ``fit.sparse`` for the method."""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

from lr_opensearch.errors import ConfigError
from lr_opensearch.fit.sparse import QuerySet, SparseFitConfig, SparseFitStats, sample_documents

logger = logging.getLogger(__name__)


def apply_affine(maxima: torch.Tensor, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``log1p(relu(exp(u) * z + c))``: [N, K] maxima with [K] u and c -> [N, K] weights."""
    return torch.log1p(torch.relu(torch.exp(u) * maxima.float() + c))


def _batch_scores(z: torch.Tensor, queries: sp.csr_matrix, u: torch.Tensor, c: torch.Tensor,
                  ) -> torch.Tensor:
    """[B, N] scores of a batch of queries against every document, from its tokens' columns."""
    cols, local = np.unique(queries.indices, return_inverse=True)
    q = torch.zeros(queries.shape[0], len(cols))
    owner = np.repeat(np.arange(queries.shape[0]), np.diff(queries.indptr))
    q[torch.from_numpy(owner), torch.from_numpy(local.reshape(-1))] = torch.from_numpy(queries.data)
    idx = torch.from_numpy(cols)
    weights = apply_affine(z.index_select(1, idx), u[idx], c[idx])  # [N, |U|]
    return q @ weights.t()


def _flops(z: torch.Tensor, u: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return apply_affine(z, u, c).mean(0).square().sum()


@torch.no_grad()
def _mrr(z: torch.Tensor, queries: QuerySet, u: torch.Tensor, c: torch.Tensor, batch: int = 256) -> float:
    """Mean reciprocal rank of each query's source document among all documents."""
    if len(queries) == 0:
        return float("nan")
    total = 0.0
    for s in range(0, len(queries), batch):
        scores = _batch_scores(z, queries.vectors[s : s + batch], u, c)
        target = torch.from_numpy(queries.sources[s : s + batch])
        own = scores.gather(1, target.unsqueeze(1))
        total += float((1.0 / (1 + (scores > own).sum(1).float())).sum())
    return total / len(queries)


@torch.no_grad()
def _terms_per_doc(z: torch.Tensor, u: torch.Tensor, c: torch.Tensor) -> float:
    return float((apply_affine(z, u, c) > 0).sum(1).float().mean())


def fit_term_affine(maxima: np.ndarray, queries: QuerySet, config: SparseFitConfig, *,
                    seed: int = 0, progress: bool = True) -> tuple[np.ndarray, np.ndarray, SparseFitStats]:
    """Fit a per-term scale and bias of the sparse head (see the module docstring).

    Args:
        maxima: [N, V] the documents' pre-activation maxima (``DocEncoder.encode_maxima``).
        queries: the IDF query vectors and their source rows in ``maxima``.
        config: the fit's settings.
        seed: seed of the hold-out, the batches and the FLOPS documents.
        progress: a progress bar over steps.

    Returns:
        (scale [V] float32 > 0, bias [V] float32, stats).
    """
    from lr_opensearch.progress import progress_bar

    if len(queries) < 10:
        raise ConfigError(f"the sparse fit needs at least 10 pseudo-queries with a source document, "
                          f"got {len(queries)}")
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    z = torch.from_numpy(np.ascontiguousarray(maxima))
    n_docs, vocab = z.shape
    order = rng.permutation(len(queries))
    n_hold = int(round(config.holdout * len(queries)))
    hold = QuerySet(queries.vectors[order[:n_hold]], queries.sources[order[:n_hold]])
    train = order[n_hold:]
    u = torch.zeros(vocab, requires_grad=True)
    c = torch.zeros(vocab, requires_grad=True)
    probe = torch.from_numpy(rng.choice(n_docs, min(n_docs, 1024), replace=False))
    with torch.no_grad():
        flops0 = float(_flops(z[probe], u, c))
        mrr0, terms0 = _mrr(z, hold, u, c), _terms_per_doc(z[probe], u, c)
    optimizer = torch.optim.Adam([u, c], lr=config.lr)
    steps = config.epochs * -(-len(train) // config.batch)
    with progress_bar(total=steps, desc="sparse fit", unit="step", disable=not progress) as bar:
        for _ in range(config.epochs):
            rng.shuffle(train)
            for s in range(0, len(train), config.batch):
                rows = train[s : s + config.batch]
                scores = _batch_scores(z, queries.vectors[rows], u, c)
                loss = torch.nn.functional.cross_entropy(scores, torch.from_numpy(queries.sources[rows]))
                docs = torch.from_numpy(rng.choice(n_docs, min(n_docs, config.flops_docs), replace=False))
                loss = loss + config.flops * _flops(z[docs], u, c) / max(flops0, 1e-12)
                loss = loss + config.anchor * (u.square().sum() + c.square().sum()) / len(train)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                bar.update(1)
    u, c = u.detach(), c.detach()
    with torch.no_grad():
        stats = SparseFitStats(
            config=asdict(config), documents=n_docs, queries=len(train), holdout_queries=n_hold,
            holdout_mrr_before=mrr0, holdout_mrr_after=_mrr(z, hold, u, c),
            terms_per_doc_before=terms0, terms_per_doc_after=_terms_per_doc(z[probe], u, c),
            flops_ratio=float(_flops(z[probe], u, c)) / max(flops0, 1e-12),
            fit_seconds=time.perf_counter() - start)
    logger.info("sparse fit: %d documents, %d queries; held-back MRR %.4f -> %.4f, terms per "
                "document %.0f -> %.0f, FLOPS x%.2f, %.1f s", n_docs, len(train),
                stats.holdout_mrr_before, stats.holdout_mrr_after, stats.terms_per_doc_before,
                stats.terms_per_doc_after, stats.flops_ratio, stats.fit_seconds)
    return torch.exp(u).numpy(), c.numpy(), stats


def fit_sparse_head(encoder: Any, inputs: Any, config: SparseFitConfig, *, seed: int = 0,
                    progress: bool = True) -> tuple[Any, SparseFitStats]:
    """Encode the fit's documents and fit their per-term scale and bias.

    Args:
        encoder: the bundle's ``DocEncoder`` (its model's maxima before any scale and bias).
        inputs: ``fit.tables.FitInputs`` (documents, token bags, sources, IDF weights).
        config: the fit's settings.

    Returns:
        (``model.term_affine.TermAffine``, stats).
    """
    from lr_opensearch.instructions import document_text
    from lr_opensearch.model.term_affine import TermAffine

    t0 = time.perf_counter()
    keep, doc_rows = sample_documents(len(inputs.docs), config.max_docs, seed)
    maxima = _encode(encoder, [document_text(*inputs.docs[int(i)]) for i in keep], progress)
    encode_seconds = time.perf_counter() - t0
    queries = QuerySet.build(inputs.bags, inputs.sources, inputs.idf, doc_rows)
    scale, bias, stats = fit_term_affine(maxima, queries, config, seed=seed, progress=progress)
    stats.encode_seconds = encode_seconds
    vocab = encoder.model.vocab_size
    if len(scale) < vocab:  # the model's vocabulary padded beyond the tokenizer's: untouched
        scale = np.concatenate([scale, np.ones(vocab - len(scale), np.float32)])
        bias = np.concatenate([bias, np.zeros(vocab - len(bias), np.float32)])
    return TermAffine(torch.from_numpy(scale), torch.from_numpy(bias)), stats


def _encode(encoder: Any, texts: list[str], progress: bool, chunk: int = 256) -> np.ndarray:
    from lr_opensearch.progress import progress_bar

    parts = []
    with progress_bar(total=len(texts), desc="sparse fit documents", unit="doc",
                      disable=not progress) as bar:
        for s in range(0, len(texts), chunk):
            parts.append(encoder.encode_maxima(texts[s : s + chunk]))
            bar.update(len(parts[-1]))
    return np.concatenate(parts)
