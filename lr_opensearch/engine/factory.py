"""The engine adapter for a client: the one place that tells OpenSearch from Elasticsearch
by the client object (the cluster itself is asked in :func:`lr_opensearch.engine.client.connect`)."""

from __future__ import annotations

from typing import Any

from lr_opensearch.engine.adapter import EngineAdapter


def client_engine(client: Any) -> str:
    """``elasticsearch`` for an ``elasticsearch`` client (or a wrapper saying so through an
    ``lr_engine`` attribute), else ``opensearch``."""
    declared = getattr(client, "lr_engine", None)
    if isinstance(declared, str):
        return declared
    root = type(client).__module__.split(".")[0]
    return "elasticsearch" if root == "elasticsearch" else "opensearch"


def make_adapter(client: Any) -> EngineAdapter:
    """The engine adapter for a client (search bodies, transport, index administration)."""
    if client_engine(client) == "elasticsearch":
        from lr_opensearch.engine.elasticsearch import ElasticsearchAdapter

        return ElasticsearchAdapter(client)
    from lr_opensearch.engine.opensearch import OpenSearchAdapter

    return OpenSearchAdapter(client)
