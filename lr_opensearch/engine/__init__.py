"""The engine room: everything that talks to an OpenSearch or Elasticsearch cluster as such.

Used by both the query side (:mod:`lr_opensearch.search`) and the document side
(:mod:`lr_opensearch.indexing`, the apps); it knows nothing of fusion or of documents'
encoding.

- ``client``: ``connect`` (asks the cluster what it is), ``make_client`` / ``make_es_client``
  (URL, TLS, basic auth), cluster capabilities.
- ``adapter``: the index's field names and ``EngineAdapter``: the shared ``_msearch`` /
  ``_mget`` loop, request bodies, and index administration (exists, create, the bundle
  check, ``_meta``, settings, refresh, count, delete, bulk).
- ``clauses`` / ``results``: the body pieces and the engines' limits / what they answer.
- ``opensearch`` / ``elasticsearch``: the two adapters side by side (each engine's
  spellings of the sub-queries, of hybrid search and of administration).
- ``factory``: ``make_adapter(client)`` and ``client_engine``, the one place that tells the
  engines apart by client.
- ``seismic``: the sparse field's layouts.
- ``mlapi``: the ml-commons REST calls (chunked upload, deploy, wait, undeploy).
- ``templates``: index bodies and hybrid search pipelines rendered from
  ``index_templates/``; the ``_meta`` bundle rule.

Never imports torch or transformers.

Importing this package imports none of its modules: import each by name.
"""

from __future__ import annotations
