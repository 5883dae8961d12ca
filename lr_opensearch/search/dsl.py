"""The exact requests a search sends, without sending them (``Retriever.dsl``, ``lr search
--dsl``): to paste into Dev Tools or a search-relevance comparison. The bodies come from the
retriever's own body builders (``leg_body``, ``server_body``, the one query's ``body``), so
what is shown is what a search sends (with ``_source`` inline where a search fetches it after).

The retriever imports this module (``Retriever.dsl``), not the other way round: a plan
needs only the retriever's public request builders, named by :class:`Planner`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from lr_opensearch.engine.adapter import EngineAdapter
from lr_opensearch.options import CALIBRATED
from lr_opensearch.search.calibrated import OneQuery, SubQueries
from lr_opensearch.search.request import SearchOptions, SearchRequest, check_texts


class Planner(Protocol):
    """What a plan reads of a :class:`~lr_opensearch.search.retriever.Retriever`: the same
    builders its searches call."""

    index: str
    adapter: EngineAdapter
    options: SearchOptions
    one_query: OneQuery

    def request(self, opts: SearchOptions) -> SearchRequest: ...
    def inputs(self, texts: Sequence[str], legs: Sequence[str],
               instruction: str | None = None) -> Mapping[str, Any]: ...
    def sub_queries(self, inputs: Mapping[str, Any], req: SearchRequest,
                    n: int) -> list[SubQueries]: ...
    def shard_ids(self, req: SearchRequest) -> list[int | None]: ...
    def leg_body(self, query: Mapping[str, Any], req: SearchRequest,
                 source: Any) -> dict[str, Any]: ...
    def server_body(self, pair: SubQueries, req: SearchRequest,
                    source: Any) -> dict[str, Any]: ...


def plan(retriever: Planner, texts: Sequence[str], k: int | None = None,
         **overrides: Any) -> list[dict[str, Any]]:
    """The exact requests ``retriever.search_batch`` sends for ``texts`` (same options,
    ``explain`` excepted), without sending them: to paste into Dev Tools or a
    search-relevance comparison.

    Returns, per text: ``query``, ``path`` (``server``: one ``_search`` the engine
    fuses, its normalization pipeline inline; ``client``: one ``_search`` per leg (and
    shard), fused by :mod:`lr_opensearch.search.fusion` with ``fusion``; ``single``),
    ``engine``, ``fusion`` (legs, weights, semantics, normalization, combination) and
    ``requests`` (``method``, ``path``, ``body``, and ``leg`` for client fusion).
    """
    texts = [texts] if isinstance(texts, str) else texts
    check_texts(texts)
    req = retriever.request(retriever.options.replace(k=k, **overrides).replace(explain=False))
    texts = list(texts)
    sub = retriever.sub_queries(retriever.inputs(texts, req.legs, req.options.instruction),
                                 req, len(texts))
    search = f"/{retriever.index}/_search"

    def at(query: Mapping[str, Any]) -> str:  # a leg the index sends elsewhere
        return f"/{retriever.adapter.target(retriever.index, {'query': query})}/_search"

    c = req.config
    out = []
    for text, pair in zip(texts, sub, strict=True):
        if req.path == "server":
            requests = [{"method": "GET", "path": search,
                         "body": retriever.server_body(pair, req, req.source)}]
        elif req.path == CALIBRATED:
            requests = [{"method": "GET", "path": search,
                         "body": retriever.one_query.body(pair, req, req.source)}]
        elif req.path == "single":
            requests = [{"method": "GET", "path": at(pair[0]),
                         "body": retriever.leg_body(pair[0], req, req.source)}]
        else:
            requests = [
                {"leg": leg, "method": "GET",
                 "path": at(q) + ("" if shard is None else f"?preference=_shards:{shard}"),
                 "body": retriever.leg_body(q, req, False)}
                for leg, q in zip(req.legs, pair, strict=True)
                for shard in retriever.shard_ids(req)]
        fusion = {"legs": list(req.legs), "weights": list(c.leg_weights),
                  "semantics": c.semantics, "normalization": c.normalization,
                  "combination": c.combination, "rank_constant": c.rank_constant}
        if req.path == CALIBRATED:
            fusion["boosts"] = [retriever.one_query.boosts(req)[name] for name in req.legs]
        out.append({"query": text, "path": req.path, "engine": retriever.adapter.engine,
                    "fusion": fusion, "requests": requests})
    return out
