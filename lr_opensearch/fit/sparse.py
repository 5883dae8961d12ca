"""Fitting the document side of the sparse leg: a per-term scale and bias (issue 48, 1a);
the settings of the low-rank correction of the projection (1b, ``fit.sparse_lowrank``).

The query side of LR sparse is fixed: a query's distinct tokens, each weighted by its IDF
(``fit.tables.idf_weights``), no model. The document side is the backbone's sparse head,
``s_t(d) = log1p(relu(z_t(d)))`` with ``z_t(d)`` the max over the document's positions of
the head's logit of term t. For the packaged encoders that head is the input embedding
matrix (``tied``), which nobody trained to predict query terms. This module fits

    s'_t(d) = log1p(relu(a_t * z_t(d) + c_t)),   a_t = exp(u_t) > 0

(``model.term_affine.TermAffine``) with the backbone frozen, on the table fit's own
pseudo-queries: each pseudo-query's IDF vector ``q`` should score its source document above
every other sampled document,

    L = mean_q CE(softmax_d(q . s'(d)), source) + flops * FLOPS(s') / FLOPS(s)
        + anchor * sum_t (u_t^2 + c_t^2) / n

with FLOPS(s) = sum_t (mean_d s_t(d))^2 over a sample of documents (Paria et al. 2020, the
SPLADE regulariser), relative to the head as it was so that its weight reads the same on
every corpus; the ``anchor`` (a Gaussian prior over the n training queries) keeps terms
that few pseudo-queries name near ``a = 1, c = 0``. As
``a_t z + c_t`` is increasing, the max over positions commutes with it: the documents'
maxima ``z`` ([N, V], one encoder pass, ``DocEncoder.encode_maxima``) are all the fit needs,
and the scores of a batch need only the columns of its queries' tokens. Every sampled
document is a negative of every query (the corpus softmax, not in-batch only).

Never reads judgments: queries and positives come from the fit corpus's documents.
This module (numpy) holds the settings, the query set and the stats; the fit itself is
``fit.sparse_head`` (torch).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from lr_opensearch.errors import ConfigError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SparseFitConfig:
    """Settings of the per-term scale and bias fit.

    Attributes:
        epochs: passes over the pseudo-queries.
        batch: queries per step.
        lr: Adam step size on u = log a and c.
        flops: weight of the FLOPS penalty relative to the unfitted head's.
        anchor: weight of sum(u^2 + c^2) / n (n training queries): a Gaussian prior pulling
            terms few queries name back to the unfitted head.
        flops_docs: documents per step the FLOPS penalty is measured on.
        holdout: share of pseudo-queries held back to report the source document's rank.
        max_docs: cap on the documents encoded (a uniform sample of the fit's documents).
    """

    epochs: int = 3
    batch: int = 256
    lr: float = 0.05
    flops: float = 1.0
    anchor: float = 1.0
    flops_docs: int = 512
    holdout: float = 0.05
    max_docs: int = 6000

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch < 1 or not self.lr > 0 or self.flops < 0 or self.anchor < 0:
            raise ConfigError(f"SparseFitConfig: epochs and batch must be >= 1, lr > 0, flops and "
                              f"anchor >= 0; got {self}")


@dataclass
class SparseFitStats:
    """What the sparse fit did (the manifest's ``fit.sparse_doc``)."""

    config: dict[str, Any]
    documents: int
    queries: int
    holdout_queries: int
    holdout_mrr_before: float
    holdout_mrr_after: float
    terms_per_doc_before: float
    terms_per_doc_after: float
    flops_ratio: float
    encode_seconds: float = 0.0
    fit_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class QuerySet:
    """IDF query vectors and their positives.

    Attributes:
        vectors: [n, V] csr, row i = the IDF weights of query i's distinct tokens.
        sources: [n] the row in the maxima of each query's source document.
    """

    vectors: sp.csr_matrix
    sources: np.ndarray

    @classmethod
    def build(cls, bags: sp.csr_matrix, sources: np.ndarray, idf: np.ndarray,
              doc_rows: np.ndarray) -> QuerySet:
        """From token bags (any nonzero = a token of the query), their source documents'
        indices (-1: none), the IDF weights [V] and ``doc_rows`` (document index -> row of
        the maxima, -1: not encoded). Queries without an encoded source are left out."""
        rows = np.where(sources >= 0, doc_rows[np.clip(sources, 0, None)], -1)
        keep = np.flatnonzero(rows >= 0)
        vectors = bags[keep].tocsr(copy=True)
        vectors.data = idf[vectors.indices].astype(np.float32)
        return cls(vectors, rows[keep].astype(np.int64))

    def __len__(self) -> int:
        return int(self.vectors.shape[0])


def sample_documents(n: int, max_docs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(the documents a sparse fit encodes: all of ``n``, else ``max_docs`` drawn uniformly,
    sorted; [n] each document's row among them, -1 for one left out)."""
    keep = np.arange(n)
    if n > max_docs:
        keep = np.sort(np.random.default_rng(seed).choice(n, max_docs, replace=False))
    rows = np.full(n, -1, np.int64)
    rows[keep] = np.arange(len(keep))
    return keep, rows


#: the sparse fit of ``lr bundle build --fit-corpus`` (None: the head as it is)
DEFAULT_SPARSE_FIT: SparseFitConfig | None = None


PAIRS = ("cut", "masked")


@dataclass(frozen=True)
class LowRankFitConfig:
    """Settings of the low-rank fit.

    Attributes:
        rank: r, the correction's rank.
        steps: optimizer steps (each a batch of queries); 100, the one length screened on
            SciFact train (docs/results/sparse.md; 200-300 lost more on ADI).
        batch: queries per step.
        negatives: random documents added to each step's in-batch documents.
        lr: Adam step size.
        flops: weight of the FLOPS penalty relative to the unfitted head's.
        flops_columns: vocabulary columns drawn per step for the FLOPS term.
        pairs: "cut" (the pseudo-query against its whole document) or "masked" (its
            document without the positions that hold its tokens).
        max_positions: positions of a document read (its first ones).
        max_docs: cap on the documents encoded (a uniform sample of the fit's documents).
    """

    rank: int = 32
    steps: int = 100
    batch: int = 32
    negatives: int = 32
    lr: float = 1e-3
    flops: float = 1.0
    flops_columns: int = 1024
    pairs: str = "cut"
    max_positions: int = 256
    max_docs: int = 6000

    def __post_init__(self) -> None:
        if min(self.rank, self.steps, self.batch, self.max_positions) < 1 or self.negatives < 0 \
                or not self.lr > 0 or self.flops < 0 or self.flops_columns < 1:
            raise ConfigError(f"LowRankFitConfig: rank, steps, batch and max_positions must be >= 1, "
                              f"negatives >= 0, lr > 0, flops >= 0, flops_columns >= 1; got {self}")
        if self.pairs not in PAIRS:
            raise ConfigError(f"LowRankFitConfig: pairs must be one of {', '.join(PAIRS)}, got {self.pairs!r}")


@dataclass
class LowRankFitStats:
    """What the low-rank fit did (the manifest's ``fit.sparse_lowrank``)."""

    config: dict[str, Any]
    documents: int
    queries: int
    loss_first: float
    loss_last: float
    flops_ratio_last: float
    encode_seconds: float = 0.0
    fit_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: the low-rank fit of ``lr bundle build --fit-corpus`` (None: the projection as it is)
DEFAULT_SPARSE_LOWRANK: LowRankFitConfig | None = None
