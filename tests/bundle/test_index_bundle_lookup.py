"""Searching an index without repeating its bundle (issue 29): ``lr search --index``, ``lr
inspect --index`` and ``lr eval --index`` find the bundle from the index's ``_meta`` (the
path recorded at creation, else the local bundle store by id) and say what to do when it is
not on this machine; ``lr index list``; ``lr inspect --port`` checks its port first."""

from __future__ import annotations

import json
import logging
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ingest_support import ingest_config

from lr_opensearch.cli import main
from lr_opensearch.indexing.run import run as ingest

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy-legs"
LEGACY_ID = "d5f7bc033146c87d682532371ee341c6"

pytestmark = pytest.mark.node


@pytest.fixture()
def indexed(tmp_path: Path, opensearch_url: str, os_client: Any,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """An index made from a copy of the legacy bundle (its path recorded in _meta)."""
    monkeypatch.delenv("LR_BUNDLE", raising=False)
    monkeypatch.setenv("LR_BUNDLE_STORE", str(tmp_path / "store"))  # empty: not searched
    bundle = shutil.copytree(LEGACY / "bundle", tmp_path / "copy" / "bundle")
    index = f"lr-test-lookup-{uuid.uuid4().hex[:8]}"
    ingest(ingest_config(LEGACY / "beir" / "corpus.jsonl.gz", bundle, index, opensearch_url,
                         tmp_path / "state"))
    yield index, bundle
    os_client.indices.delete(index=index, ignore_unavailable=True)


def _search_json(url: str, index: str, capsys: pytest.CaptureFixture[str]) -> Any:
    assert main(["search", "--index", index, "--url", url, "--json", "eiffel tower"]) == 0
    return json.loads(capsys.readouterr().out)


def test_search_finds_the_bundle_from_the_index(indexed: tuple[str, Path], opensearch_url: str,
                                                tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    index, bundle = indexed
    meta = json.loads(json.dumps(
        __import__("opensearchpy").OpenSearch(opensearch_url).indices.get_mapping(index=index)))
    assert meta[index]["mappings"]["_meta"]["lightretriever"]["bundle_path"] == str(bundle)
    hits = _search_json(opensearch_url, index, capsys)[0]["hits"]
    assert hits and hits[0]["doc_id"].startswith("2-")  # the "eiffel tower paris" topic
    # lr index list: the index, its documents, its bundle here
    assert main(["index", "list", "--url", opensearch_url, "--json"]) == 0
    rows = {r["index"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[index]["docs"] == 24 and rows[index]["bundle_id"] == LEGACY_ID
    assert rows[index]["bundle"] == str(bundle)
    # the bundle moves into the store: found there by id
    stored = tmp_path / "store" / "legacy"
    shutil.move(str(bundle), stored)
    assert _search_json(opensearch_url, index, capsys)[0]["hits"][0]["doc_id"] == hits[0]["doc_id"]
    # nowhere on this machine: one line that says where it was and what to do
    shutil.rmtree(stored)
    with caplog.at_level(logging.ERROR):
        assert main(["search", "--index", index, "--url", opensearch_url, "eiffel"]) == 1
    message = caplog.records[-1].getMessage()
    assert LEGACY_ID in message and "not on this machine" in message and "--bundle" in message
    assert main(["index", "list", "--url", opensearch_url]) == 0
    line = next(li for li in capsys.readouterr().out.splitlines() if li.startswith(index))
    assert "no (give --bundle DIR" in line
    # LR_BUNDLE and --bundle still win
    monkeypatch.setenv("LR_BUNDLE", str(LEGACY / "bundle"))
    assert _search_json(opensearch_url, index, capsys)[0]["hits"][0]["doc_id"] == hits[0]["doc_id"]
    # a closed index is listed as closed, not left out
    client = __import__("opensearchpy").OpenSearch(opensearch_url)
    client.indices.close(index=index)
    try:
        assert main(["index", "list", "--url", opensearch_url, "--json"]) == 0
        rows = {r["index"]: r for r in json.loads(capsys.readouterr().out)}
        assert rows[index]["state"] == "closed" and rows[index]["docs"] is None
        assert rows[index]["bundle_id"] == LEGACY_ID
        assert main(["index", "list", "--url", opensearch_url]) == 0
        line = next(li for li in capsys.readouterr().out.splitlines() if li.startswith(index))
        assert "closed" in line
    finally:
        client.indices.open(index=index, wait_for_active_shards=1)


def test_inspect_refuses_a_port_it_cannot_bind(indexed: tuple[str, Path], opensearch_url: str,
                                               caplog: pytest.LogCaptureFixture,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    index, _ = indexed
    with caplog.at_level(logging.ERROR):
        assert main(["inspect", "--index", index, "--url", opensearch_url,
                     "--port", "99999"]) == 1
    assert "not a TCP port" in caplog.records[-1].getMessage()
    assert "http://" not in capsys.readouterr().out  # nothing announced
