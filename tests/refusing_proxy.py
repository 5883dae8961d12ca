"""An HTTP proxy in front of a node that answers every ``_bulk`` request with a chosen
refusal (a status, a content type, a body) and forwards everything else to the node, the
way a security plugin, a gateway or a misconfigured proxy refuses a whole request.

Start it with ``with RefusingProxy(node_url, Answer(403, ...)) as proxy: proxy.url``."""

from __future__ import annotations

import http.client
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length"}


@dataclass(frozen=True)
class Answer:
    """What the proxy answers to ``_bulk``."""

    status: int
    body: bytes
    content_type: str = "application/json; charset=UTF-8"


class RefusingProxy:
    """A threading HTTP server on 127.0.0.1 (a free port): ``_bulk`` gets ``answer``, every
    other request goes to ``upstream`` (``http://host:port``) and its answer comes back."""

    def __init__(self, upstream: str, answer: Answer) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 9200)
        self.answer = answer
        self.bulk_requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> RefusingProxy:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass  # quiet

            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                if urllib.parse.urlsplit(self.path).path.rstrip("/").endswith("/_bulk"):
                    proxy.bulk_requests += 1
                    self._send(proxy.answer.status, proxy.answer.content_type,
                               proxy.answer.body)
                    return
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=120)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in HOP_HEADERS and k.lower() != "host"}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self._send(resp.status, resp.getheader("Content-Type", ""), data,
                               head=self.command == "HEAD",
                               length=resp.getheader("Content-Length"))
                finally:
                    conn.close()

            def _send(self, status: int, content_type: str, data: bytes, *,
                      head: bool = False, length: str | None = None) -> None:
                self.send_response(status)
                if content_type:
                    self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", length if head and length else str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _relay

        return Handler
