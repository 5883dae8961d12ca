"""What `connect` says when the first request fails in ways users hit (issue 29)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from pathlib import Path

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


PASSWORD = "S3cretPW"
BAD_URLS = (f"ftp://alice:{PASSWORD}@127.0.0.1:9600", f"http://alice:{PASSWORD}@:9600",
            f"http://alice:{PASSWORD}@127.0.0.1:notaport",
            f"http://alice:{PASSWORD}@127.0.0.1:99999", f"http://alice:{PASSWORD}@[::1",
            f"https://alice:{PASSWORD}@127.0.0.1:9600/")


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _commands(tmp_path: Path) -> list[list[str]]:
    """One invocation of every ``lr`` command that takes ``--url`` (the URL is appended)."""
    from tiny_artifacts import tiny_bundle

    bundle = str(tiny_bundle(tmp_path / "bundle"))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "1", "text": "a document"}\n')
    (tmp_path / "ds").mkdir()
    index = "lr-redaction-test"
    return [["index", "create", "--bundle", bundle, "--index", index],
            ["index", "info", index], ["index", "list"], ["index", "delete", index, "--yes", index],
            ["index", "calibrate", "--index", index, "--bundle", bundle],
            ["search", "--bundle", bundle, "--index", index, "a query"],
            ["search", "--bundle", bundle, "--index", index, "--dsl", "a query"],
            ["eval", "--dataset", str(tmp_path / "ds"), "--bundle", bundle],
            ["demo", "--bundle", bundle, "--dataset", str(tmp_path / "ds")],
            ["models", "deploy", "--bundle", bundle], ["models", "list"], ["models", "undeploy"],
            ["inspect", "--bundle", bundle, "--index", index, "--port", str(_free_port())],
            ["dashboards", "export", "--index", index, "--out", str(tmp_path / "o.ndjson")],
            ["ingest", str(corpus), "--bundle", bundle, "--index", index,
             "--state-dir", str(tmp_path / "state")]]


def test_no_command_echoes_a_password_in_the_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capfd: pytest.CaptureFixture[str],
                                                 caplog: pytest.LogCaptureFixture) -> None:
    """Every command's error paths, fed a URL with a password (malformed, or well formed with
    no cluster behind it): no output, log line or escaped exception carries the password."""
    import traceback

    from lr_opensearch.cli import main

    for key in ("LR_OPENSEARCH_URL", "LR_OPENSEARCH_USER", "LR_OPENSEARCH_PASSWORD", "LR_BUNDLE"):
        monkeypatch.delenv(key, raising=False)
    closed = f"http://alice:{PASSWORD}@127.0.0.1:{_free_port()}"
    leaks, escaped = [], []
    for argv in _commands(tmp_path):
        for url in (*BAD_URLS, closed):
            caplog.clear()
            try:
                rc = main([*argv, "--url", url])
            except BaseException as exc:  # noqa: BLE001 - the test reads whatever escapes
                rc = exc.code if isinstance(exc, SystemExit) else None
                text = traceback.format_exc()
                if not isinstance(exc, SystemExit):
                    escaped.append(f"{argv[:2]} {url}: {type(exc).__name__}")
            else:
                text = ""
            out, err = capfd.readouterr()
            if PASSWORD in out + err + caplog.text + text:
                leaks.append(f"{' '.join(argv[:2])} --url {url} (exit {rc})")
    assert not leaks, "the password was shown by:\n" + "\n".join(leaks)
    assert not escaped, "an exception escaped:\n" + "\n".join(escaped)


def test_redact_url() -> None:
    from lr_opensearch.engine.client import redact_url

    assert redact_url("http://alice:S3cret@host:9200/x") == "http://alice:***@host:9200/x"
    assert redact_url("http://alice@host:9200") == "http://alice@host:9200"
    assert redact_url("http://host:9200/") == "http://host:9200/"
    for url in ("http://a:S3cret@[::1", "ftp://a:S3cret@:1", "a:S3cret@host", "http://a:b/S3cret@h",
                "http://a:S3c@ret@host", "http://:S3cret@host"):
        assert "S3c" not in redact_url(url), url


@pytest.mark.parametrize(("url", "says"), [
    ("http://127.0.0.1:notaport", "'notaport'"), ("http://127.0.0.1:99999", "out of range"),
    ("http://127.0.0.1:0", "port 0"), ("http://[::1", "IPv6")])
def test_a_malformed_url_is_one_line(url: str, says: str) -> None:
    """A port that is no number, out of range, or an unclosed IPv6 bracket: one line that
    names the URL and what to fix, exit 1, no traceback."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("LR_OPENSEARCH_")}
    done = subprocess.run([sys.executable, "-m", "lr_opensearch.cli", "index", "list", "--url",
                           url], env=env, capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert url in lines[0] and says in lines[0] and "http(s)://host:port" in lines[0]
