"""A bulk request refused as a whole (by the cluster's security, a gateway or a proxy in
front of it) is not about any one document: the run stops before the chunk is settled
(nothing dead-lettered, the checkpoint not advanced), says what the cluster answered and
what to do, and the same command against a healthy node then indexes everything.

Each case puts tests/refusing_proxy.py in front of the real node: it answers every
``_bulk`` with the refusal and forwards every other request (the index is created, its
settings read and set, through it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ingest_support import (
    Here,
    build_tiny_bundle,
    checkpoint_indexed,
    data_dir,
    dead_letters,
    index_ids,
    read_corpus,
    write_jsonl,
)
from refusing_proxy import Answer, RefusingProxy

pytestmark = [pytest.mark.node, pytest.mark.matrix]


def _error(kind: str, reason: str, status: int) -> bytes:
    """An engine's (or its security plugin's) JSON error answer."""
    error = {"root_cause": [{"type": kind, "reason": reason}], "type": kind, "reason": reason}
    return json.dumps({"error": error, "status": status}).encode()


def _page(title: str) -> bytes:
    return f"<html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>".encode()


HTML = "text/html"
# refusal -> (the proxy's answer, what the one error line must say)
REFUSALS: dict[str, tuple[Answer, list[str]]] = {
    "401": (Answer(401, b"Unauthorized", "text/plain; charset=UTF-8"),
            ["HTTP 401", "Unauthorized", "--password"]),
    "403": (Answer(403, _error("security_exception", "no permissions for "
                               "[indices:data/write/bulk] and User [name=reader]", 403)),
            ["HTTP 403", "security_exception", "indices:data/write/bulk", "permission"]),
    "404-index": (Answer(404, _error("index_not_found_exception", "no such index [x]", 404)),
                  ["HTTP 404", "index_not_found_exception", "--url"]),
    "413": (Answer(413, _page("413 Request Entity Too Large"), HTML),
            ["HTTP 413", "413 Request Entity Too Large", "client_max_body_size"]),
    "429": (Answer(429, _error("rejected_execution_exception", "rejected execution of "
                               "coordinating operation", 429)),
            ["HTTP 429", "rejected_execution_exception", "attempts"]),
    "500": (Answer(500, _error("exception", "injected failure", 500)),
            ["HTTP 500", "injected failure", "attempts"]),
    "502-html": (Answer(502, _page("502 Bad Gateway"), HTML),
                 ["HTTP 502", "502 Bad Gateway", "attempts"]),
    "200-html": (Answer(200, _page("Sign in - Corporate SSO"), HTML),
                 ["not JSON", "text/html", "--url"]),
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("request_refusals_bundle"))


@pytest.fixture(scope="module")
def adi() -> list[dict[str, Any]]:
    return read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=25)


@pytest.mark.parametrize("refusal", list(REFUSALS))
def test_a_refused_bulk_request_stops_the_run_and_the_rerun_indexes_everything(
        refusal: str, tiny: Path, adi: list[dict[str, Any]], os_client: Any,
        opensearch_url: str, index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    answer, says = REFUSALS[refusal]
    corpus = write_jsonl(tmp_path / "c.jsonl", adi)
    dead = tmp_path / "dead.jsonl"

    def args(url: str) -> list[str]:
        return [str(corpus), "--bundle", str(tiny), "--index", index_name, "--url", url,
                "--state-dir", str(tmp_path / "state"), "--dead-letter", str(dead),
                "--no-progress", "--chunk-size", "10", "--max-attempts", "2",
                "--initial-backoff", "0.01", "--max-backoff", "0.02"]

    with RefusingProxy(opensearch_url, answer) as proxy:
        code, errors = ingest_here(args(proxy.url))
    assert proxy.bulk_requests >= 1
    assert code == 1 and len(errors) == 1, errors
    (error,) = errors
    for words in [*says, index_name, "rerun the same command"]:
        assert words in error, (words, error)
    assert "<html" not in error  # the page's title, not the page
    assert not [d for d in dead_letters(dead) if d["kind"] == "failed"]
    assert checkpoint_indexed(tmp_path / "state") <= 0
    assert os_client.count(index=index_name)["count"] == 0
    # the same command, straight to the node: everything lands
    code, errors = ingest_here(args(opensearch_url))
    assert code == 0, errors
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) and set(ids) == {d["_id"] for d in adi}
