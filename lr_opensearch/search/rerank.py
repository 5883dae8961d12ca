"""A second stage: rerank the first stage's top hits with a heavier scorer.

A reranker is anything with ``name`` and ``score(query, texts) -> scores`` (higher is more
relevant; ``lr_opensearch.model.full_model`` has the bundle's full model as one). The stage
lives on the query side and imports no torch: a search without a reranker stays model-free.

:class:`RerankStage` takes the first ``depth`` hits, scores their ``title + text`` in
batches of ``batch_size`` and orders them by that score (ties: first-stage order); the
hits below ``depth`` keep their order after them. With ``budget_s``, no new batch starts
once the budget is spent: the hits not scored keep their first-stage order after the
scored ones (logged once per search), so a slow reranker degrades a search instead of
stalling it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from lr_opensearch.errors import ConfigError
from lr_opensearch.options import DEFAULT_RERANK_DEPTH
from lr_opensearch.search.hits import Hit

logger = logging.getLogger(__name__)


class Reranker(Protocol):
    """What a rerank stage needs from a scorer."""

    @property
    def name(self) -> str:
        """What the scorer is, for reports ("full", "ur2n")."""
        ...

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        """One relevance score per text for ``query`` (higher is better)."""
        ...


def hit_text(hit: Hit) -> str:
    """The text a reranker reads for a hit: its title and text, as the encoder reads them."""
    from lr_opensearch.instructions import document_text

    src = hit.source or {}
    return document_text(str(src.get("title") or ""), str(src.get("text") or ""))


@dataclass(frozen=True)
class RerankStage:
    """Rerank the top ``depth`` hits with ``reranker`` (see the module docstring)."""

    reranker: Reranker
    depth: int = DEFAULT_RERANK_DEPTH
    batch_size: int = 16
    budget_s: float | None = None

    def __post_init__(self) -> None:
        if self.depth < 1 or self.batch_size < 1:
            raise ConfigError(f"rerank depth and batch_size must be >= 1, got {self.depth}, "
                              f"{self.batch_size}")
        if self.budget_s is not None and self.budget_s <= 0:
            raise ConfigError(f"rerank budget_s must be > 0 seconds, got {self.budget_s}")

    def apply(self, query: str, hits: Sequence[Hit]) -> list[Hit]:
        """The hits reordered; reranked ones carry the reranker's ``score`` and their
        ``first_stage_score``; ranks renumbered from the first hit's rank."""
        if not hits:
            return []
        if any(h.source is None for h in hits[: self.depth]):
            raise ConfigError("reranking reads the hits' title and text: search with their "
                              "_source (source=None or a list with title and text)")
        top, rest = list(hits[: self.depth]), list(hits[self.depth :])
        scores: list[float] = []
        started = time.perf_counter()
        for start in range(0, len(top), self.batch_size):
            if self.budget_s is not None and time.perf_counter() - started > self.budget_s:
                logger.info("rerank (%s): budget of %.2f s spent after %d of %d hits; the "
                            "others keep their first-stage order", self.reranker.name,
                            self.budget_s, len(scores), len(top))
                break
            batch = top[start : start + self.batch_size]
            got = self.reranker.score(query, [hit_text(h) for h in batch])
            if len(got) != len(batch):
                raise ConfigError(f"reranker {self.reranker.name} gave {len(got)} scores for "
                                  f"{len(batch)} texts")
            scores += [float(x) for x in got]
        scored = sorted(range(len(scores)), key=lambda i: -scores[i])  # stable: ties keep order
        order = [(top[i], scores[i]) for i in scored] + [(h, None) for h in top[len(scores):]]
        first = hits[0].rank
        out: list[Hit] = []
        for pos, (h, s) in enumerate([*order, *((h, None) for h in rest)]):
            if s is None:
                out.append(dataclasses.replace(h, rank=first + pos))
            else:
                out.append(dataclasses.replace(h, rank=first + pos, score=s,
                                               first_stage_score=h.score))
        return out


def as_stage(rerank: Reranker | RerankStage | None, depth: int = DEFAULT_RERANK_DEPTH, budget_s: float | None = None) -> RerankStage | None:
    """A RerankStage from a stage, a reranker, or None."""
    if rerank is None or isinstance(rerank, RerankStage):
        return rerank
    if not hasattr(rerank, "score"):
        raise ConfigError(f"rerank must be a reranker (with score(query, texts)) or a "
                          f"RerankStage, got {type(rerank).__name__}")
    return RerankStage(rerank, depth=depth, budget_s=budget_s)
