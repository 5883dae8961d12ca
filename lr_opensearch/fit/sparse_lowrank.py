"""A low-rank correction of the sparse projection, fitted on cached states (issue 48, 1b).

The document side of LR sparse is ``s_t(d) = log1p(relu(max_p h_p(d) . W_t + b_t))``. This
module fits ``W + up @ down^T`` (``model.sparse_lowrank.LowRankCorrection``, rank r) with
the backbone frozen: the projection's inputs ``h_p(d)`` of every document are computed once
(``DocEncoder.encode_states``, float16) and every step reads them. Loss per batch of
pseudo-queries (``fit.sparse.QuerySet``: IDF query vectors and their source documents):

    L = CE(softmax_d(q . s(d)), source) + flops * FLOPS(s) / FLOPS(s0)

over the batch's documents: the queries' sources (in-batch negatives) plus ``negatives``
documents drawn at random. Only the columns the loss reads are projected: the union of the
batch's query tokens, plus ``flops_columns`` vocabulary columns drawn at random for the
FLOPS term (sum over terms of the squared mean weight, Paria et al. 2020; scaled up to the
vocabulary and divided by the unfitted head's on the same sample, so that ``flops``
reads the same on every corpus). ``up`` starts at zero: step 0 is the head as it is.

``pairs="masked"``: a query's source document is scored without its positions that hold
one of the query's tokens (the other documents as they are), so that the document must
reach the query's terms from its other words (expansion) instead of its literal copies:
the pseudo-queries are verbatim cuts of their documents.

Never reads judgments: queries and positives come from the fit corpus's documents.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from lr_opensearch.errors import ConfigError
from lr_opensearch.fit.sparse import LowRankFitConfig, LowRankFitStats, QuerySet, sample_documents

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class StateCache:
    """Documents' projection inputs, flat: document i is rows ``offsets[i]:offsets[i+1]``.

    Attributes:
        states: [P, H] float16.
        tokens: [P] int token ids of the positions.
        offsets: [N + 1] int64.
    """

    states: np.ndarray
    tokens: np.ndarray
    offsets: np.ndarray

    @classmethod
    def of(cls, states: list[np.ndarray], tokens: list[np.ndarray]) -> StateCache:
        offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])]).astype(np.int64)
        return cls(np.concatenate(states), np.concatenate(tokens), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def padded(self, docs: np.ndarray, limit: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """([D, T, H] float32 states, [D, T] token ids (-1: padding), [D, T] bool real) of
        ``docs``' first ``limit`` positions."""
        lengths = np.minimum(self.offsets[docs + 1] - self.offsets[docs], limit)
        width = max(int(lengths.max()), 1)
        states = np.zeros((len(docs), width, self.states.shape[1]), np.float32)
        tokens = np.full((len(docs), width), -1, np.int64)
        for row, (d, n) in enumerate(zip(docs, lengths, strict=True)):
            start = self.offsets[d]
            states[row, :n] = self.states[start : start + n]
            tokens[row, :n] = self.tokens[start : start + n]
        return torch.from_numpy(states), torch.from_numpy(tokens), torch.from_numpy(tokens >= 0)


def _weights(logits: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
    """[D, T, C] logits, [D, T] real positions -> [D, C] ``log1p(relu(max_p))``."""
    return torch.log1p(torch.relu(logits.masked_fill(~real.unsqueeze(-1), -torch.inf).amax(1)))


def _flops(s: torch.Tensor) -> torch.Tensor:
    return s.mean(0).square().sum()


def _step_loss(cache: StateCache, queries: QuerySet, rows: np.ndarray,
               projection: tuple[torch.Tensor, torch.Tensor | None], factors: tuple[torch.Tensor, torch.Tensor],
               config: LowRankFitConfig, rng: np.random.Generator) -> tuple[torch.Tensor, float]:
    """One batch's loss and its FLOPS ratio (see the module docstring); ``projection`` is
    (W [V, H], b [V] or None), ``factors`` (up [V, r], down [H, r])."""
    (base, bias), (up, down) = projection, factors
    batch = queries.vectors[rows]
    sources = queries.sources[rows]
    extra = rng.choice(len(cache), min(len(cache), config.negatives), replace=False)
    docs, target = np.unique(np.concatenate([sources, extra]), return_inverse=True)
    qcols = np.unique(batch.indices)
    sampled = rng.choice(base.shape[0], min(base.shape[0], config.flops_columns), replace=False)
    cols = torch.from_numpy(np.concatenate([qcols, sampled]))
    states, tokens, real = cache.padded(docs, config.max_positions)
    with torch.no_grad():
        fixed = states @ base[cols].t() + (0 if bias is None else bias[cols])  # [D, T, C]
    logits = fixed + (states @ down) @ up[cols].t()
    nq = len(qcols)
    q = torch.zeros(len(rows), nq)
    owner = np.repeat(np.arange(len(rows)), np.diff(batch.indptr))
    local = np.searchsorted(qcols, batch.indices)
    q[torch.from_numpy(owner), torch.from_numpy(local)] = torch.from_numpy(batch.data)
    s = _weights(logits, real)  # [D, C]
    scores = q @ s[:, :nq].t()  # [B, D]
    own = torch.from_numpy(target[: len(rows)])
    if config.pairs == "masked":  # the source scored without the positions holding query tokens
        qtok = torch.from_numpy(qcols)
        mine = torch.zeros(len(rows), nq, dtype=torch.bool)
        mine[torch.from_numpy(owner), torch.from_numpy(local)] = True
        hit = ((tokens[own].unsqueeze(-1) == qtok) & mine.unsqueeze(1)).any(-1)  # [B, T]
        masked = _weights(logits[own][..., :nq], real[own] & ~hit)  # [B, nq]
        scores = scores.scatter(1, own.unsqueeze(1), (q * masked).sum(1, keepdim=True))
    loss = torch.nn.functional.cross_entropy(scores, own)
    with torch.no_grad():
        s0 = _weights(fixed[..., nq:], real)
    ratio = _flops(s[:, nq:]) / _flops(s0).clamp(min=1e-12)
    return loss + config.flops * ratio, float(ratio.detach())


def fit_lowrank(cache: StateCache, queries: QuerySet, weight: torch.Tensor, bias: torch.Tensor | None,
                config: LowRankFitConfig, *, seed: int = 0,
                progress: bool = True) -> tuple[torch.Tensor, torch.Tensor, LowRankFitStats]:
    """Fit ``up`` [V, r] and ``down`` [H, r] (see the module docstring).

    Args:
        cache: the documents' projection inputs; ``queries.sources`` index it.
        queries: IDF query vectors and their source documents.
        weight: [V, H] the projection as it is; bias: [V] or None.
        config: the fit's settings.

    Returns:
        (up, down, stats).
    """
    from lr_opensearch.progress import progress_bar

    if len(queries) < config.batch:
        raise ConfigError(f"the low-rank sparse fit needs at least {config.batch} pseudo-queries with "
                          f"a source document, got {len(queries)}")
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    base = weight.detach().float()
    up = torch.zeros(base.shape[0], config.rank, requires_grad=True)
    down = (torch.randn(base.shape[1], config.rank, generator=gen) / base.shape[1] ** 0.5).requires_grad_()
    optimizer = torch.optim.Adam([up, down], lr=config.lr)
    order = rng.permutation(len(queries))
    losses: list[float] = []
    ratio = 1.0
    with progress_bar(total=config.steps, desc="sparse low-rank fit", unit="step", disable=not progress) as bar:
        for step in range(config.steps):
            at = (step * config.batch) % len(order)
            rows = order[at : at + config.batch]
            loss, ratio = _step_loss(cache, queries, rows, (base, bias), (up, down), config, rng)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
            bar.update(1)
    tail = max(1, len(losses) // 10)
    stats = LowRankFitStats(config=asdict(config), documents=len(cache), queries=len(queries),
                            loss_first=float(np.mean(losses[:tail])), loss_last=float(np.mean(losses[-tail:])),
                            flops_ratio_last=ratio, fit_seconds=time.perf_counter() - start)
    logger.info("sparse low-rank fit: %d documents, %d queries, %d steps; loss %.3f -> %.3f, FLOPS x%.2f, "
                "%.0f s", stats.documents, stats.queries, config.steps, stats.loss_first, stats.loss_last,
                ratio, stats.fit_seconds)
    return up.detach(), down.detach(), stats


def fit_sparse_lowrank(encoder: Any, inputs: Any, config: LowRankFitConfig, *, seed: int = 0,
                       progress: bool = True) -> tuple[Any, LowRankFitStats]:
    """Encode the fit's documents' projection inputs and fit the correction.

    Args:
        encoder: the bundle's ``DocEncoder`` (its model without a correction).
        inputs: ``fit.tables.FitInputs`` (documents, token bags, sources, IDF weights).

    Returns:
        (``model.sparse_lowrank.LowRankCorrection``, stats).
    """
    from lr_opensearch.instructions import document_text
    from lr_opensearch.model.sparse_lowrank import LowRankCorrection

    t0 = time.perf_counter()
    keep, doc_rows = sample_documents(len(inputs.docs), config.max_docs, seed)
    states, tokens = encoder.encode_states([document_text(*inputs.docs[int(i)]) for i in keep])
    encode_seconds = time.perf_counter() - t0
    queries = QuerySet.build(inputs.bags, inputs.sources, inputs.idf, doc_rows)
    weight, bias = encoder.model.sparse_projection()
    up, down, stats = fit_lowrank(StateCache.of(states, tokens), queries, weight, bias, config,
                                  seed=seed, progress=progress)
    stats.encode_seconds = encode_seconds
    return LowRankCorrection(up, down), stats
