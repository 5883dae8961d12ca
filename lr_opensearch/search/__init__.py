"""Search: from query text to ranked, fused, explained hits on an OpenSearch or
Elasticsearch index.

- ``retriever``: ``Retriever`` (server or client fusion, batches, paging, filters, explain).
- ``fusion``: the one fusion implementation (``opensearch`` and ``linear`` semantics, RRF).
- ``hits`` / ``explain``: hit assembly and per-hit explanations (exact scores, top tokens).
- ``engine``: field names and what the adapters share (``_msearch`` / ``_mget`` loop, index
  administration, bulk); ``opensearch`` / ``elasticsearch``: the two adapters side by side;
  ``adapters``: ``make_adapter(client)``.
- ``templates``: index bodies and hybrid search pipelines from ``index_templates/``; the
  ``_meta`` bundle rule.
- ``client``: ``connect`` (OpenSearch or Elasticsearch, detected), ``make_client`` (URL, TLS,
  basic auth) and cluster capabilities.

Never imports torch or transformers.
"""

from __future__ import annotations

from lr_opensearch.search.adapters import make_adapter
from lr_opensearch.search.client import connect, make_client
from lr_opensearch.search.fusion import FusedHit, FusionConfig, fuse, fuse_many, fusion_config
from lr_opensearch.search.hits import Hit
from lr_opensearch.search.retriever import Retriever

__all__ = ["FusedHit", "FusionConfig", "Hit", "Retriever", "connect", "fuse", "fuse_many",
           "fusion_config", "make_adapter", "make_client"]
