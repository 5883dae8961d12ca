"""Helpers for tests that run OpenSearch nodes (import as ``from node_support import ...``)."""

from __future__ import annotations

import os
import socket

import pytest


def free_port() -> int:
    """A TCP port that is free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def opensearch_test_version() -> str:
    """The OpenSearch version this session tests (``LR_TEST_OPENSEARCH_VERSION``, default the
    packaged default); an unpackaged one fails the session with the valid ones."""
    from lr_opensearch.errors import ConfigError
    from lr_opensearch.node import get_engine

    try:
        return get_engine("opensearch").version(os.environ.get("LR_TEST_OPENSEARCH_VERSION"))
    except ConfigError as exc:
        pytest.fail(f"LR_TEST_OPENSEARCH_VERSION: {exc}", pytrace=False)
