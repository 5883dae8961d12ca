"""Helpers for tests that run OpenSearch nodes (import as ``from node_support import ...``)."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A TCP port that is free on the loopback interface right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
