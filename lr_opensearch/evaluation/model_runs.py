"""The evaluation runs with a model at query time: rerank stages and XTR, timed per stage.

* ``bm25+rerank`` / ``lr-hybrid+rerank``: that first stage's top ``EvalConfig.rerank_depth``
  hits rescored by ``EvalConfig.reranker`` (``full``: the LR bundle's full model; ``ur2n``:
  the UR²N bundle's true/false reranker).
* ``xtr`` / ``xtr+rerank``: XTR retrieval on the UR²N token index (query token vectors from
  the UR²N model), then the same model's reranker: retrieve then rerank with one model.

Every such run gets a :class:`StageClock`: ``encode`` (the UR²N query forward), ``rerank``
(the reranker's forwards); the rest of the wall time is the ``first_stage``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from lr_opensearch import legs
from lr_opensearch.errors import ConfigError
from lr_opensearch.evaluation.beir import indexable_docs
from lr_opensearch.evaluation.config import MODEL_RUNS, RERANKERS, XTR_RUN, EvalConfig
from lr_opensearch.options import choice

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.evaluation.beir import Dataset
    from lr_opensearch.search.rerank import Reranker
    from lr_opensearch.search.retriever import Retriever



@dataclass
class StageClock:
    """Seconds spent per stage of one run (``encode``, ``rerank``) across its queries."""

    seconds: dict[str, float] = field(default_factory=dict)

    def timed(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` with its wall time added to ``stage``."""

        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - started

        return run

    def per_query_ms(self, total_s: float, queries: int) -> dict[str, float]:
        """ms per query per stage; ``first_stage`` = the total less the timed stages."""
        out = {"first_stage": total_s - sum(self.seconds.values()), **self.seconds}
        return {k: 1000.0 * v / max(queries, 1) for k, v in out.items()}


@dataclass
class TimedReranker:
    """A reranker whose ``score`` time goes to a clock's ``rerank`` stage."""

    reranker: Reranker
    clock: StageClock

    @property
    def name(self) -> str:
        return str(self.reranker.name)

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return list(self.clock.timed("rerank", self.reranker.score)(query, texts))


def hits_of(result: list[Any]) -> list[list[tuple[str, float]]]:
    """Hit lists as ``[(doc id, score)]`` lists (a run's rows)."""
    return [[(h.doc_id, h.score) for h in hits] for hits in result]


def model_searches(client: Any, bundle: Bundle, index: str, dataset: Dataset,
                   config: EvalConfig, instruction: str | None,
                   clocks: dict[str, StageClock]) -> dict[str, Any]:
    """The runs with a model at query time (``+rerank``, ``xtr``); models load once, here."""
    from lr_opensearch.search import Retriever

    k, depth = config.depth, config.rerank_depth
    wanted = [n for n in config.runs if n in MODEL_RUNS]
    if not wanted:
        return {}
    choice("reranker", config.reranker, RERANKERS)
    ur2n = _ur2n_model(config) if config.reranker == "ur2n" or any(
        n.startswith(XTR_RUN) for n in wanted) else None
    searches: dict[str, Any] = {}
    for name in wanted:
        clock = clocks.setdefault(name, StageClock())
        if name.startswith(XTR_RUN):
            searches[name] = _xtr_search(client, dataset, config, ur2n, clock, name, depth)
            continue
        if config.reranker == "ur2n":
            from lr_opensearch.ur2n.model import UR2NReranker

            assert ur2n is not None  # loaded above for reranker ur2n
            scorer: Reranker = UR2NReranker(ur2n)
        else:
            from lr_opensearch.model.full_model import FullModelReranker

            scorer = FullModelReranker(bundle, instruction)
        reranked = Retriever(bundle, client, index, candidates=k, instruction=instruction,
                             rerank=TimedReranker(scorer, clock), rerank_depth=depth,
                             check_bundle=False)
        baseline = legs.baseline()
        mode = baseline.name if name.startswith(baseline.run + "+") else legs.HYBRID
        searches[name] = partial(_reranked, reranked, k, mode)
    return searches


def _reranked(retriever: Retriever, k: int, mode: str, texts: list[str]) -> list[list[tuple[str, float]]]:
    return hits_of(retriever.search_batch(texts, k, mode=mode))


def _ur2n_model(config: EvalConfig) -> Any:
    from lr_opensearch.ur2n.model import UR2NModel

    if not config.ur2n_bundle:
        raise ConfigError("the xtr runs and --reranker ur2n need a UR²N bundle (--ur2n-bundle)")
    return UR2NModel.from_bundle(config.ur2n_bundle)


def token_index_name(dataset: Dataset, bundle_id: str) -> str:
    """The default UR²N token index of a dataset: ``lr-tokens-<dataset>-<bundle id>``."""
    slug = re.sub(r"[^a-z0-9]+", "-", dataset.name.lower()).strip("-") or "dataset"
    return f"lr-tokens-{slug}-{bundle_id[:10]}"


def _xtr_search(client: Any, dataset: Dataset, config: EvalConfig, model: Any,
                clock: StageClock, name: str, depth: int) -> Any:
    """XTR retrieval (``xtr``) or XTR then the same model's reranker (``xtr+rerank``)."""
    from lr_opensearch.search.rerank import RerankStage
    from lr_opensearch.ur2n.bundle import load_ur2n_bundle
    from lr_opensearch.ur2n.model import UR2NReranker
    from lr_opensearch.ur2n.xtr import N_TOKENS_FIELD, XTRRetriever

    assert config.ur2n_bundle  # _ur2n_model checked it
    ur2n = load_ur2n_bundle(config.ur2n_bundle, verify=False)
    index = config.token_index or token_index_name(dataset, ur2n.bundle_id)
    command = (f"`python -m ingest.token_index {dataset.corpus_path} --ur2n-bundle "
               f"{config.ur2n_bundle} --index {index}`")
    records = 0
    if client.indices.exists(index=index):
        records = int(client.count(index=index, body={"query": {"exists": {
            "field": N_TOKENS_FIELD}}})["count"])
    wanted = indexable_docs(dataset)
    if records != wanted:
        raise ConfigError(f"token index {index!r} holds {records} of the {wanted} documents "
                          f"of {dataset.name}; write it with {command}")
    encode = clock.timed("encode", partial(model.token_embeddings, kind="query"))
    rerank = TimedReranker(UR2NReranker(model), clock) if name == "xtr+rerank" else None
    retriever = XTRRetriever(client, index, encode=encode, bundle_id=ur2n.bundle_id,
                             token_dim=ur2n.config.token_dim,
                             rerank=RerankStage(rerank, depth=depth) if rerank is not None else None)
    return lambda t: hits_of(retriever.search_batch(t, config.depth, source=False))
