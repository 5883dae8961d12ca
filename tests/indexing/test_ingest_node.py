"""Ingest against a real OpenSearch node: exact ids, stored vectors equal to the encoder's,
bad input reported line by line, bundle mismatch refused, stdin, the worker split."""

from __future__ import annotations

import gzip
import io
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ingest_support import (
    build_tiny_bundle,
    data_dir,
    index_ids,
    ingest_cli,
    ingest_config,
    read_corpus,
    write_jsonl,
)

from lr_opensearch.bundle import load_bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import BundleMismatchError
from lr_opensearch.indexing.reader import document_text
from lr_opensearch.indexing.run import run

pytestmark = [pytest.mark.node, pytest.mark.matrix]  # matrix: also run on OpenSearch 2.19

# Lucene's FeatureField keeps the top 17 bits of the float: 8 mantissa bits are truncated
# away, so a stored weight is within a relative 2**-8 of the weight sent.
FEATURE_REL_TOL = 2.0**-8


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("ingest_bundle"))


@pytest.fixture(scope="module")
def tiny_other(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("ingest_bundle_other"), seed=1)


@pytest.fixture(scope="module")
def encoder(tiny: Path) -> Any:
    from lr_opensearch.model import DocEncoder

    return DocEncoder.from_bundle(load_bundle(tiny), device="cpu", batch_size=16)


def _engine_ip(client: Any, index: str, doc_id: str, vector: list[float]) -> float:
    """The inner product the engine computes for one document (exact knn, ids filter)."""
    body = {"size": 1, "_source": False, "query": {"knn": {"lr_dense": {
        "vector": vector, "k": 1, "filter": {"ids": {"values": [doc_id]}}}}}}
    hits = client.search(index=index, body=body)["hits"]["hits"]
    assert [h["_id"] for h in hits] == [doc_id]
    score = hits[0]["_score"]  # OpenSearch: ip >= 0 -> 1 + ip, ip < 0 -> 1 / (1 - ip)
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


def _feature_score(client: Any, index: str, doc_id: str, key: str) -> float:
    body = {"size": 1, "_source": False, "query": {"bool": {
        "filter": [{"ids": {"values": [doc_id]}}],
        "must": [{"rank_feature": {"field": f"lr_sparse.{key}", "linear": {}}}]}}}
    hits = client.search(index=index, body=body)["hits"]["hits"]
    assert [h["_id"] for h in hits] == [doc_id]
    return float(hits[0]["_score"])


def test_real_corpus_lands_with_exact_ids_and_the_encoders_vectors(
        tiny: Path, encoder: Any, os_client: Any, opensearch_url: str, index_name: str,
        tmp_path: Path) -> None:
    corpus = data_dir() / "adi" / "corpus.jsonl.gz"
    docs = read_corpus(corpus)
    summary = run(ingest_config(corpus, tiny, index_name, opensearch_url, tmp_path / "state"),
                  encoder=encoder)
    c = summary.counts
    assert summary.complete and (c.read, c.indexed, c.failed, c.skipped) == (len(docs), len(docs), 0, 0)
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) == len(docs)
    assert set(ids) == {d["_id"] for d in docs}
    settings = os_client.indices.get_settings(index=index_name)[index_name]["settings"]["index"]
    assert settings.get("refresh_interval") in (None, "1s")  # restored, not left at -1
    assert os_client.count(index=index_name)["count"] == len(docs)  # searchable

    bundle = load_bundle(tiny)
    sample = docs[::9]
    expected = encoder.encode([document_text(d.get("title", ""), d["text"]) for d in sample])
    for i, d in enumerate(sample):
        src = os_client.get(index=index_name, id=d["_id"])["_source"]
        assert src["title"] == d.get("title", "") and src["text"] == d["text"]
        dense = np.asarray(expected.dense[i], dtype=np.float64)
        np.testing.assert_allclose(src["lr_dense"], dense, rtol=1e-4, atol=1e-5)
        want = {encode_key(bundle.tokenizer.id_to_token(t)): w for t, w in expected.sparse[i].items()}
        assert set(src["lr_sparse"]) == set(want) and want
        assert len(want) <= bundle.config.sparse_top_k == 24
        for key, w in want.items():
            assert math.isclose(src["lr_sparse"][key], w, rel_tol=1e-4)
        # what the engine holds, read back through scoring
        key, w = max(want.items(), key=lambda kv: kv[1])
        assert math.isclose(_feature_score(os_client, index_name, d["_id"], key), w,
                            rel_tol=FEATURE_REL_TOL)
        ip = _engine_ip(os_client, index_name, d["_id"], src["lr_dense"])
        assert math.isclose(ip, float(dense @ dense), rel_tol=1e-4)


def test_bad_input_is_reported_line_by_line_and_nothing_good_is_lost(
        tiny: Path, encoder: Any, os_client: Any, opensearch_url: str, index_name: str,
        tmp_path: Path) -> None:
    good = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=30)
    huge = "aerodynamic boundary layer " * 400_000  # ~10.8 MB of text
    lines: list[Any] = list(good[:10])
    lines += [
        b'{"_id": "broken", "text": "no closing brace"\n',            # 11 malformed JSON
        {"title": "no id here", "text": "orphan"},                     # 12 missing id
        {"_id": good[0]["_id"], "text": "second occurrence"},          # 13 duplicate id
        {"_id": "empty", "title": "", "text": ""},                     # 14 empty -> skipped
        {"_id": "title-only", "title": "A title and nothing else", "text": ""},  # 15 indexed
        b'{"_id": "latin1", "text": "caf\xe9 cr\xe8me"}\n',             # 16 not UTF-8
        {"_id": "huge", "title": "Huge", "text": huge},                # 17 ~10 MB, truncated
        {"_id": "meta-num", "text": "typed metadata", "year": 1999},   # 18 indexed
        {"_id": "meta-str", "text": "conflicting type", "year": "nineteen ninety"},  # 19 engine refuses
    ]
    lines += list(good[10:])
    corpus = write_jsonl(tmp_path / "dirty.jsonl", lines)
    dead = tmp_path / "dead.jsonl"
    # an existing index whose metadata.year is numeric: the engine must refuse line 19
    OpenSearchAdapter(os_client).create_index(index_name, load_bundle(tiny))
    os_client.indices.put_mapping(index=index_name, body={
        "properties": {"metadata": {"properties": {"year": {"type": "long"}}}}})
    summary = run(ingest_config(corpus, tiny, index_name, opensearch_url, tmp_path / "state",
                                dead_letter=dead), encoder=encoder)
    c = summary.counts
    assert summary.complete
    assert (c.read, c.indexed, c.failed, c.skipped) == (39, 33, 1, 5)
    assert c.reasons == {"malformed_json": 1, "missing_id": 1, "duplicate_id": 1,
                         "empty_document": 1, "invalid_utf8": 1, "mapper_parsing_exception": 1}
    assert c.title_only == 1 and c.truncated >= 1
    entries = {e["line"]: e for e in map(json.loads, dead.read_text().splitlines())}
    assert {k: (v["kind"], v["reason"]) for k, v in entries.items()} == {
        11: ("skipped", "malformed_json"), 12: ("skipped", "missing_id"),
        13: ("skipped", "duplicate_id"), 14: ("skipped", "empty_document"),
        16: ("skipped", "invalid_utf8"), 19: ("failed", "mapper_parsing_exception")}
    assert entries[13]["id"] == good[0]["_id"] and entries[19]["id"] == "meta-str"
    assert "year" in entries[19]["message"]
    expected_ids = {d["_id"] for d in good} | {"title-only", "huge", "meta-num"}
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) and set(ids) == expected_ids
    # the first occurrence of the duplicated id is the one kept
    assert os_client.get(index=index_name, id=good[0]["_id"])["_source"]["text"] == good[0]["text"]
    stored = os_client.get(index=index_name, id="huge")["_source"]
    assert len(stored["text"]) == len(huge) and stored["lr_dense"] and stored["lr_sparse"]
    assert os_client.get(index=index_name, id="meta-num")["_source"]["metadata"] == {"year": 1999}
    # --restart goes through everything again: same counts, same dead letters, no doubles
    again = run(ingest_config(corpus, tiny, index_name, opensearch_url, tmp_path / "state",
                              dead_letter=dead, restart=True), encoder=encoder)
    assert again.docs_this_run == 34 and again.counts == summary.counts
    assert sorted(json.loads(x)["line"] for x in dead.read_text().splitlines()) == sorted(entries)
    assert sorted(index_ids(os_client, index_name)) == sorted(ids)


def test_an_index_of_another_bundle_is_refused_with_nothing_written(
        tiny: Path, tiny_other: Path, encoder: Any, os_client: Any, opensearch_url: str,
        index_name: str, tmp_path: Path) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", read_corpus(data_dir() / "adi" / "corpus.jsonl.gz",
                                                           limit=12))
    first = run(ingest_config(corpus, tiny, index_name, opensearch_url, tmp_path / "s1"),
                encoder=encoder)
    assert first.counts.indexed == 12
    before = os_client.indices.get_settings(index=index_name)
    other_docs = write_jsonl(tmp_path / "o.jsonl", [{"_id": "intruder", "text": "x"}])
    with pytest.raises(BundleMismatchError):
        run(ingest_config(other_docs, tiny_other, index_name, opensearch_url, tmp_path / "s2"))
    assert "intruder" not in index_ids(os_client, index_name)
    assert os_client.count(index=index_name)["count"] == 12
    assert os_client.indices.get_settings(index=index_name) == before
    assert not (tmp_path / "s2").exists() or not any((tmp_path / "s2").iterdir())
    # and through the CLI: a clear message and exit status 1
    proc = ingest_cli([str(other_docs), "--bundle", str(tiny_other), "--index", index_name,
                       "--url", opensearch_url, "--state-dir", str(tmp_path / "s3"), "-q"])
    assert proc.returncode == 1, proc.stderr.decode()
    assert b"bundle" in proc.stderr and index_name.encode() in proc.stderr
    assert os_client.count(index=index_name)["count"] == 12


def test_stdin_and_the_local_launcher(tiny: Path, encoder: Any, os_client: Any,
                                      opensearch_url: str, index_name: str, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz")
    payload = b"".join((json.dumps(d) + "\n").encode() for d in docs[:20]) + b"{bad\n"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(payload)))
    summary = run(ingest_config("-", tiny, index_name, opensearch_url, tmp_path / "s"),
                  encoder=encoder)
    c = summary.counts
    assert summary.complete and summary.checkpoint is None
    assert (c.read, c.indexed, c.skipped) == (21, 20, 1)
    assert os_client.count(index=index_name)["count"] == 20
    # the whole corpus with 2 local worker processes: every id exactly once
    corpus = write_jsonl(tmp_path / "adi.jsonl", docs)
    summary_path = tmp_path / "summary.json"
    proc = ingest_cli([str(corpus), "--bundle", str(tiny), "--index", index_name, "--url",
                       opensearch_url, "--state-dir", str(tmp_path / "s"), "--workers", "2",
                       "--no-progress", "--chunk-size", "16", "--summary-json", str(summary_path)])
    assert proc.returncode == 0, proc.stderr.decode()
    summary = json.loads(summary_path.read_text())
    assert summary["counts"]["indexed"] == len(docs) and summary["workers"] == 2
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) == len(docs) and set(ids) == {d["_id"] for d in docs}


def test_gzip_piped_on_stdin_is_indexed(tiny: Path, os_client: Any, opensearch_url: str,
                                        index_name: str, tmp_path: Path) -> None:
    """``gzip -c c.jsonl | python -m ingest.bulk - ...``: detected by its magic bytes."""
    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=20)
    payload = gzip.compress(b"".join((json.dumps(d) + "\n").encode() for d in docs))
    proc = ingest_cli(["-", "--bundle", str(tiny), "--index", index_name, "--url",
                       opensearch_url, "--state-dir", str(tmp_path / "s"), "--no-progress"],
                      stdin=payload)
    assert proc.returncode == 0, proc.stderr.decode()
    ids = index_ids(os_client, index_name)
    assert len(ids) == len(set(ids)) and set(ids) == {d["_id"] for d in docs}
