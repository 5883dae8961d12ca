"""The ``calibrated`` fusion path: the hybrid as one ``bool`` query, each leg's clause boosted
by weight / the leg's scale (:mod:`lr_opensearch.search.calibration`, measured on the index),
``size`` = the page: no candidates, no pipeline; ``explain`` sends each leg's clause again,
restricted to the page's documents, for its part of the sum.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lr_opensearch.engine.adapter import EngineAdapter
from lr_opensearch.engine.results import EngineResult
from lr_opensearch.search.hits import Hit, assemble_calibrated
from lr_opensearch.search.request import SearchRequest

SubQueries = tuple[dict[str, Any], ...]  # one query's sub-queries, in leg order


class OneQuery:
    """The one-query path of a :class:`~lr_opensearch.search.retriever.Retriever` over
    ``index`` (``in_cluster``: the cluster encodes the text, every sparse token is sent)."""

    def __init__(self, adapter: EngineAdapter, index: str, *, in_cluster: bool = False):
        self.adapter, self.index, self.in_cluster = adapter, index, in_cluster
        self._calibration: Any = None

    def boosts(self, req: SearchRequest) -> dict[str, float]:
        """Per searched leg, its clause's boost in the ``calibrated`` one query: weight /
        the leg's scale, from the index's calibration (read once per retriever)."""
        if self._calibration is None:
            from lr_opensearch.search.calibration import read_calibration

            self._calibration = read_calibration(self.adapter, self.index)
        return self._calibration.boosts(req.config.weights, self.shape(req),
                                        req.options.form, index=self.index)

    def shape(self, req: SearchRequest) -> Any:
        """The shape the scales are read for: in-cluster encoding sends every token (the
        cluster's sparse model weighs them all)."""
        shape = req.shape
        if self.in_cluster and shape.sparse_tokens is not None:
            import dataclasses

            shape = dataclasses.replace(shape, sparse_tokens=None)
        return shape

    def body(self, pair: SubQueries, req: SearchRequest, source: Any) -> dict[str, Any]:
        """The one ``bool`` query of one text's sub-queries, each boosted."""
        boosts = self.boosts(req)
        return self.adapter.calibrated_body(pair, [boosts[name] for name in req.legs],
                                            size=req.page_end, filter=req.filter, source=source,
                                            timeout=req.timeout)

    def run(self, sub: list[SubQueries], sparse: Sequence[Mapping[str, float]] | None,
            req: SearchRequest) -> list[list[Hit]]:
        """One ``bool`` query per text; with ``explain``, each leg's clause again, restricted
        to the page's documents, for its own engine score (its part of the sum)."""
        bodies = [self.body(pair, req, req.source) for pair in sub]
        fused = self.adapter.msearch(self.index, bodies, what="calibrated search")
        parts: list[list[EngineResult]] = [[] for _ in sub]
        if req.explain:
            parts = self._legs_on_page(sub, fused, req)
        boosts = self.boosts(req)
        return [assemble_calibrated(res, parts[i], boosts, sparse[i] if sparse is not None
                                    else None, req) for i, res in enumerate(fused)]

    def _legs_on_page(self, sub: list[SubQueries], fused: list[EngineResult],
                      req: SearchRequest) -> list[list[EngineResult]]:
        """Per query, each leg's clause as the one query has it, filtered to the page's
        documents: the scores the ``bool`` summed (knn keeps its own k, as in the query)."""
        bodies = []
        for pair, res in zip(sub, fused, strict=True):
            ids = [h.doc_id for h in res.hits[req.from_ : req.page_end]]
            for q in pair:
                bodies.append(self.adapter.body(
                    {"bool": {"must": [q], "filter": [{"ids": {"values": ids}}]}},
                    size=max(1, len(ids)), source=False, timeout=req.timeout))
        flat = self.adapter.msearch(self.index, bodies, what="calibrated explain")
        n = len(req.legs)
        return [flat[i * n : (i + 1) * n] for i in range(len(sub))]
