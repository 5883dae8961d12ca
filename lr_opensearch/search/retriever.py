"""``Retriever``: from query text to ranked, explained hits on a LightRetriever index.

Queries are encoded by the bundle's :class:`~lr_opensearch.query.QueryEncoder` (no model
forward), then searched as dense (``knn``), sparse (sparse dot product), BM25 or hybrid.
Hybrid runs server side when the cluster can fuse with the requested semantics (OpenSearch:
``hybrid`` query + normalization search pipeline, semantics ``opensearch``; Elasticsearch:
the ``linear`` / ``rrf`` retrievers, semantics ``linear``, Enterprise or trial licence);
otherwise every sub-query goes out in one ``_msearch`` and :mod:`lr_opensearch.search.fusion`
fuses them, with one log line saying why. ``fusion="server"|"client"`` forces a path.

A page is ``k`` hits from ``from_``: the fused list is cut to ``[from_, page_end)`` with
``page_end = from_ + k``. When fusing, every sub-query retrieves ``per_leg = max(candidates,
page_end)`` hits; a knn collects ``knn_depth = max(candidates, page_end)`` neighbours on
every path (``SearchRequest``); server and client paths see the same lists.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch import legs as leg_registry
from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.engine.results import EngineResult, merge_shards
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import (
    ENCODED_INPUTS,
    QUERY_TEXT,
    QUERY_VECTOR,
    TOKEN_WEIGHTS,
    FusionConfig,
    fusion_config,
)
from lr_opensearch.options import CALIBRATED
from lr_opensearch.search.calibrated import OneQuery, SubQueries
from lr_opensearch.search.fusion import bundle_weights
from lr_opensearch.search.hits import (
    Hit,
    assemble_client,
    assemble_server,
    assemble_single,
    client_fusion,
    refs_of,
)
from lr_opensearch.search.request import (
    QueryEncoding,
    SearchOptions,
    SearchRequest,
    check_target,
    check_texts,
    engine_timeout,
)

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.query import QueryEncoder
    from lr_opensearch.search.rerank import Reranker, RerankStage

logger = logging.getLogger(__name__)

class Retriever:
    """Search a LightRetriever index with a bundle's query encoder.

    Args:
        bundle: a loaded :class:`~lr_opensearch.bundle.Bundle`.
        client: an OpenSearch (or Elasticsearch) client.
        index: the index name; its ``_meta`` bundle id must equal ``bundle.bundle_id``.
        options: the default :class:`~lr_opensearch.search.request.SearchOptions` of every
            search (weights None: the bundle's; semantics None: the bundle's).
        encoder: a ready query encoder (default: ``QueryEncoder(bundle)``).
        rerank: a second stage (:mod:`lr_opensearch.search.rerank`): a reranker (its top
            ``options.rerank_depth`` hits rescored, at most ``options.rerank_budget_s``
            seconds a search) or a ready ``RerankStage``; None (default): no model at query
            time.
        check_bundle: verify the index ``_meta`` bundle id first (default True).
        encoding: where and how queries are encoded, a
            :class:`~lr_opensearch.search.request.QueryEncoding` (``encode="cluster"``,
            ``sparse_min_idf``, ``input_encoders``; default: here, every token, none).
        **option_overrides: fields of ``SearchOptions`` (``weights=``, ``fusion=``,
            ``candidates=``, ...), applied to ``options``.
    """

    def __init__(
        self,
        bundle: Bundle,
        client: Any,
        index: str,
        options: SearchOptions | None = None,
        *,
        encoder: QueryEncoder | Any = None,
        rerank: Reranker | RerankStage | None = None,
        check_bundle: bool = True,
        encoding: QueryEncoding | None = None,
        **option_overrides: Any,
    ):
        self.bundle = bundle
        self.index = check_target(index)
        self.adapter = make_adapter(client)
        base = (options or SearchOptions()).replace(**option_overrides)
        cfg = bundle.config
        self.options = base.replace(
            weights=base.weights if base.weights is not None else bundle_weights(cfg),
            semantics=base.semantics or cfg.fusion_semantics)
        self.defaults = self._fusion(self.options)
        encoding = encoding or QueryEncoding()
        self.input_encoders = dict(encoding.input_encoders)
        self.encode = encoding.encode
        self.cluster: dict[str, Any] | None = None
        self._told: set[str] = set()
        self._shards: int | None = None
        self._documents: int | None = None
        from lr_opensearch.search.rerank import as_stage

        self.rerank = as_stage(rerank, self.options.rerank_depth, self.options.rerank_budget_s)
        meta = self.adapter.check_bundle(index, bundle) if check_bundle else None
        if self.encode == "cluster":  # the same _meta read serves both (one mapping read)
            from lr_opensearch.search.incluster import serving_record

            self.cluster = serving_record(self.adapter, index, meta)
        self.one_query = OneQuery(self.adapter, self.index, in_cluster=self.cluster is not None)
        if encoder is None:
            from lr_opensearch.query import QueryEncoder

            encoder = QueryEncoder(bundle, instruction=self.options.instruction,
                                   sparse_min_idf=encoding.sparse_min_idf)
        self.encoder = encoder

    def documents(self) -> int:
        """Documents in the searched index(es), counted once per retriever (``fusion="auto"``
        weighs it; :meth:`recount` after large changes)."""
        if self._documents is None:
            self._documents = self.adapter.count(self.index)
        return self._documents

    def recount(self) -> int:
        self._documents = None
        return self.documents()

    @property
    def candidates(self) -> int:
        return self.options.candidates

    @property
    def instruction(self) -> str | None:
        return self.options.instruction

    # ---- public API ----------------------------------------------------------------
    def search(
        self, text: str | Sequence[str], k: int | None = None, **overrides: Any
    ) -> list[Hit] | list[list[Hit]]:
        """Search one text (-> list of hits) or several (-> one list per text).

        ``overrides``: fields of :class:`~lr_opensearch.search.request.SearchOptions` for
        this search (``mode=``, ``weights=``, ``filter=``, ``explain=``, ...).
        """
        if isinstance(text, str):
            return self.search_batch([text], k, **overrides)[0]
        return self.search_batch(text, k, **overrides)  # checks the texts

    def search_batch(self, texts: Sequence[str], k: int | None = None,
                     **overrides: Any) -> list[list[Hit]]:
        """Encode and search a batch of texts through ``_msearch``; ``overrides`` as in
        :meth:`search`. Each text must tokenize to at least one token."""
        check_texts(texts)
        opts = self.options.replace(k=k, **overrides)
        texts = list(texts)
        if self.rerank is not None:  # the first stage returns the reranked depth, from 0
            first = self._first_stage(texts, opts.replace(
                k=max(opts.from_ + opts.k, self.rerank.depth), from_=0))
            return [self.rerank.apply(t, hits)[opts.from_ : opts.from_ + opts.k]
                    for t, hits in zip(texts, first, strict=True)]
        return self._first_stage(texts, opts)

    def _first_stage(self, texts: list[str], opts: SearchOptions) -> list[list[Hit]]:
        req = self.request(opts)
        return self._search(self.inputs(texts, req.legs, opts.instruction), req, len(texts))

    def inputs(self, texts: Sequence[str], legs: Sequence[str],
               instruction: str | None = None) -> dict[str, Any]:
        """Every input the ``legs`` search with, per text: the query encoder's (one encode
        call), the texts, and those of ``input_encoders``."""
        if self.cluster is not None:  # the cluster encodes: every leg gets the text
            return {QUERY_TEXT: list(texts)}
        needed = {leg_registry.get(name).input for name in legs}
        out: dict[str, Any] = {}
        if needed & set(ENCODED_INPUTS):
            batch = self.encoder.encode_batch(list(texts),
                                              instruction=instruction or self.instruction)
            out[QUERY_VECTOR], out[TOKEN_WEIGHTS] = batch.dense, batch.sparse
        if QUERY_TEXT in needed:
            out[QUERY_TEXT] = list(texts)
        for name in sorted(needed - set(out)):
            encode = self.input_encoders.get(name)
            if encode is None:
                raise ConfigError(f"no input encoder for {name!r}, which leg(s) "
                                  f"{', '.join(sorted(n for n in legs if leg_registry.get(n).input == name))} "
                                  f"search with; give Retriever(encoding=QueryEncoding(input_encoders={{{name!r}: fn}}))")
            out[name] = encode(list(texts))
        return out

    def search_encoded(
        self,
        dense: np.ndarray | None = None,
        sparse: Sequence[Mapping[str, float]] | None = None,
        k: int | None = None,
        *,
        texts: Sequence[str] | None = None,
        inputs: Mapping[str, Sequence[Any]] | None = None,
        **overrides: Any,
    ) -> list[list[Hit]]:
        """Search already encoded queries. dense: [n, served_dim] float32 (the query
        vector input); sparse: n key->weight maps (the token-weight input); texts: the n
        query texts (the text input, for BM25); inputs: any input by name.

        Lets other query encoders (e.g. the full backbone, for baselines) share this path.
        """
        given: dict[str, Any] = dict(inputs or {})
        for name, value in ((QUERY_VECTOR, dense), (TOKEN_WEIGHTS, sparse), (QUERY_TEXT, texts)):
            if value is not None:
                given[name] = value
        req = self.request(self.options.replace(k=k, **overrides))
        for name in req.legs:
            leg = leg_registry.get(name)
            if given.get(leg.input) is None:
                raise ConfigError(f"mode {req.mode!r} with legs {', '.join(req.legs)} needs "
                                  f"{leg.needs}")
        n = len(next(given[leg_registry.get(name).input] for name in req.legs))
        return self._search(given, req, n) if n else []

    def _search(self, inputs: Mapping[str, Any], req: SearchRequest, n: int) -> list[list[Hit]]:
        sub = self.sub_queries(inputs, req, n)
        sparse = inputs.get(TOKEN_WEIGHTS)
        if req.path == "server":
            return self._run_server(sub, sparse, req)
        if req.path == CALIBRATED:
            return self.one_query.run(sub, sparse, req)
        fetch = self._fetch_after(req)
        source = False if fetch else req.source
        if req.path == "single":
            bodies = [self.leg_body(pair[0], req, source) for pair in sub]
            results = self.adapter.msearch(self.index, bodies, what=f"{req.mode} search")
            return [assemble_single(res, sparse[i] if sparse is not None else None, req)
                    for i, res in enumerate(results)]
        grouped = self._search_legs(sub, req, source, what=f"{req.mode} search")
        tables = [client_fusion(res, req.config) for res in grouped]
        fetched = None
        if fetch:
            page = [refs_of(res)[row[0]] for res, table in zip(grouped, tables, strict=True)
                    for row in table[req.from_ : req.page_end]]
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

    def shard_ids(self, req: SearchRequest) -> list[int | None]:
        """The shards each leg of client fusion is searched on one by one ([None]: the
        whole index at once): all primaries with the ``opensearch`` semantics on a
        multi-shard OpenSearch index (see :meth:`_search_legs`)."""
        split = (self.adapter.engine == "opensearch" and req.config.semantics == "opensearch"
                 and self.shards > 1)
        return list(range(self.shards)) if split else [None]

    def dsl(self, texts: Sequence[str], k: int | None = None,
            **overrides: Any) -> list[dict[str, Any]]:
        """The exact requests :meth:`search_batch` sends for ``texts`` (same options,
        ``explain`` excepted), without sending them: :func:`lr_opensearch.search.dsl.plan`."""
        from lr_opensearch.search.dsl import plan

        return plan(self, texts, k, **overrides)

    def leg_body(self, query: Mapping[str, Any], req: SearchRequest, source: Any) -> dict[str, Any]:
        """One leg's own search body (a one-leg search, a leg of client fusion)."""
        return self.adapter.body(query, size=req.per_leg, source=source, timeout=req.timeout)

    def server_body(self, pair: SubQueries, req: SearchRequest, source: Any) -> dict[str, Any]:
        """The body the server fuses: the legs' ``hybrid`` query, the page of it."""
        return self.adapter.hybrid_body(pair, req.config, size=req.page_end, per_leg=req.per_leg,
                                        source=source, timeout=req.timeout)

    def _search_legs(
        self, sub: list[SubQueries], req: SearchRequest, source: Any, what: str
    ) -> list[list[EngineResult]]:
        """Run every query's legs (one ``_msearch``); per query, one result per leg.

        With the ``opensearch`` semantics on a multi-shard OpenSearch index each leg is
        searched once per shard (``preference=_shards:N``), ``size`` hits each, and the
        shards' lists are merged: exactly the lists the server's hybrid query collects per
        shard and normalises (min-max, l2, RRF ranks) together at the coordinator, so client
        fusion ranks as the server does. Otherwise each leg is one search over the index
        (the global best ``size``).
        """
        shard_ids = self.shard_ids(req)
        bodies, prefs = [], []
        for pair in sub:
            for q in pair:
                body = self.leg_body(q, req, source)
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
    def _fusion(self, opts: SearchOptions) -> FusionConfig:
        assert opts.weights is not None and opts.semantics is not None  # set in __init__
        return fusion_config(opts.weights, opts.semantics, opts.normalization,
                             opts.combination, opts.rank_constant)

    def request(self, opts: SearchOptions) -> SearchRequest:
        """The options resolved once: fusion config, path, source selection."""
        config = self.defaults
        if (opts.weights, opts.semantics, opts.normalization, opts.combination,
                opts.rank_constant) != (self.options.weights, self.options.semantics,
                                        self.options.normalization, self.options.combination,
                                        self.options.rank_constant):
            config = self._fusion(opts)
        hybrid = opts.mode == leg_registry.HYBRID
        path = self._resolve_path(opts.fusion, config) if hybrid else "single"
        src, strip = self._source_spec(opts.source, opts.explain)
        return SearchRequest(opts, path, config, src, strip, engine_timeout(opts.timeout),
                             sparse_field=self.adapter.sparse_field)

    def _resolve_path(self, fusion: str, config: FusionConfig) -> str:
        if fusion == "client":
            return "client"
        if fusion == CALIBRATED:
            why = self.adapter.one_query_blocker(config)
            if why is not None:
                raise ConfigError(f"fusion {CALIBRATED!r} is not possible: {why}; use "
                                  "fusion='client'")
            return CALIBRATED
        why = self.adapter.server_fusion_blocker(config)
        if why is not None and fusion == "server":
            raise ConfigError(f"server-side fusion is not possible: {why}; use fusion='client'")
        if why is None and fusion == "auto":
            why = self.adapter.server_fusion_slower(self.documents())
        if why is None:
            return "server"
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
        return req.source is not False and req.path != "single" and req.per_leg > req.page_end

    def sub_queries(self, inputs: Mapping[str, Any], req: SearchRequest,
                     n: int) -> list[SubQueries]:
        """Per query, one sub-query per leg in ``req.legs`` order, each built as its leg
        says from its input."""
        ctx = req.shape.context(req.knn_depth, filter=req.filter,
                                ef_search=req.options.ef_search, seismic=req.options.seismic)
        if self.cluster is not None:
            from lr_opensearch.engine.text_queries import text_sub_queries

            assert isinstance(self.adapter, OpenSearchAdapter)  # checked in __init__
            return [tuple(text_sub_queries(self.cluster, text, req.legs, ctx,
                                           adapter=self.adapter))
                    for text in inputs[QUERY_TEXT][:n]]
        built = [leg_registry.get(name) for name in req.legs]
        return [tuple(leg.sub_query(self.adapter, inputs[leg.input][i], ctx) for leg in built)
                for i in range(n)]

    def _run_server(
        self,
        sub: list[SubQueries],
        sparse: Sequence[Mapping[str, float]] | None,
        req: SearchRequest,
    ) -> list[list[Hit]]:
        # the server collects `candidates` hits per sub-query (and shard) but returns only
        # the page, without `_source` (filtering sources in the hybrid search's fetch phase
        # costs ~4x the search here); the page's sources come in one _mget
        fetch = self._fetch_after(req)
        bodies = [self.server_body(pair, req, False if fetch else req.source) for pair in sub]
        fused = self.adapter.msearch(self.index, bodies, what="hybrid search")
        parts: list[list[EngineResult]] = [[] for _ in sub]
        if req.explain:  # the sub-queries' own scores, to explain the server's fusion
            parts = self._search_legs(sub, req, False, what="hybrid explain")
        fetched = None
        if fetch:
            page = [h.ref for res in fused for h in res.hits[req.from_ : req.page_end]]
            fetched = self.adapter.fetch_sources(self.index, page, req.source)
        out = []
        for i, res in enumerate(fused):
            query_sparse = sparse[i] if sparse is not None else None
            out.append(assemble_server(res, parts[i], query_sparse, req, fetched))
        return out


__all__ = ["Retriever"]
