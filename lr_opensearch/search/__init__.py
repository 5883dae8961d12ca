"""Search: from query text to ranked, fused, explained hits on an OpenSearch or
Elasticsearch index. The legs it fuses are :mod:`lr_opensearch.legs`; the cluster calls go
through :mod:`lr_opensearch.engine`.

- ``retriever``: ``Retriever`` (inputs per leg, server or client fusion, batches, paging,
  filters, explain, ``dsl()``); ``calibrated``: its one-query path; ``dsl``: the requests
  a search sends, unsent.
- ``request``: ``SearchOptions`` (what a search asks for, built once) and ``SearchRequest``
  (the same resolved per batch).
- ``fusion``: the one fusion implementation (``opensearch`` and ``linear`` semantics, RRF).
- ``hits`` / ``explain``: hit assembly and per-hit explanations (per-leg scores, top tokens).
- ``rerank``: the second stage (``Reranker`` interface, ``RerankStage``).

Never imports torch or transformers. ``connect`` / ``make_client`` are here for convenience
(a search starts with a client); the engine adapters are :mod:`lr_opensearch.engine`'s.
"""

from __future__ import annotations

from lr_opensearch.engine.client import connect, make_client
from lr_opensearch.legs import FusionConfig, fusion_config
from lr_opensearch.search.fusion import FusedHit, fuse, fuse_many
from lr_opensearch.search.hits import Hit
from lr_opensearch.search.request import QueryEncoding, SearchOptions
from lr_opensearch.search.retriever import Retriever

__all__ = ["FusedHit", "FusionConfig", "Hit", "QueryEncoding", "Retriever", "SearchOptions",
           "connect", "fuse", "fuse_many", "fusion_config", "make_client"]
