"""What `connect` says when the first request fails in ways users hit (issue 29)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from lr_opensearch.engine.client import connect
from lr_opensearch.errors import EngineError


@pytest.fixture()
def plain_http_port() -> Iterator[int]:
    """A plain-HTTP server on a free loopback port (not a cluster: any answer will do)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def test_https_to_a_plain_http_server_says_so(plain_http_port: int) -> None:
    url = f"https://127.0.0.1:{plain_http_port}"
    with pytest.raises(EngineError) as exc:
        connect(url, timeout=5)
    message = str(exc.value)
    assert "plain HTTP" in message and f"http://127.0.0.1:{plain_http_port}" in message
    assert "verification" not in message  # not a certificate problem: no CA would help
