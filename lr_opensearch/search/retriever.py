"""``Retriever``: from query text to ranked, explained hits on a LightRetriever index.

Queries are encoded by the bundle's :class:`~lr_opensearch.query.QueryEncoder` (no model
forward), then searched as dense (``knn``), sparse (sparse dot product), BM25 or hybrid.
Hybrid runs server side when the cluster can fuse with the requested semantics (OpenSearch:
``hybrid`` query + normalization search pipeline, semantics ``opensearch``; Elasticsearch:
the ``linear`` / ``rrf`` retrievers, semantics ``linear``, Enterprise or trial licence);
otherwise every sub-query goes out in one ``_msearch`` and :mod:`lr_opensearch.search.fusion`
fuses them, with one log line saying why. ``fusion="server"|"client"`` forces a path.

Every sub-query retrieves ``depth = max(candidates, from_ + k)`` hits (knn ``k`` = depth),
the fused list is cut to ``[from_, from_ + k)``; server and client paths see the same lists.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch.errors import ConfigError
from lr_opensearch.options import choice
from lr_opensearch.search.adapters import make_adapter
from lr_opensearch.search.engine import EngineResult, Filter, merge_shards
from lr_opensearch.search.fusion import FusionConfig, bundle_weights, fusion_config
from lr_opensearch.search.hits import (
    Hit,
    SearchRequest,
    assemble_client,
    assemble_server,
    assemble_single,
    client_fusion,
)

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

MODES = ("hybrid", "dense", "sparse", "bm25")  # hybrid, or one leg alone
FUSION_PATHS = ("auto", "server", "client")
DEFAULT_CANDIDATES = 100


def _timeout(timeout: float | str | None) -> str | None:
    if timeout is None or isinstance(timeout, str):
        return timeout
    return f"{max(1, int(round(float(timeout) * 1000)))}ms"


class Retriever:
    """Search a LightRetriever index with a bundle's query encoder.

    Args:
        bundle: a loaded :class:`~lr_opensearch.bundle.Bundle`.
        client: an OpenSearch (or Elasticsearch) client.
        index: the index name; its ``_meta`` bundle id must equal ``bundle.bundle_id``.
        fusion: ``auto`` (server when possible), ``server`` or ``client``.
        semantics: fusion semantics, default the bundle's (``opensearch`` or ``linear``).
        weights: per leg: (dense, sparse[, bm25]) or ``{leg: weight}``, default the bundle's
            (a leg of weight 0 is not searched; BM25 runs ``multi_match`` over title + text).
        normalization / combination / rank_constant: see :func:`lr_opensearch.search.fusion.fuse`.
        candidates: hits retrieved per sub-query (at least ``from_ + k``).
        ef_search: HNSW ``ef_search`` for the knn query (None: the index default).
        instruction: default query instruction name (None: the bundle's default).
        encoder: a ready query encoder (default: ``QueryEncoder(bundle)``).
        check_bundle: verify the index ``_meta`` bundle id first (default True).
        rerank: a second stage (:mod:`lr_opensearch.search.rerank`): a reranker (its top
            ``rerank_depth`` hits rescored, at most ``rerank_budget_s`` seconds a search) or
            a ready ``RerankStage``; None (default): no model at query time.
        sparse_min_idf: prune the sparse query: tokens with IDF below it are not sent
            (see ``QueryEncoder``; 0, the default, keeps all). Ignored with ``encoder``.
    """

    def __init__(
        self,
        bundle: Bundle,
        client: Any,
        index: str,
        *,
        fusion: str = "auto",
        semantics: str | None = None,
        weights: Sequence[float] | Mapping[str, float] | None = None,
        normalization: str = "min_max",
        combination: str = "arithmetic_mean",
        rank_constant: int = 60,
        candidates: int = DEFAULT_CANDIDATES,
        ef_search: int | None = None,
        instruction: str | None = None,
        encoder: Any = None,
        check_bundle: bool = True,
        rerank: Any = None,
        rerank_depth: int = 20,
        rerank_budget_s: float | None = None,
        sparse_min_idf: float = 0.0,
    ):
        self.bundle = bundle
        self.index = index
        self.adapter = make_adapter(client)
        self.fusion = choice("fusion", fusion, FUSION_PATHS)
        cfg = bundle.config
        self.defaults = fusion_config(
            weights if weights is not None else bundle_weights(cfg),
            semantics or cfg.fusion_semantics,
            normalization,
            combination,
            rank_constant,
        )
        if candidates < 1:
            raise ConfigError(f"candidates must be >= 1, got {candidates}")
        self.candidates = int(candidates)
        self.ef_search = ef_search
        self.instruction = instruction
        self._told: set[str] = set()
        self._shards: int | None = None
        from lr_opensearch.search.rerank import as_stage

        self.rerank = as_stage(rerank, rerank_depth, rerank_budget_s)
        if check_bundle:
            self.adapter.check_bundle(index, bundle)
        if encoder is None:
            from lr_opensearch.query import QueryEncoder

            encoder = QueryEncoder(bundle, instruction=instruction, sparse_min_idf=sparse_min_idf)
        self.encoder = encoder

    # ---- public API ----------------------------------------------------------------
    def search(
        self, text: str | Sequence[str], k: int = 10, **kwargs: Any
    ) -> list[Hit] | list[list[Hit]]:
        """Search one text (-> list of hits) or several (-> one list per text).

        Keyword arguments are those of :meth:`search_batch`.
        """
        if isinstance(text, str):
            return self.search_batch([text], k, **kwargs)[0]
        return self.search_batch(list(text), k, **kwargs)

    def search_batch(
        self,
        texts: Sequence[str],
        k: int = 10,
        *,
        mode: str = "hybrid",
        weights: Sequence[float] | Mapping[str, float] | None = None,
        fusion: str | None = None,
        semantics: str | None = None,
        filter: Filter = None,
        instruction: str | None = None,
        from_: int = 0,
        source: Any = None,
        timeout: float | str | None = None,
        explain: bool = False,
    ) -> list[list[Hit]]:
        """Encode and search a batch of texts through ``_msearch``.

        Args:
            texts: query texts (each must tokenize to at least one token).
            k: hits per query; from_: offset into the ranked (fused) list.
            mode: ``hybrid``, or one leg alone: ``dense``, ``sparse`` or ``bm25``.
            weights, semantics: override the retriever's fusion defaults.
            fusion: ``auto``, ``server`` or ``client`` (default: the retriever's).
            filter: a query clause or list of clauses applied to both sub-queries.
            instruction: query instruction name (default: the retriever's / bundle's).
            source: ``_source`` selection (None: everything except the vector fields;
                False: nothing; a list of fields; or an engine ``_source`` object).
            timeout: per-search engine timeout (seconds or an engine string like "2s").
            explain: attach an :class:`Explanation` to every hit.
        """
        texts = list(texts)
        if self.rerank is not None:  # the first stage returns the reranked depth, from 0
            depth = max(from_ + k, self.rerank.depth)
            first = self._first_stage(texts, depth, mode=mode, weights=weights, fusion=fusion,
                                      semantics=semantics, filter=filter,
                                      instruction=instruction, source=source, timeout=timeout,
                                      explain=explain)
            return [self.rerank.apply(t, hits)[from_ : from_ + k]
                    for t, hits in zip(texts, first, strict=True)]
        return self._first_stage(texts, k, mode=mode, weights=weights, fusion=fusion,
                                 semantics=semantics, filter=filter, instruction=instruction,
                                 from_=from_, source=source, timeout=timeout, explain=explain)

    def _first_stage(self, texts: list[str], k: int, *, mode: str, weights: Any, fusion: Any,
                     semantics: Any, filter: Filter, instruction: str | None, from_: int = 0,
                     source: Any = None, timeout: Any = None,
                     explain: bool = False) -> list[list[Hit]]:
        if mode == "bm25":  # no encoding: the engine analyses the text
            return self.search_encoded(None, None, k, mode=mode, texts=texts, filter=filter,
                                       from_=from_, source=source, timeout=timeout,
                                       explain=explain)
        batch = self.encoder.encode_batch(texts, instruction=instruction or self.instruction)
        return self.search_encoded(
            batch.dense,
            batch.sparse,
            k,
            texts=texts,
            mode=mode,
            weights=weights,
            fusion=fusion,
            semantics=semantics,
            filter=filter,
            from_=from_,
            source=source,
            timeout=timeout,
            explain=explain,
        )

    def search_encoded(
        self,
        dense: np.ndarray | None,
        sparse: Sequence[Mapping[str, float]] | None,
        k: int = 10,
        *,
        texts: Sequence[str] | None = None,
        mode: str = "hybrid",
        weights: Sequence[float] | Mapping[str, float] | None = None,
        fusion: str | None = None,
        semantics: str | None = None,
        filter: Filter = None,
        from_: int = 0,
        source: Any = None,
        timeout: float | str | None = None,
        explain: bool = False,
    ) -> list[list[Hit]]:
        """Search already encoded queries. dense: [n, served_dim] float32; sparse: n
        key->weight maps; texts: the n query texts (needed by the BM25 leg).

        Lets other query encoders (e.g. the full backbone, for baselines) share this path.
        """
        req = self._request(
            k, mode, weights, fusion, semantics, filter, from_, source, timeout, explain
        )
        given = {"dense": dense, "sparse": sparse, "bm25": texts}
        needs = {"dense": "dense query vectors", "sparse": "sparse query maps",
                 "bm25": "the query texts (texts=...)"}
        for leg in req.legs:
            if given[leg] is None:
                raise ConfigError(f"mode {mode!r} with legs {', '.join(req.legs)} needs "
                                  f"{needs[leg]}")
        n = len(next(v for v in (given[leg] for leg in req.legs) if v is not None))
        if n == 0:
            return []
        sub = self._sub_queries(dense, sparse, texts, req, n)
        if req.path == "server":
            return self._run_server(sub, sparse, req)
        fetch = self._fetch_after(req)
        source = False if fetch else req.source
        if req.path == "single":
            bodies = [self.adapter.body(pair[0], size=self._size(req), source=source,
                                        timeout=req.timeout) for pair in sub]
            results = self.adapter.msearch(self.index, bodies, what=f"{mode} search")
            return [assemble_single(res, sparse[i] if sparse is not None else None, req)
                    for i, res in enumerate(results)]
        grouped = self._search_legs(sub, req, source, what=f"{mode} search")
        tables = [client_fusion(res, req.config) for res in grouped]
        fetched = None
        if fetch:
            page = [row[0] for table in tables for row in table[req.from_ : req.depth]]
            fetched = self.adapter.fetch_sources(self.index, page, req.source)
        return [
            assemble_client(res, sparse[i] if sparse is not None else None, req, fetched, table)
            for i, (res, table) in enumerate(zip(grouped, tables, strict=True))
        ]

    @property
    def shards(self) -> int:
        """The index's number of primary shards (read once)."""
        if self._shards is None:
            self._shards = int(self.adapter.index_settings(self.index)["number_of_shards"])
        return self._shards

    def _shard_ids(self, req: SearchRequest) -> list[int | None]:
        """The shards each leg of client fusion is searched on one by one ([None]: the
        whole index at once): all primaries with the ``opensearch`` semantics on a
        multi-shard OpenSearch index (see :meth:`_search_legs`)."""
        split = (self.adapter.engine == "opensearch" and req.config.semantics == "opensearch"
                 and self.shards > 1)
        return list(range(self.shards)) if split else [None]

    def dsl(self, texts: Sequence[str], k: int = 10, **kwargs: Any) -> list[dict[str, Any]]:
        """The exact requests :meth:`search_batch` sends for ``texts`` (same keyword
        arguments, ``explain`` excepted), without sending them: to paste into Dev Tools or
        a search-relevance comparison.

        Returns, per text: ``query``, ``path`` (``server``: one ``_search`` the engine
        fuses, its normalization pipeline inline; ``client``: one ``_search`` per leg (and
        shard), fused by :mod:`lr_opensearch.search.fusion` with ``fusion``; ``single``),
        ``engine``, ``fusion`` (legs, weights, semantics, normalization, combination) and
        ``requests`` (``method``, ``path``, ``body``, and ``leg`` for client fusion).
        """
        instruction = kwargs.pop("instruction", None)
        mode = kwargs.pop("mode", "hybrid")
        req = self._request(k, mode, kwargs.pop("weights", None), kwargs.pop("fusion", None),
                            kwargs.pop("semantics", None), kwargs.pop("filter", None),
                            kwargs.pop("from_", 0), kwargs.pop("source", None),
                            kwargs.pop("timeout", None), False)
        if kwargs:
            raise ConfigError(f"dsl() got unknown argument(s) {sorted(kwargs)}")
        texts = list(texts)
        dense = sparse = None
        if mode != "bm25":
            batch = self.encoder.encode_batch(texts, instruction=instruction or self.instruction)
            dense, sparse = batch.dense, batch.sparse
        sub = self._sub_queries(dense, sparse, texts, req, len(texts))
        search = f"/{self.index}/_search"
        c = req.config
        out = []
        for text, pair in zip(texts, sub, strict=True):
            if req.path == "server":
                requests = [{"method": "GET", "path": search, "body": self.adapter.hybrid_body(
                    pair, c, size=req.depth, depth=self._size(req), source=req.source,
                    timeout=req.timeout)}]
            elif req.path == "single":
                requests = [{"method": "GET", "path": search, "body": self.adapter.body(
                    pair[0], size=req.depth, source=req.source, timeout=req.timeout)}]
            else:
                requests = [
                    {"leg": leg, "method": "GET",
                     "path": search + ("" if shard is None else f"?preference=_shards:{shard}"),
                     "body": self.adapter.body(q, size=self._size(req), source=False,
                                               timeout=req.timeout)}
                    for leg, q in zip(req.legs, pair, strict=True)
                    for shard in self._shard_ids(req)]
            out.append({"query": text, "path": req.path, "engine": self.adapter.engine,
                        "fusion": {"legs": list(req.legs), "weights": list(c.leg_weights),
                                   "semantics": c.semantics, "normalization": c.normalization,
                                   "combination": c.combination,
                                   "rank_constant": c.rank_constant},
                        "requests": requests})
        return out

    def _search_legs(
        self, sub: list[tuple[dict[str, Any], ...]], req: SearchRequest, source: Any, what: str
    ) -> list[list[EngineResult]]:
        """Run every query's legs (one ``_msearch``); per query, one result per leg.

        With the ``opensearch`` semantics on a multi-shard OpenSearch index each leg is
        searched once per shard (``preference=_shards:N``), ``size`` hits each, and the
        shards' lists are merged: exactly the lists the server's hybrid query collects per
        shard and normalises (min-max, l2, RRF ranks) together at the coordinator, so client
        fusion ranks as the server does. Otherwise each leg is one search over the index
        (the global best ``size``).
        """
        shard_ids = self._shard_ids(req)
        bodies, prefs = [], []
        for pair in sub:
            for q in pair:
                body = self.adapter.body(q, size=self._size(req), source=source,
                                         timeout=req.timeout)
                for shard in shard_ids:
                    bodies.append(body)
                    prefs.append(None if shard is None else f"_shards:{shard}")
        flat = self.adapter.msearch(self.index, bodies, what=what, preferences=prefs)
        n_shards, per_query = len(shard_ids), len(req.legs) * len(shard_ids)
        grouped: list[list[EngineResult]] = []
        for i in range(len(sub)):
            legs = []
            for j in range(len(req.legs)):
                start = i * per_query + j * n_shards
                parts = flat[start : start + n_shards]
                legs.append(parts[0] if n_shards == 1 else merge_shards(parts))
            grouped.append(legs)
        return grouped

    # ---- internals -----------------------------------------------------------------
    def _request(
        self,
        k: int,
        mode: str,
        weights: Sequence[float] | Mapping[str, float] | None,
        fusion: str | None,
        semantics: str | None,
        filter: Filter,
        from_: int,
        source: Any,
        timeout: float | str | None,
        explain: bool,
    ) -> SearchRequest:
        choice("mode", mode, MODES)
        if k < 1 or from_ < 0:
            raise ConfigError(f"k must be >= 1 and from_ >= 0, got k={k}, from_={from_}")
        d = self.defaults
        config = d
        if weights is not None or semantics is not None:
            config = fusion_config(
                weights if weights is not None else d.weights,
                semantics or d.semantics,
                d.normalization,
                d.combination,
                d.rank_constant,
            )
        path = "single" if mode != "hybrid" else self._resolve_path(fusion or self.fusion, config)
        src, strip = self._source_spec(source, explain)
        return SearchRequest(
            k,
            from_,
            mode,
            path,
            config,
            filter,
            src,
            strip,
            _timeout(timeout),
            explain,
            sparse_field=self.adapter.sparse_field,
        )

    def _resolve_path(self, fusion: str, config: FusionConfig) -> str:
        choice("fusion", fusion, FUSION_PATHS)
        if fusion == "client":
            return "client"
        why = self.adapter.server_fusion_blocker(config)
        if why is None:
            return "server"
        if fusion == "server":
            raise ConfigError(f"server-side fusion is not possible: {why}; use fusion='client'")
        if why not in self._told:  # once per retriever and reason, not once per search
            self._told.add(why)
            logger.info("hybrid search fuses client side (same semantics): %s", why)
        return "client"

    def _source_spec(self, source: Any, explain: bool) -> tuple[Any, bool]:
        """(engine _source spec, strip lr_sparse from returned sources?)."""
        dense_f, sparse_f = self.adapter.dense_field, self.adapter.sparse_field
        if not explain:
            if source is None:
                return {"excludes": [dense_f, sparse_f]}, False
            if isinstance(source, (list, tuple)):
                return list(source), False
            return source, False
        if source is None:
            return {"excludes": [dense_f]}, True
        if source is False:
            return {"includes": [sparse_f]}, True
        if isinstance(source, (list, tuple)):
            return [*source, sparse_f], sparse_f not in source
        return source, False

    def _fetch_after(self, req: SearchRequest) -> bool:
        """Whether hybrid search runs without ``_source`` and fetches the page's sources
        after, in one ``_mget``: client fusion pulls ``candidates`` hits per leg but returns
        ``k``; the server's hybrid search returns the page, but filtering sources in its
        fetch phase costs several times the search (measured: 143 vs 30 ms a search)."""
        return req.source is not False and req.path != "single" and self._size(req) > req.depth

    def _size(self, req: SearchRequest) -> int:
        return max(self.candidates, req.depth) if req.path != "single" else req.depth

    def _sub_queries(
        self,
        dense: np.ndarray | None,
        sparse: Sequence[Mapping[str, float]] | None,
        texts: Sequence[str] | None,
        req: SearchRequest,
        n: int,
    ) -> list[tuple[dict[str, Any], ...]]:
        """Per query, one sub-query per leg in ``req.legs`` order."""
        knn_k = max(self.candidates, req.depth)
        out: list[tuple[dict[str, Any], ...]] = []
        for i in range(n):
            parts: list[dict[str, Any]] = []
            for leg in req.legs:
                if leg == "dense":
                    assert dense is not None
                    parts.append(self.adapter.dense_query(
                        dense[i], k=knn_k, filter=req.filter, ef_search=self.ef_search))
                elif leg == "sparse":
                    assert sparse is not None
                    parts.append(self.adapter.sparse_query(sparse[i], filter=req.filter))
                else:
                    assert texts is not None
                    parts.append(self.adapter.text_query(texts[i], filter=req.filter))
            out.append(tuple(parts))
        return out

    def _run_server(
        self,
        sub: list[tuple[dict[str, Any], ...]],
        sparse: Sequence[Mapping[str, float]] | None,
        req: SearchRequest,
    ) -> list[list[Hit]]:
        # the server collects `candidates` hits per sub-query (and shard) but returns only
        # the page, without `_source` (filtering sources in the hybrid search's fetch phase
        # costs ~4x the search here); the page's sources come in one _mget
        fetch = self._fetch_after(req)
        bodies = [
            self.adapter.hybrid_body(pair, req.config, size=req.depth, depth=self._size(req),
                                     source=False if fetch else req.source,
                                     timeout=req.timeout)
            for pair in sub
        ]
        fused = self.adapter.msearch(self.index, bodies, what="hybrid search")
        parts: list[list[EngineResult]] = [[] for _ in sub]
        if req.explain:  # the sub-queries' own scores, to explain the server's fusion
            parts = self._search_legs(sub, req, False, what="hybrid explain")
        fetched = None
        if fetch:
            page = [h.doc_id for res in fused for h in res.hits[req.from_ : req.depth]]
            fetched = self.adapter.fetch_sources(self.index, page, req.source)
        out = []
        for i, res in enumerate(fused):
            query_sparse = sparse[i] if sparse is not None else None
            out.append(assemble_server(res, parts[i], query_sparse, req, fetched))
        return out


__all__ = ["Hit", "Retriever", "make_adapter"]
