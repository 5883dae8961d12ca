"""Elasticsearch as a first-class engine, against the real Elasticsearch node: ingest through
the ``elasticsearch`` client's bulk helpers (engine detected from the cluster's answer) with
resume after SIGKILL, dead letters, retries and the bundle check; ``lr index``, ``lr search
--explain`` and ``lr eval`` with ``--engine elasticsearch``; the same figures as OpenSearch."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ingest_support import (
    REPO,
    build_tiny_bundle,
    checkpoint_indexed,
    data_dir,
    ingest_cli,
    ingest_config,
    read_corpus,
    wait_for_checkpoint,
    write_jsonl,
)

from lr_opensearch.bundle import load_bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.engine.client import connect
from lr_opensearch.engine.elasticsearch import ElasticsearchAdapter, es_capabilities
from lr_opensearch.errors import BundleMismatchError, ConfigError
from lr_opensearch.indexing.reader import document_text
from lr_opensearch.indexing.run import run
from lr_opensearch.search.explain import LUCENE_FEATURE_REL_TOL

pytestmark = pytest.mark.node

BAD_LINES = {23: b"{not json\n", 61: b'{"title": "no id", "text": "x"}\n'}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("es_ingest_bundle"))


@pytest.fixture()
def es_index(es_client: Any) -> Iterator[str]:
    name = f"lr-test-es-ingest-{uuid.uuid4().hex[:8]}"
    yield name
    es_client.indices.delete(index=name, ignore_unavailable=True)


def _es_ids(client: Any, index: str) -> list[str]:
    client.indices.refresh(index=index)
    resp = client.search(index=index, query={"match_all": {}}, source=False, size=10_000)
    return [h["_id"] for h in resp["hits"]["hits"]]


def _dirty_corpus(path: Path, n: int) -> tuple[Path, list[dict[str, Any]]]:
    docs = read_corpus(data_dir() / "cranfield" / "corpus.jsonl.gz", limit=n)
    lines: list[Any] = list(docs)
    for line_no in sorted(BAD_LINES):
        lines.insert(line_no - 1, BAD_LINES[line_no])
    return write_jsonl(path, lines), docs



def test_connect_detects_each_engine_and_refuses_the_wrong_one(
        es_url: str, opensearch_url: str) -> None:
    from elasticsearch import Elasticsearch
    from opensearchpy import OpenSearch

    assert isinstance(connect(es_url), Elasticsearch)
    assert isinstance(connect(opensearch_url), OpenSearch)
    assert isinstance(connect(es_url, engine="elasticsearch"), Elasticsearch)
    with pytest.raises(ConfigError, match="is OpenSearch 3"):
        connect(opensearch_url, engine="elasticsearch")
    with pytest.raises(ConfigError, match="is Elasticsearch 9"):
        connect(es_url, engine="opensearch")


def test_ingest_on_elasticsearch_resumes_after_sigkill_and_keeps_dead_letters(
        tiny: Path, es_client: Any, es_url: str, es_index: str, tmp_path: Path) -> None:
    """``python -m ingest.bulk`` with the engine detected: killed once mid-run, resumed;
    exactly the good ids land, each bad line is reported once, vectors are the encoder's."""
    n = 160
    corpus, docs = _dirty_corpus(tmp_path / "c.jsonl", n)
    state, dead, summary_path = tmp_path / "state", tmp_path / "dead.jsonl", tmp_path / "s.json"
    args = [str(corpus), "--bundle", str(tiny), "--index", es_index, "--url", es_url,
            "--state-dir", str(state), "--dead-letter", str(dead), "--chunk-size", "8",
            "--batch-size", "8", "--sort-window", "24", "--no-progress", "-q",
            "--summary-json", str(summary_path)]
    proc = subprocess.Popen([sys.executable, "-m", "ingest.bulk", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    wait_for_checkpoint(proc, state, 40, pause=0.005)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert proc.returncode == -signal.SIGKILL, f"finished before the kill: {err.decode()}"
    acked = checkpoint_indexed(state)
    assert 40 <= acked < n
    es_client.indices.refresh(index=es_index)
    assert es_client.count(index=es_index)["count"] >= acked  # the checkpoint never lies
    # the killed run left the load settings on the index; the resumed run restores them
    final = ingest_cli([*args, "--engine", "elasticsearch"])
    assert final.returncode == 3, final.stderr.decode()  # 3: bad lines were skipped
    summary = json.loads(summary_path.read_text())
    c = summary["counts"]
    assert (c["read"], c["indexed"], c["failed"], c["skipped"]) == (n + 2, n, 0, 2)
    assert summary["resumed_from_line"] > 0 and summary["complete"]
    ids = _es_ids(es_client, es_index)
    assert len(ids) == len(set(ids)) == n and set(ids) == {d["_id"] for d in docs}
    assert sorted(json.loads(x)["line"] for x in dead.read_text().splitlines()) == sorted(BAD_LINES)
    settings = es_client.indices.get_settings(index=es_index)[es_index]["settings"]["index"]
    assert settings.get("refresh_interval") in (None, "1s")  # restored, not left at -1
    # stored vectors are the encoder's; the engine's scores agree with them
    from lr_opensearch.model import DocEncoder

    bundle = load_bundle(tiny)
    encoder = DocEncoder.from_bundle(bundle, device="cpu", batch_size=8)
    sample = docs[::17]
    expected = encoder.encode([document_text(d.get("title", ""), d["text"]) for d in sample])
    for i, d in enumerate(sample):
        src = es_client.get(index=es_index, id=d["_id"])["_source"]
        assert src["text"] == d["text"]
        np.testing.assert_allclose(src["lr_dense"], expected.dense[i], rtol=1e-4, atol=1e-5)
        want = {encode_key(bundle.tokenizer.id_to_token(t)): w
                for t, w in expected.sparse[i].items()}
        assert set(src["lr_sparse"]) == set(want) and want
        key, w = max(want.items(), key=lambda kv: kv[1])
        hit = es_client.search(index=es_index, size=1, query={"bool": {
            "must": [{"term": {"lr_sparse": {"value": key}}}],
            "filter": [{"ids": {"values": [d["_id"]]}}]}})["hits"]["hits"][0]
        assert math.isclose(hit["_score"], w, rel_tol=LUCENE_FEATURE_REL_TOL)
    # a finished ingest does nothing when rerun
    again = run(ingest_config(corpus, tiny, es_index, es_url, state, chunk_size=8,
                              batch_size=8, sort_window=24, dead_letter=dead))
    assert again.complete and again.docs_this_run == 0 and again.counts.indexed == n


def test_an_elasticsearch_index_of_another_bundle_is_refused_with_nothing_written(
        tiny: Path, es_client: Any, es_url: str, es_index: str, tmp_path: Path) -> None:
    other = build_tiny_bundle(tmp_path / "other", seed=1)
    assert ElasticsearchAdapter(es_client).create_index(es_index, load_bundle(other))
    corpus = write_jsonl(tmp_path / "c.jsonl",
                         read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=10))
    with pytest.raises(BundleMismatchError, match="bundle_id"):
        run(ingest_config(corpus, tiny, es_index, es_url, tmp_path / "state"))
    assert es_client.count(index=es_index)["count"] == 0


class FaultyESClient:
    """The real Elasticsearch client, except that ``bulk`` follows a fault plan first:
    plan(call_number) -> None (pass through), "429" (the whole request refused) or "down"
    (no answer). The bulk helper calls ``options()`` first: that returns this wrapper too."""

    lr_engine = "elasticsearch"

    def __init__(self, real: Any, plan: Callable[[int], Any], state: dict[str, int] | None = None):
        self._real = real
        self._plan = plan
        self._state = state if state is not None else {"calls": 0, "faults": 0}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def options(self, **kwargs: Any) -> FaultyESClient:
        return FaultyESClient(self._real.options(**kwargs), self._plan, self._state)

    def bulk(self, *args: Any, **kwargs: Any) -> Any:
        from elastic_transport import ApiResponseMeta, ConnectionError, HttpHeaders, NodeConfig
        from elasticsearch import ApiError

        self._state["calls"] += 1
        fault = self._plan(self._state["calls"])
        if fault is None:
            return self._real.bulk(*args, **kwargs)
        self._state["faults"] += 1
        if fault == "down":
            raise ConnectionError("injected: connection refused")
        meta = ApiResponseMeta(status=429, http_version="1.1", headers=HttpHeaders(),
                               duration=0.0, node=NodeConfig("http", "127.0.0.1", 1))
        raise ApiError("es_rejected_execution_exception", meta,
                       {"error": {"type": "es_rejected_execution_exception",
                                  "reason": "injected"}, "status": 429})


def test_refused_and_unanswered_bulk_requests_are_retried_on_elasticsearch(
        tiny: Path, es_client: Any, es_url: str, es_index: str, tmp_path: Path) -> None:
    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=60)
    corpus = write_jsonl(tmp_path / "c.jsonl", docs)
    faulty = FaultyESClient(es_client, lambda call: {1: "429", 2: "down", 4: "429"}.get(call))
    summary = run(ingest_config(corpus, tiny, es_index, es_url, tmp_path / "state",
                                chunk_size=20), client=faulty)
    assert faulty._state["faults"] == 3 and summary.retries == 3
    assert summary.counts.indexed == len(docs) and summary.counts.failed == 0
    assert sorted(_es_ids(es_client, es_index)) == sorted(d["_id"] for d in docs)


def test_capabilities_of_the_installed_elasticsearch(es_client: Any) -> None:
    """The integ-test distribution has no rank-rrf module and a basic licence: no fusion
    retrievers, and the reason names the module."""
    caps = es_capabilities(es_client)
    assert caps.version.startswith("9.") and "x-pack-core" in caps.modules
    assert caps.licence == "basic" and caps.licence_active
    assert caps.retrievers == () and "rank-rrf" in caps.why_not


def _assert_same_rankings(a_path: Path, b_path: Path, k: int = 10) -> None:
    """Two TREC runs rank every query's top ``k`` alike: equal scores position by position
    (engine rounding aside) and the same document wherever the score is not tied."""
    from lr_opensearch.evaluation import read_trec

    a_run, b_run = read_trec(a_path), read_trec(b_path)
    assert set(a_run) == set(b_run)
    for qid in a_run:
        a, b = a_run[qid][:k], b_run[qid][:k]
        assert [s for _, s in a] == pytest.approx([s for _, s in b], rel=1e-4, abs=1e-6), qid
        scores = [s for _, s in a]
        for pos, ((da, sa), (db, _)) in enumerate(zip(a, b, strict=True)):
            tied = sum(abs(s - sa) <= 1e-6 * max(1.0, abs(sa)) for s in scores) > 1
            assert da == db or tied or pos == len(a) - 1, (qid, pos, da, db)


def _lr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lr_opensearch.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=600, check=False,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})


def test_lr_commands_on_elasticsearch_and_the_same_figures_as_opensearch(
        tiny: Path, es_client: Any, es_url: str, os_client: Any, opensearch_url: str,
        tmp_path: Path) -> None:
    """``lr index create / info``, ``lr search --explain`` (with the fallback's log line) and
    ``lr eval`` with ``--engine elasticsearch``; lr-dense and lr-sparse on ADI score the same
    as on OpenSearch (same vectors, exact HNSW at this size, same feature rounding)."""
    index = f"lr-test-es-cli-{uuid.uuid4().hex[:8]}"
    os_index = f"lr-test-os-cli-{uuid.uuid4().hex[:8]}"
    adi = data_dir() / "adi"
    try:
        made = _lr("index", "create", "--engine", "elasticsearch", "--url", es_url,
                   "--bundle", str(tiny), "--index", index)
        assert made.returncode == 0, made.stderr
        assert "created Elasticsearch index" in made.stdout and "sparse_vector" in made.stdout
        out = {}
        for engine, url, name in (("elasticsearch", es_url, index),
                                  ("opensearch", opensearch_url, os_index)):
            res = _lr("eval", "--dataset", str(adi), "--bundle", str(tiny), "--index", name,
                      "--url", url, "--engine", engine, "--runs", "bm25,lr-dense,lr-sparse,lr-hybrid",
                      "--no-sweep", "--json", "--out", str(tmp_path / engine))
            assert res.returncode == 0, res.stderr
            out[engine] = json.loads(res.stdout.strip().splitlines()[-1])
        es, os_ = out["elasticsearch"], out["opensearch"]
        assert es["engine"] == "elasticsearch" and os_["engine"] == "opensearch"
        assert es["index_status"] == "ingested"  # into the index lr index create made
        for run_name in ("lr-dense", "lr-sparse", "lr-hybrid"):
            # per query, the same ranking (positions may swap only between equal scores)
            _assert_same_rankings(tmp_path / "elasticsearch" / "runs" / f"{run_name}.trec",
                                  tmp_path / "opensearch" / "runs" / f"{run_name}.trec")
            a, b = es["runs"][run_name]["ndcg@10"], os_["runs"][run_name]["ndcg@10"]
            assert a == pytest.approx(b, abs=1e-4), run_name
        assert es["runs"]["bm25"]["ndcg@10"] > 0.1
        info = _lr("index", "info", index, "--url", es_url)
        assert info.returncode == 0, info.stderr
        assert "(Elasticsearch)" in info.stdout and "documents  82" in info.stdout
        assert "max_inner_product" in info.stdout and "sparse_vector" in info.stdout
        found = _lr("search", "--bundle", str(tiny), "--index", index, "--url", es_url,
                    "--engine", "elasticsearch", "--explain", "--k", "3",
                    "computer information retrieval")
        assert found.returncode == 0, found.stderr
        assert found.stdout.count("dense ip") == 3  # one explanation per hit
        assert "fuses client side" in found.stderr and "semantics 'opensearch'" in found.stderr
        linear = _lr("search", "--bundle", str(tiny), "--index", index, "--url", es_url,
                     "--semantics", "linear", "--json", "information")
        assert linear.returncode == 0, linear.stderr
        assert "fuses client side" in linear.stderr and "rank-rrf" in linear.stderr
        assert len(json.loads(linear.stdout)[0]["hits"]) == 10
        forced = _lr("search", "--bundle", str(tiny), "--index", index, "--url", es_url,
                     "--fusion", "server", "--semantics", "linear", "information")
        assert forced.returncode != 0 and "rank-rrf" in forced.stderr
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)
        os_client.indices.delete(index=os_index, ignore_unavailable=True)
