"""The real bundle through every user path (slow tier).

The bundle is the one the README builds: the packaged MiniLM (384 dimensions, 30,522
tokens) with its query table fitted on ADI (conftest's ``fitted_minilm``: built once into
the bundle store, then reused). ADI's 82 documents are ingested once with ``python -m
ingest.bulk`` into one ml-commons node (which has k-NN and neural-search too), and every
path runs on that index or beside it:

- ``lr models deploy`` (a dense zip of about 22 MB: three upload chunks), the cluster's
  query vectors against the client's, the text-only request of docs/IN_CLUSTER.md and
  ``lr search --in-cluster`` against ``lr search`` (``TestInCluster``: for this bundle and
  for bge-small-en-v1.5 fitted on ADI, conftest's ``fitted_bge``: 12 layers, CLS pooling,
  its query prompt in every table row, ingested into a second index of the same node);
- Elasticsearch ingest and search; Ray ingest; the SEISMIC (``sparse_vector``) layout;
- ``lr inspect`` in headless Chromium; ``lr eval``; ``lr dashboards export``;
- the LLM vocabulary through ``lr models deploy``: SmolLM2's tokenizer (49,152 tokens) with a
  576-dimension table (random, not fitted: fitting SmolLM2 costs minutes more, and what the
  deploy path depends on - the tokenizer, the zip's size - is the real one), equal vectors
  and the in-cluster ranking against the client's.

Cost: the two fits (first run on a machine only; bge's took 472 s at load 4-5), one ml node
and one Elasticsearch node start, a Ray start, Chromium; see docs/RESULTS.md for the
measured time.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from incluster_support import collection_index, ndcg10, read_jsonl, running_ml_node
from ingest_support import REPO, data_dir

from lr_opensearch.bundle import Bundle, load_bundle
from lr_opensearch.cluster import export_dense
from lr_opensearch.engine import mlapi
from lr_opensearch.engine.client import make_client
from lr_opensearch.indexing import ConnectionConfig, IngestConfig
from lr_opensearch.indexing.run import run
from lr_opensearch.node import NodeConfig
from lr_opensearch.options import DEFAULT_CANDIDATES
from lr_opensearch.query import QueryEncoder
from lr_opensearch.search import QueryEncoding, Retriever

pytestmark = [pytest.mark.slow, pytest.mark.node, pytest.mark.ml]

ADI = data_dir() / "adi"
INDEX = "lr-real-adi"
INDEX_BGE = "lr-real-adi-bge"
BGE_PROMPT = "Represent this sentence for searching relevant passages: "
#: odd query texts: quotes, accents, CJK, an emoji among words, a hyphenated word
ODD_TEXTS = ['"boundary layer" heat transfer', "naïve café über don't",
             "Schrödinger's équation: “quoted” ‘text’ — done", "数据检索 retrieval",
             "search 🔍 engines", "state-of-the-art indexing (1960s)"]
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def _cli(*args: str, module: str = "lr_opensearch.cli",
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, text=True,
                          capture_output=True, timeout=timeout, check=False,
                          env={**os.environ, **CHILD_ENV})


def _lr_json(capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """``lr ARGS --json`` in this process; its JSON output."""
    from lr_opensearch.cli import main

    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def ml_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeConfig]:
    with running_ml_node(tmp_path_factory.mktemp("real-ml-node"), "the real-bundle tests") as config:
        yield config


@pytest.fixture(scope="module")
def client(ml_node: NodeConfig) -> Any:
    return make_client(ml_node.url, timeout=180)


def _ingested(path: Path, index: str, url: str, client: Any, state: Path) -> dict[str, Any]:
    """ADI ingested with the bundle at ``path`` by ``python -m ingest.bulk``; the bundle, the
    judged queries, qrels and every document's stored vectors."""
    proc = _cli(str(ADI / "corpus.jsonl.gz"), "--bundle", str(path), "--index", index,
                "--url", url, "--state-dir", str(state), "--no-progress", "-q",
                module="ingest.bulk")
    assert proc.returncode == 0, proc.stderr[-3000:]
    qrels: dict[str, dict[str, int]] = {}
    for line in (ADI / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    queries = [q for q in read_jsonl(ADI / "queries.jsonl.gz") if str(q["_id"]) in qrels]
    docs = _stored(client, index)
    assert len(docs) == len(read_jsonl(ADI / "corpus.jsonl.gz")) == 82
    return {"bundle": load_bundle(path), "path": path, "index": index, "queries": queries,
            "texts": [q["text"] for q in queries], "qrels": qrels, "docs": docs}


@pytest.fixture(scope="module")
def adi(fitted_minilm: Path, ml_node: NodeConfig, client: Any,
        tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """ADI ingested with the real bundle by ``python -m ingest.bulk``; the judged queries,
    qrels and every document's stored vectors."""
    return _ingested(fitted_minilm, INDEX, ml_node.url, client, tmp_path_factory.mktemp("state"))


def _stored(client: Any, index: str) -> dict[str, dict[str, Any]]:
    """Every document's ``_source`` (vectors included) by id."""
    client.indices.refresh(index=index)
    res = client.search(index=index, body={"query": {"match_all": {}}, "size": 1000})
    return {h["_id"]: h["_source"] for h in res["hits"]["hits"]}


def _same_vectors(got: dict[str, dict[str, Any]], want: dict[str, dict[str, Any]]) -> None:
    """The same ids, dense vectors equal (float32 sums in another batch), sparse keys equal
    and weights within 1e-4."""
    assert got.keys() == want.keys()
    for doc_id, doc in want.items():
        np.testing.assert_allclose(got[doc_id]["lr_dense"], doc["lr_dense"], rtol=1e-4,
                                   atol=1e-5, err_msg=doc_id)
        assert got[doc_id]["lr_sparse"].keys() == doc["lr_sparse"].keys(), doc_id
        assert [got[doc_id]["lr_sparse"][k] for k in doc["lr_sparse"]] == pytest.approx(
            list(doc["lr_sparse"].values()), rel=1e-4, abs=1e-5), doc_id


def _ids(results: list[list[Any]]) -> list[list[str]]:
    return [[h.doc_id for h in hits] for hits in results]


def _json_ids(results: list[dict[str, Any]]) -> list[list[str]]:
    return [[h["doc_id"] for h in r["hits"]] for r in results]


def _mean_ndcg(ranked: list[list[str]], adi: dict[str, Any]) -> float:
    return float(np.mean([ndcg10(ids, adi["qrels"][str(q["_id"])])
                          for ids, q in zip(ranked, adi["queries"], strict=True)]))


def _same_ranking(got: list[list[str]], want: list[list[str]], adi: dict[str, Any],
                  what: str) -> None:
    """Identical top 10s, or (float ties between two paths' encodings may swap a pair) at most
    one list different and nDCG@10 within 0.002."""
    same = sum(a == b for a, b in zip(got, want, strict=True))
    gap = abs(_mean_ndcg(got, adi) - _mean_ndcg(want, adi))
    print(f"\n[real bundle] {what}: identical top 10 for {same} of {len(want)}, nDCG@10 "
          f"{_mean_ndcg(want, adi):.4f} vs {_mean_ndcg(got, adi):.4f}")
    assert same == len(want) or (same >= len(want) - 1 and gap <= 0.002), (what, same, gap)


def _brute_force_dense(bundle: Bundle, texts: list[str],
                       docs: dict[str, dict[str, Any]]) -> list[list[str]]:
    """The exact inner-product top 10 of each query over the stored document vectors."""
    ids = list(docs)
    matrix = np.array([docs[i]["lr_dense"] for i in ids], np.float32)
    queries = QueryEncoder(bundle).encode_batch(texts).dense
    scores = queries @ matrix.T
    return [[ids[j] for j in np.argsort(-row, kind="stable")[:10]] for row in scores]


# --- lr models deploy, the text-only request, lr search --in-cluster ------------------------


def _deploy(path: Path, index: str, url: str) -> dict[str, Any]:
    """``lr models deploy --bundle B --index I --default-pipeline --json``: its record."""
    from lr_opensearch.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["models", "deploy", "--bundle", str(path), "--index", index,
                     "--default-pipeline", "--url", url, "--json"]) == 0
    return dict(json.loads(out.getvalue()))


@pytest.fixture(scope="module")
def deployed(adi: dict[str, Any], ml_node: NodeConfig) -> dict[str, Any]:
    return _deploy(adi["path"], INDEX, ml_node.url)


@pytest.fixture(scope="class", params=["minilm", "bge-small"])
def real(request: pytest.FixtureRequest, ml_node: NodeConfig, client: Any,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The in-cluster path's two real bundles, each ingested and deployed (its record under
    ``deployed``): MiniLM (6 layers, mean pooling, no prompt) and bge-small-en-v1.5 (12
    layers, CLS pooling, its query prompt inside every table row; conftest's
    ``fitted_bge``). Class-scoped: bge's models are removed again when ``TestInCluster`` is
    done (with them still deployed, SmolLM2's 53 MB upload trips the 1 GB node's heap
    breaker)."""
    if request.param == "minilm":
        yield {**request.getfixturevalue("adi"), "deployed": request.getfixturevalue("deployed")}
        return
    path = request.getfixturevalue("fitted_bge")
    coll = _ingested(path, INDEX_BGE, ml_node.url, client, tmp_path_factory.mktemp("state-bge"))
    assert coll["bundle"].config.pooling == "cls" and dict(coll["bundle"].instructions) == {
        "default": BGE_PROMPT}
    try:
        yield {**coll, "deployed": _deploy(path, INDEX_BGE, ml_node.url)}
    finally:
        from lr_opensearch.cluster import undeploy_bundle

        undeploy_bundle(client, coll["bundle"].bundle_id, delete=True)  # frees the node's memory
        client.indices.delete(index=INDEX_BGE, ignore_unavailable=True)


class TestInCluster:
    """``lr models deploy``, the cluster's vectors, the text-only request and `lr search
    --in-cluster`, for each real bundle (``real``)."""

    def test_models_deploy_uploads_the_real_bundle_in_chunks(self, real: dict[str, Any],
                                                             client: Any) -> None:
        deployed = real["deployed"]
        dense = export_dense(real["bundle"], max_tokens=deployed["max_tokens"])
        chunks = math.ceil(len(dense.data) / mlapi.UPLOAD_CHUNK_LIMIT)
        print(f"\n[real bundle {real['bundle'].config.backbone_name}] dense zip "
              f"{len(dense.data):,} bytes: {chunks} chunks")
        assert len(dense.data) > 2 * mlapi.UPLOAD_CHUNK_LIMIT  # the case the toy bundles missed
        assert deployed["actions"] == {"dense": "uploaded", "sparse": "uploaded"}
        model = mlapi.get_model(client, deployed["dense_model_id"])
        assert model["total_chunks"] == chunks and model["model_content_hash_value"] == dense.sha256
        for key in ("dense_model_id", "sparse_model_id"):
            assert mlapi.state_of(client, deployed[key]) == mlapi.DEPLOYED

    def test_cluster_vectors_equal_the_client(self, real: dict[str, Any], client: Any) -> None:
        """ADI's judged queries, odd texts (quotes, accents, CJK, an emoji) and one longer than
        the cap: the cluster's dense vector is the client QueryEncoder's (for bge, the rows of
        its prompt-bearing table), its sparse map the client's."""
        deployed = real["deployed"]
        enc = QueryEncoder(real["bundle"], max_tokens=deployed["max_tokens"])
        long_text = " ".join(real["texts"])
        assert len(QueryEncoder(real["bundle"], max_tokens=4096).encode(long_text).token_ids) > \
            deployed["max_tokens"]
        texts = [*real["texts"], *ODD_TEXTS, long_text]
        worst = 1.0
        for text in texts:
            ours = enc.encode(text)
            dense = np.array(mlapi.predict_dense(client, deployed["dense_model_id"], text),
                             np.float32)
            cos = float(dense @ ours.dense / np.linalg.norm(dense) / np.linalg.norm(ours.dense))
            worst = min(worst, cos)
            assert cos >= 0.9999, (text, cos)
            np.testing.assert_allclose(dense, ours.dense, rtol=1e-4, atol=1e-5, err_msg=text)
            sparse = mlapi.predict_sparse(client, deployed["sparse_model_id"], text)
            assert sparse.keys() == ours.sparse.keys(), text
            assert [sparse[k] for k in ours.sparse] == pytest.approx(list(ours.sparse.values()),
                                                                     rel=1e-6)
        print(f"\n[real bundle {real['bundle'].config.backbone_name}] {len(texts)} queries: "
              f"min cosine {worst:.7f}, sparse equal")

    def test_the_text_only_request_ranks_as_lr_search(self, real: dict[str, Any], client: Any,
                                                      ml_node: NodeConfig,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
        """docs/IN_CLUSTER.md's curl body, as written there (text only, the index's default
        pipeline fuses), against ``lr search`` with the same candidates."""
        depth = 100
        cluster = []
        for text in real["texts"]:
            body = {"size": 10, "_source": {"excludes": ["lr_dense", "lr_sparse"]},
                    "query": {"hybrid": {"pagination_depth": depth, "queries": [
                        {"neural": {"lr_dense": {"query_text": text, "k": depth}}},
                        {"neural_sparse": {"lr_sparse": {"query_text": text}}},
                        {"multi_match": {"query": text, "fields": ["title", "text"]}}]}}}
            cluster.append([h["_id"] for h in
                            client.search(index=real["index"], body=body)["hits"]["hits"]])
        ours = _lr_json(capsys, "search", "--index", real["index"], "--bundle", str(real["path"]),
                        "--url", ml_node.url, "--candidates", str(depth), *real["texts"])
        _same_ranking(cluster, _json_ids(ours), real,
                      f"{real['bundle'].config.backbone_name}: text-only request vs lr search")

    def test_lr_search_in_cluster_ranks_as_lr_search(self, real: dict[str, Any],
                                                     ml_node: NodeConfig,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
        common = ("search", "--index", real["index"], "--bundle", str(real["path"]), "--url",
                  ml_node.url)
        ours = _lr_json(capsys, *common, *real["texts"])
        theirs = _lr_json(capsys, *common, "--in-cluster", *real["texts"])
        _same_ranking(_json_ids(theirs), _json_ids(ours), real,
                      f"{real['bundle'].config.backbone_name}: lr search --in-cluster vs lr search")
        assert all(len(r["hits"]) == 10 for r in theirs)


# --- the other engines and layouts --------------------------------------------------------


def _ingest(adi: dict[str, Any], url: str, index: str, state: Path, **options: Any) -> None:
    """The ingest library's run (what ``python -m ingest.bulk`` calls), with the module's
    one document encoder."""
    if "encoder" not in adi:
        from lr_opensearch.model import DocEncoder

        adi["encoder"] = DocEncoder.from_bundle(adi["bundle"], device="cpu")
    summary = run(IngestConfig(corpus=str(ADI / "corpus.jsonl.gz"), bundle=str(adi["path"]),
                               index=index, connection=ConnectionConfig(url=url),
                               state_dir=state, progress=False, **options),
                  encoder=adi["encoder"])
    assert summary.counts.indexed == 82, summary


def test_elasticsearch_ingest_and_search(adi: dict[str, Any], es_url: str, es_client: Any,
                                         client: Any, tmp_path: Path) -> None:
    """The same vectors as on OpenSearch; the dense leg's top 10 is the exact one; the hybrid
    (client fusion, as on OpenSearch) within 0.01 nDCG@10 of OpenSearch's."""
    index = f"lr-real-es-{uuid.uuid4().hex[:8]}"
    try:
        _ingest(adi, es_url, index, tmp_path / "state")
        _same_vectors(_stored(es_client, index), adi["docs"])
        es = Retriever(adi["bundle"], es_client, index)
        dense = _ids(es.search_batch(adi["texts"], 10, mode="dense"))
        assert dense == _brute_force_dense(adi["bundle"], adi["texts"], adi["docs"])
        hybrid = _ids(es.search_batch(adi["texts"], 10))
        opensearch = _ids(Retriever(adi["bundle"], client, INDEX).search_batch(adi["texts"], 10))
        gap = abs(_mean_ndcg(hybrid, adi) - _mean_ndcg(opensearch, adi))
        same = sum(a == b for a, b in zip(hybrid, opensearch, strict=True))
        print(f"\n[real bundle] Elasticsearch hybrid: identical top 10 for {same} of "
              f"{len(hybrid)}; nDCG@10 {_mean_ndcg(hybrid, adi):.4f} (OpenSearch "
              f"{_mean_ndcg(opensearch, adi):.4f})")
        assert gap <= 0.01
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)


def test_ingest_at_mixed_precision(adi: dict[str, Any], ml_node: NodeConfig, client: Any,
                                   tmp_path: Path) -> None:
    """``python -m ingest.bulk --encode-precision mixed`` with the real bundle: the stored
    dense vectors are mixed's (not fp32's: they differ), within cosine 0.999 of fp32's
    index for every document, and LR hybrid on the test queries within 0.01 nDCG@10 of
    fp32's (docs/RESULTS.md measured -0.0041 on ADI)."""
    index = f"lr-real-mixed-{uuid.uuid4().hex[:8]}"
    try:
        proc = _cli(str(ADI / "corpus.jsonl.gz"), "--bundle", str(adi["path"]), "--index", index,
                    "--url", ml_node.url, "--state-dir", str(tmp_path / "state"), "--no-progress",
                    "-q", "--encode-precision", "mixed", module="ingest.bulk")
        assert proc.returncode == 0, proc.stderr[-3000:]
        docs = _stored(client, index)
        assert docs.keys() == adi["docs"].keys()
        got = np.asarray([docs[d]["lr_dense"] for d in adi["docs"]])
        want = np.asarray([adi["docs"][d]["lr_dense"] for d in adi["docs"]])
        cosine = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
        assert cosine.min() >= 0.999 and np.abs(got - want).max() > 0
        mixed = _mean_ndcg(_ids(Retriever(adi["bundle"], client, index).search_batch(adi["texts"], 10)), adi)
        fp32 = _mean_ndcg(_ids(Retriever(adi["bundle"], client, INDEX).search_batch(adi["texts"], 10)), adi)
        print(f"\n[real bundle] ingest --encode-precision mixed: dense cosine min {cosine.min():.5f}; "
              f"LR hybrid nDCG@10 {mixed:.4f} (fp32 {fp32:.4f})")
        assert abs(mixed - fp32) <= 0.01
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)


def test_ray_ingest(adi: dict[str, Any], ml_node: NodeConfig, client: Any,
                    tmp_path: Path) -> None:
    try:  # the [ray] extra is part of [all] (scripts/setup.sh): missing it is a failure
        import ray  # noqa: F401
    except ImportError:
        pytest.fail("Ray is not installed: pip install -e '.[all]' (or '.[ray]')", pytrace=False)
    index = f"lr-real-ray-{uuid.uuid4().hex[:8]}"
    try:
        proc = _cli(str(ADI / "corpus.jsonl.gz"), "--bundle", str(adi["path"]), "--index", index,
                    "--url", ml_node.url, "--num-cpus", "2", "--workers", "1", "--chunk-size",
                    "32", "--dead-letter", str(tmp_path / "dead.jsonl"), "--summary-json",
                    str(tmp_path / "summary.json"), module="ingest.ray_ingest")
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["counts"]["indexed"] == 82 and not summary["counts"].get("skipped")
        _same_vectors(_stored(client, index), adi["docs"])
        ray_hits = Retriever(adi["bundle"], client, index).search_batch(adi["texts"], 10)
        bulk_hits = Retriever(adi["bundle"], client, INDEX).search_batch(adi["texts"], 10)
        _same_ranking(_ids(ray_hits), _ids(bulk_hits), adi, "Ray ingest vs ingest.bulk")
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)


def test_seismic_layout(adi: dict[str, Any], ml_node: NodeConfig, client: Any,
                        tmp_path: Path) -> None:
    """The ``sparse_vector`` layout (a segment this small runs the exact feature query):
    the sparse leg's hits and scores equal the ``rank_features`` index's, the hybrid too."""
    from lr_opensearch.engine.opensearch import OpenSearchAdapter
    from lr_opensearch.engine.seismic import companion_name

    assert adi["bundle"].vocab_size < 32_768  # SEISMIC folds token ids into 16 bits
    index = f"lr-real-sv-{uuid.uuid4().hex[:8]}"
    try:
        _ingest(adi, ml_node.url, index, tmp_path / "state", sparse_layout="sparse_vector")
        assert client.count(index=companion_name(index))["count"] == 82
        plain = Retriever(adi["bundle"], client, INDEX)
        seismic = Retriever(adi["bundle"], client, index)
        for mode, fusion in (("sparse", "auto"), ("hybrid", "client")):
            want = plain.search_batch(adi["texts"], 10, mode=mode, fusion=fusion)
            got = seismic.search_batch(adi["texts"], 10, mode=mode, fusion=fusion)
            assert _ids(got) == _ids(want), mode
            for a, b in zip(got, want, strict=True):
                assert [h.score for h in a] == pytest.approx([h.score for h in b], rel=1e-5)
    finally:
        OpenSearchAdapter(client).delete_index(index)


# --- lr inspect, lr eval, lr dashboards export ---------------------------------------------


def test_lr_inspect_in_the_browser(adi: dict[str, Any], ml_node: NodeConfig,
                                   client: Any) -> None:
    """Five lists (the fitted bundle carries its document encoder: the full model's list
    too); the fused list is the client-fusion hybrid the library returns."""
    import browser_support

    from lr_opensearch.inspect import create_app

    text = adi["texts"][0]
    server = browser_support.Server(create_app(str(adi["path"]), INDEX, url=ml_node.url))
    browser = browser_support.chromium()
    try:
        browser.get(server.url)
        browser.find_element("id", "q").send_keys(text)
        browser.find_element("id", "go").click()
        browser_support.wait_rendered(browser, 1)
        lists = {mode: browser_support.list_ids(browser, mode)
                 for mode in ("hybrid", "dense", "sparse", "bm25", "full_dense")}
        assert all(len(ids) == 10 for ids in lists.values()), lists
        want = Retriever(adi["bundle"], client, INDEX, fusion="client",
                         candidates=DEFAULT_CANDIDATES).search(text, k=10)
        assert lists["hybrid"] == [h.doc_id for h in want]
        tokens = browser.find_elements("css selector", "#tokens tbody tr")
        assert len(tokens) >= len(text.split()) // 2  # one row per query token
    finally:
        browser.quit()
        server.close()


def test_lr_eval(adi: dict[str, Any], ml_node: NodeConfig, client: Any, tmp_path: Path,
                 capsys: pytest.CaptureFixture[str]) -> None:
    """Every default run over ADI's judged queries on the ingested index (reused, not
    ingested again); the hybrid run's top 10s are the library's hybrid at the same depth;
    the weight sweep (moving the BM25 leg) meets the hybrid run at the bundle's own weight."""
    from lr_opensearch.cli import main
    from lr_opensearch.evaluation import read_trec

    capsys.readouterr()
    assert main(["eval", "--dataset", str(ADI), "--bundle", str(adi["path"]), "--index", INDEX,
                 "--url", ml_node.url, "--out", str(tmp_path), "--sweep-leg", "bm25",
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    runs = report["runs"]
    print("\n[real bundle] lr eval ADI nDCG@10: " + ", ".join(
        f"{name} {r['ndcg@10']:.4f}" for name, r in runs.items()))
    assert report["index_status"] == "reused" and report["queries"] == len(adi["queries"])
    assert {"bm25", "lr-dense", "lr-sparse", "lr-hybrid", "full-dense"} <= runs.keys()
    assert all(0.0 < r["ndcg@10"] <= 1.0 for r in runs.values())
    trec = read_trec(tmp_path / "runs" / "lr-hybrid.trec")
    depth = report["depth"]
    want = Retriever(adi["bundle"], client, INDEX, candidates=depth).search_batch(
        adi["texts"], depth)
    for q, hits in zip(adi["queries"], want, strict=True):
        assert [d for d, _ in trec[str(q["_id"])][:10]] == [h.doc_id for h in hits[:10]]
    sweep, own = report["sweep"], adi["bundle"].config.weights["bm25"]
    assert sweep["leg"] == "bm25" and (tmp_path / "sweep.png").stat().st_size > 0
    at_own = sweep["opensearch"]["ndcg@10"][sweep["weight"].index(own)]
    assert at_own == pytest.approx(runs["lr-hybrid"]["ndcg@10"], abs=0.005)


def test_lr_dashboards_export(adi: dict[str, Any], ml_node: NodeConfig, tmp_path: Path) -> None:
    from lr_opensearch.cli import main
    from lr_opensearch.dashboards.saved_objects import check_references

    out = tmp_path / "objects.ndjson"
    assert main(["dashboards", "export", "--index", INDEX, "--url", ml_node.url, "--out",
                 str(out)]) == 0
    objects = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert check_references(objects) == []
    pattern = next(o for o in objects if o["type"] == "index-pattern")
    assert pattern["attributes"]["title"] == INDEX
    labels = json.loads(pattern["attributes"]["fieldAttrs"])
    assert adi["bundle"].bundle_id in labels["lr_dense"]["customLabel"]
    kinds = [o["type"] for o in objects]
    assert "search" in kinds and "visualization" in kinds
    fields = {f["name"]: f for f in json.loads(pattern["attributes"]["fields"])}
    assert not fields["lr_dense"]["aggregatable"] and not fields["lr_sparse"]["searchable"]


# --- the LLM vocabulary through lr models deploy ------------------------------------------


def test_smollm2_vocabulary_through_models_deploy(client: Any, tmp_path: Path) -> None:
    """SmolLM2's tokenizer (49,152 tokens) with a 576-d table: a dense zip of about 55 MB (six
    chunks), vectors equal to the client's, the in-cluster ranking as the client's."""
    from lr_opensearch.cluster import deploy_bundle, text_hybrid_body, undeploy_bundle
    from lr_opensearch.packaged.gguf import convert_gguf

    coll = collection_index(client, tmp_path, model_dir=convert_gguf(), dim=576, kind="decoder")
    bundle = coll["bundle"]
    assert (bundle.vocab_size, bundle.config.served_dim) == (49_152, 576)
    dense = export_dense(bundle)
    print(f"\n[real bundle] SmolLM2 vocabulary: dense zip {len(dense.data):,} bytes")
    assert len(dense.data) > 4 * mlapi.UPLOAD_CHUNK_LIMIT
    try:
        rec = deploy_bundle(client, bundle, coll["index"])
        assert rec["actions"] == {"dense": "uploaded", "sparse": "uploaded"}
        enc = QueryEncoder(bundle, max_tokens=rec["max_tokens"])
        texts = [q["text"] for q in coll["queries"]]
        for text in texts[:10]:
            ours = enc.encode(text)
            theirs = mlapi.predict_dense(client, rec["dense_model_id"], text)
            np.testing.assert_allclose(theirs, ours.dense, rtol=1e-4, atol=1e-5)
            assert mlapi.predict_sparse(client, rec["sparse_model_id"], text).keys() == \
                ours.sparse.keys()
        retriever = Retriever(bundle, client, coll["index"], fusion="server")
        want = _ids(retriever.search_batch(texts, 10))
        got = [[h["_id"] for h in client.search(index=coll["index"], body=text_hybrid_body(
            rec, text, size=10, candidates=retriever.candidates),
            params={"search_pipeline": rec["pipeline"]})["hits"]["hits"]] for text in texts]
        _same_ranking(got, want, {"queries": coll["queries"], "qrels": coll["qrels"]},
                      "SmolLM2 vocabulary in-cluster vs client")
    finally:
        undeploy_bundle(client, bundle.bundle_id, delete=True)  # frees the node's memory
        client.indices.delete(index=coll["index"], ignore_unavailable=True)


# --- the engine's clause limit, with the real vocabulary ------------------------------------


def test_the_longest_queries_stay_within_the_clause_limit(adi: dict[str, Any], client: Any,
                                                          deployed: dict[str, Any]) -> None:
    """The engine refuses a query of more than MAX_CLAUSE_COUNT clauses (and takes one of
    exactly that many); the longest queries - 2,000 distinct vocabulary words, hyphenated
    words, an unspaced CJK run, emoji - are searched on every path (before the BM25 clause
    was capped by analysed terms, not words, the last three were refused)."""
    from lr_opensearch.engine.clauses import MAX_CLAUSE_COUNT

    flat = client.cluster.get_settings(include_defaults=True, flat_settings=True)
    assert flat["defaults"]["indices.query.bool.max_clause_count"] == str(MAX_CLAUSE_COUNT)
    terms = [{"term": {"text": f"w{i}"}} for i in range(MAX_CLAUSE_COUNT + 1)]
    client.search(index=INDEX, body={"query": {"bool": {"should": terms[:-1]}}})
    with pytest.raises(Exception, match="too_many_clauses|maxClauseCount"):
        client.search(index=INDEX, body={"query": {"bool": {"should": terms}}})
    vocab = sorted(t for t in adi["bundle"].tokenizer.get_vocab()
                   if t.isascii() and t.isalpha() and len(t) > 3)
    words = vocab[:: max(1, len(vocab) // 2000)][:2000]
    texts = {"2,000 distinct words": " ".join(words),
             "hyphenated words": " ".join("-".join(words[i:i + 4]) for i in range(0, 1200, 4)),
             "an unspaced CJK run": "".join(chr(0x4E00 + i) for i in range(1500))}
    plain = Retriever(adi["bundle"], client, INDEX)
    cluster = Retriever(adi["bundle"], client, INDEX, encoding=QueryEncoding(encode="cluster"))
    for what, text in texts.items():
        for retriever, fusion in ((plain, "server"), (plain, "client"), (cluster, "server")):
            hits = retriever.search(text, k=10, fusion=fusion)
            assert hits, (what, fusion, retriever.encode)
    # emoji are [UNK] to MiniLM (a query of them alone has no LR token): the BM25 leg alone
    emoji = "".join(chr(0x1F600 + i % 80) for i in range(1500)) + " boundary layer"
    for retriever in (plain, cluster):
        retriever.search(emoji, k=10, mode="bm25")


def test_the_result_window_at_the_limit(adi: dict[str, Any], client: Any) -> None:
    """MAX_RESULT_WINDOW is the engine's (index.max_result_window, the k-NN plugin's
    largest k): a page ending at it is answered, one further is refused; the library
    searches with k and candidates at the limit on both fusion paths."""
    from lr_opensearch.options import MAX_RESULT_WINDOW

    limit = MAX_RESULT_WINDOW
    defaults = client.indices.get_settings(index=INDEX, include_defaults=True)[INDEX]["defaults"]
    assert defaults["index"]["max_result_window"] == str(limit)
    client.search(index=INDEX, body={"from": limit - 1, "size": 1})
    with pytest.raises(Exception, match="Result window is too large"):
        client.search(index=INDEX, body={"from": limit, "size": 1})
    vector = QueryEncoder(adi["bundle"]).encode(adi["texts"][0]).dense.tolist()
    client.search(index=INDEX, body={"size": 10, "query": {"knn": {"lr_dense": {
        "vector": vector, "k": limit}}}})
    with pytest.raises(Exception, match=str(limit)):
        client.search(index=INDEX, body={"size": 10, "query": {"knn": {"lr_dense": {
            "vector": vector, "k": limit + 1}}}})
    retriever = Retriever(adi["bundle"], client, INDEX, candidates=limit)
    for fusion in ("server", "client"):
        assert len(retriever.search(adi["texts"][0], k=limit, fusion=fusion)) == 82, fusion
