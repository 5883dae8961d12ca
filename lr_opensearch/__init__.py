"""lr-opensearch: LightRetriever hybrid retrieval inside OpenSearch and Elasticsearch.

Documents are encoded offline by a full model (dense vector + sparse vocabulary vector);
queries are encoded with no deep model at all (a tokenizer and a table lookup)::

    from lr_opensearch import Retriever, connect, load_bundle

    # connect(): OpenSearch or Elasticsearch, as the cluster at LR_OPENSEARCH_URL answers
    retriever = Retriever(load_bundle("bundles/minilm"), connect(), "docs")
    hits = retriever.search("what causes tides", k=5, explain=True)

One subpackage per concept: ``bundle`` (the artifact: format, files, keys, the store),
``fit`` (building and fitting a bundle), ``query`` (the model-free encoder), ``search``
(retriever, fusion, hits, explanations, rerank, calibration), ``engine`` (client, adapters,
templates, index administration), ``indexing`` (the document side), ``evaluation``,
``model`` (torch), ``node`` (local nodes), ``packaged`` (weights shipped in wheels),
``cli``; ``options``, ``errors`` and ``version`` are shared by all (docs/ARCHITECTURE.md). Importing this package pulls in neither torch nor transformers.
"""

from __future__ import annotations

from lr_opensearch.bundle import Bundle, BundleConfig, load_bundle, save_bundle
from lr_opensearch.errors import (
    BundleError,
    BundleMismatchError,
    ConfigError,
    EngineError,
    LRError,
    QueryError,
)
from lr_opensearch.query import QueryEncoder
from lr_opensearch.search import Hit, Retriever, connect, fuse, make_client
from lr_opensearch.version import __version__

__all__ = [
    "Bundle",
    "BundleConfig",
    "BundleError",
    "BundleMismatchError",
    "ConfigError",
    "EngineError",
    "Hit",
    "LRError",
    "QueryEncoder",
    "QueryError",
    "Retriever",
    "__version__",
    "connect",
    "fuse",
    "load_bundle",
    "make_client",
    "save_bundle",
]
