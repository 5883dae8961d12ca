"""LightRetriever query encoding inside the cluster (ml-commons), on a real node.

Cost (marker ``ml``): the first run installs OpenSearch --with-ml into the cache (about
500 MB from Maven Central); every run starts one more node (about 35 s) beside the
session's, deploys a few small models (seconds each) and restarts that node once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import re
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from incluster_support import collection_index, ndcg10, running_ml_node
from tiny_artifacts import tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.cluster import (
    check_serving,
    cluster_meta,
    deploy_bundle,
    export_dense,
    export_sparse,
    text_hybrid_body,
)
from lr_opensearch.cluster.deploy import ensure_model
from lr_opensearch.engine import mlapi
from lr_opensearch.engine.client import make_client
from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.errors import EngineError
from lr_opensearch.node import NodeConfig, install, start_node, stop_node
from lr_opensearch.query import QueryEncoder
from lr_opensearch.search import QueryEncoding, Retriever

pytestmark = [pytest.mark.node, pytest.mark.ml]

QUERIES = ["The capital of France is Paris.", "naïve café über don't",
           "boundary layer heat transfer", "hybrid search: sparse and dense retrieval!"]


@pytest.fixture(scope="module")
def ml_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeConfig]:
    with running_ml_node(tmp_path_factory.mktemp("ml-node"), "the in-cluster tests") as config:
        yield config


@pytest.fixture(scope="module")
def ml_client(ml_node: NodeConfig) -> Any:
    return make_client(ml_node.url, timeout=180)


@pytest.fixture(scope="module")
def adi(ml_client: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    coll = collection_index(ml_client, tmp_path_factory.mktemp("adi"))
    coll["record"] = deploy_bundle(ml_client, coll["bundle"], coll["index"],
                                   default_pipeline=True)
    return coll


def test_cluster_vectors_equal_the_query_encoder(adi: dict[str, Any], ml_client: Any) -> None:
    """Dense: cosine >= 0.9999 (and nearly equal values); sparse: the same keys and weights
    (an IDF bundle weighs each distinct token once on both paths, so repeats agree too);
    a query longer than the cap (510 tokens for BERT) is cut alike."""
    rec = adi["record"]
    assert rec["max_tokens"] == 510
    enc = QueryEncoder(adi["bundle"], max_tokens=rec["max_tokens"])
    long_text = " ".join(q["text"] for q in adi["queries"])
    assert len(QueryEncoder(adi["bundle"], max_tokens=4096).encode(long_text).token_ids) > 510
    texts = (QUERIES + [q["text"] for q in adi["queries"][:10]] + ["paris paris paris tower"]
             + [long_text])
    worst = 1.0
    for text in texts:
        ours = enc.encode(text)
        dense = np.array(mlapi.predict_dense(ml_client, rec["dense_model_id"], text), np.float32)
        cos = float(dense @ ours.dense / np.linalg.norm(dense) / np.linalg.norm(ours.dense))
        worst = min(worst, cos)
        assert cos >= 0.9999, (text, cos)
        np.testing.assert_allclose(dense, ours.dense, rtol=1e-4, atol=1e-6)
        sparse = mlapi.predict_sparse(ml_client, rec["sparse_model_id"], text)
        assert sparse.keys() == ours.sparse.keys(), text
        for key, weight in ours.sparse.items():
            assert sparse[key] == pytest.approx(weight, rel=1e-6), (text, key)
    print(f"\n[in-cluster] {len(texts)} queries: min cosine {worst:.7f}, sparse maps equal")


def test_count_bundle_repeats(ml_client: Any, tmp_path: Path) -> None:
    """A count bundle: equal weights without repeats; a repeated token weighs its count
    client side and 1 in the cluster (ml-commons counts a token once)."""
    bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False)))
    rec = deploy_bundle(ml_client, bundle)
    enc = QueryEncoder(bundle)
    once = mlapi.predict_sparse(ml_client, rec["sparse_model_id"], "paris tower")
    assert once == enc.encode("paris tower").sparse
    twice = mlapi.predict_sparse(ml_client, rec["sparse_model_id"], "paris paris tower")
    assert enc.encode("paris paris tower").sparse["paris"] == 2.0 and twice["paris"] == 1.0


def test_text_only_top10_equals_client_path(adi: dict[str, Any], ml_client: Any) -> None:
    rec, index = adi["record"], adi["index"]
    retriever = Retriever(adi["bundle"], ml_client, index, fusion="server")
    texts = [q["text"] for q in adi["queries"]]
    client_hits = retriever.search_batch(texts, 10)
    same, ours, theirs = 0, [], []
    for q, hits in zip(adi["queries"], client_hits, strict=True):
        body = text_hybrid_body(rec, q["text"], size=10, candidates=retriever.candidates)
        res = ml_client.search(index=index, body=body)  # the index's default pipeline fuses
        cluster_ids = [h["_id"] for h in res["hits"]["hits"]]
        client_ids = [h.doc_id for h in hits]
        same += cluster_ids == client_ids
        rels = adi["qrels"][str(q["_id"])]
        ours.append(ndcg10(client_ids, rels))
        theirs.append(ndcg10(cluster_ids, rels))
    gap = abs(float(np.mean(ours)) - float(np.mean(theirs)))
    print(f"\n[in-cluster] ADI {len(texts)} test queries: identical top 10 for {same}; nDCG@10 "
          f"client {np.mean(ours):.4f}, in-cluster {np.mean(theirs):.4f}")
    assert same == len(texts) or gap <= 0.002


def test_search_template_is_the_calibrated_one_query(adi: dict[str, Any],
                                                     ml_client: Any) -> None:
    """``GET /<index>/_search/template`` with the query text as the one parameter (the
    template ``lr models deploy`` stored) ranks as ``fusion="calibrated"`` with in-cluster
    encoding, and as the client's encoding with every sparse token."""
    from lr_opensearch.engine.text_queries import TEMPLATE_PARAM

    rec, index = adi["record"], adi["index"]
    assert rec["template"] == f"lr-calibrated-{index}"
    texts = [q["text"] for q in adi["queries"][:8]]
    cluster = Retriever(adi["bundle"], ml_client, index, fusion="calibrated", encoding=QueryEncoding(encode="cluster"))
    client = Retriever(adi["bundle"], ml_client, index, fusion="calibrated", sparse_tokens=0)
    same_cluster = same_client = 0
    for text, a, b in zip(texts, cluster.search_batch(texts, 10),
                          client.search_batch(texts, 10), strict=True):
        res = ml_client.transport.perform_request(
            "GET", f"/{index}/_search/template",
            body={"id": rec["template"], "params": {TEMPLATE_PARAM: text}})
        ids = [h["_id"] for h in res["hits"]["hits"]]
        assert len(ids) == 10 and all("lr_dense" not in h["_source"] for h in res["hits"]["hits"])
        same_cluster += ids == [h.doc_id for h in a]
        same_client += ids == [h.doc_id for h in b]
    assert same_cluster == len(texts)  # the same request
    assert same_client >= len(texts) - 1, same_client  # float ties may swap one list


TEMPLATE_PAGE = "docs/searching-from-any-client.md"  # moved there from README.md (issue 46)


def _readme_template_curl() -> str:
    """The documented text-only template request (docs/searching-from-any-client.md): the
    bash block that calls ``_search/template``."""
    page = (Path(__file__).resolve().parents[2] / TEMPLATE_PAGE).read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", page, re.S) if "_search/template" in b]
    assert len(blocks) == 1, f"{TEMPLATE_PAGE} should show one curl of _search/template, not {len(blocks)}"
    return blocks[0]


def test_readme_template_curl_is_the_calibrated_one_query(adi: dict[str, Any], ml_client: Any,
                                                          ml_node: NodeConfig) -> None:
    """The README's curl, run as written (its node URL and index ``docs`` swapped for this
    node's and index's), returns the hits of the calibrated one query with in-cluster
    encoding; a ``size`` parameter changes the number of hits, and a text with quotes and a
    backslash reaches the engine as text (the template escapes it for JSON)."""
    import json
    import subprocess

    from lr_opensearch.engine.text_queries import TEMPLATE_PARAM

    index, template = adi["index"], adi["record"]["template"]
    shown = _readme_template_curl()
    assert "http://127.0.0.1:9200/docs/_search/template" in shown and "lr-calibrated-docs" in shown
    command = (shown.replace("http://127.0.0.1:9200/docs/", f"{ml_node.url}/{index}/")
               .replace("lr-calibrated-docs", template))
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                         check=True)
    res = json.loads(run.stdout)
    assert "error" not in res, res
    shown_text = re.search(r'"query_text": "([^"]*)"', shown)
    assert shown_text, "the README's curl should pass a query_text"
    text = shown_text.group(1)
    cluster = Retriever(adi["bundle"], ml_client, index, fusion="calibrated", encoding=QueryEncoding(encode="cluster"))
    assert [h["_id"] for h in res["hits"]["hits"]] == [h.doc_id for h in cluster.search(text, 10)]

    def template_ids(params: dict[str, Any]) -> list[str]:
        out = ml_client.transport.perform_request(
            "GET", f"/{index}/_search/template", body={"id": template, "params": params})
        return [h["_id"] for h in out["hits"]["hits"]]

    assert len(template_ids({TEMPLATE_PARAM: text, "size": 3})) == 3
    odd = 'the "boundary" layer \\ heat transfer'
    assert template_ids({TEMPLATE_PARAM: odd}) == [h.doc_id for h in cluster.search(odd, 10)]


def test_readme_hybrid_curl_ranks_as_lr_search_defaults(adi: dict[str, Any], ml_node: NodeConfig,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Each documented text-only hybrid curl (README.md, docs/IN_CLUSTER.md), run as written
    (node URL and index ``docs`` swapped for this node's), and again with ADI test queries
    for its text, gives the top 10 of ``lr search --in-cluster`` with its defaults."""
    import json
    import subprocess

    from incluster_support import text_only_hybrid_curls

    from lr_opensearch.cli import main

    index, shown_text = adi["index"], "what causes tides"
    texts = [shown_text] + [q["text"] for q in adi["queries"] if "'" not in q["text"]][:6]
    assert main(["search", "--index", index, "--bundle", str(adi["bundle"].path), "--url",
                 ml_node.url, "--in-cluster", "--json", *texts]) == 0
    ours = [[h["doc_id"] for h in q["hits"]] for q in json.loads(capsys.readouterr().out)]
    for name, command, _body in text_only_hybrid_curls():
        assert shown_text in command and "http://127.0.0.1:9200/docs/" in command, name
        command = command.replace("http://127.0.0.1:9200/docs/", f"{ml_node.url}/{index}/")
        for text, want in zip(texts, ours, strict=True):
            run = subprocess.run(["bash", "-c", command.replace(shown_text, json.dumps(text)[1:-1])],
                                 capture_output=True, text=True, timeout=120, check=True)
            res = json.loads(run.stdout)
            assert "error" not in res, res
            assert [h["_id"] for h in res["hits"]["hits"]] == want, (name, text)


def test_retriever_and_lr_search_encode_in_the_cluster(adi: dict[str, Any], ml_client: Any,
                                                       ml_node: NodeConfig,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """``Retriever(encoding=QueryEncoding(encode="cluster"))`` sends text only (server and client fusion) and ranks
    as the client's encoding; ``lr search --in-cluster --dsl`` prints that text-only request."""
    from lr_opensearch.cli import main

    index = adi["index"]
    texts = [q["text"] for q in adi["queries"][:8]]
    ours = Retriever(adi["bundle"], ml_client, index, fusion="server").search_batch(texts, 10)
    for fusion in ("server", "client"):
        cluster = Retriever(adi["bundle"], ml_client, index, fusion=fusion, encoding=QueryEncoding(encode="cluster"))
        theirs = cluster.search_batch(texts, 10)
        same = sum([h.doc_id for h in a] == [h.doc_id for h in b]
                   for a, b in zip(ours, theirs, strict=True))
        assert same >= len(texts) - 1, (fusion, same)  # float ties may swap one list
        plan = cluster.dsl(texts[0])[0]
        assert "vector" not in str(plan) and texts[0] in str(plan)
    assert main(["search", "--index", index, "--bundle", str(adi["bundle"].path), "--url",
                 ml_node.url, "--in-cluster", "--dsl", "--json", texts[0]]) == 0
    body = __import__("json").loads(capsys.readouterr().out)[0]["requests"][0]["body"]
    subs = body["query"]["hybrid"]["queries"]
    assert "neural" in subs[0] and "neural_sparse" in str(subs[1]) and "multi_match" in str(subs[2])


def test_without_ml_commons_says_what_to_do(os_client: Any, tmp_path: Path) -> None:
    bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False)))
    with pytest.raises(EngineError, match=r"no ml-commons plugin .*lr node start --with-ml") as exc:
        deploy_bundle(os_client, bundle)
    assert "\n" not in str(exc.value)


def test_in_cluster_search_without_ml_commons_says_ml_commons_is_missing(
        os_client: Any, tmp_path: Path) -> None:
    """Not "run lr models deploy": that would fail too on a node without the plugin."""
    from lr_opensearch.engine.opensearch import OpenSearchAdapter
    from lr_opensearch.search import QueryEncoding, Retriever

    bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False)))
    index = f"lr-test-no-ml-{uuid.uuid4().hex[:8]}"
    OpenSearchAdapter(os_client).create_index(index, bundle)
    try:
        with pytest.raises(EngineError, match="no ml-commons plugin") as exc:
            Retriever(bundle, os_client, index,
                      encoding=QueryEncoding(encode="cluster")).search("tides")
        assert "lr models deploy" not in str(exc.value)
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)


def test_failed_deploy_says_what_to_do(ml_client: Any, tmp_path: Path) -> None:
    bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False)))
    good = export_dense(bundle)
    members = zipfile.ZipFile(io.BytesIO(good.data))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("model.onnx", b"not an onnx graph")
        z.writestr("tokenizer.json", members.read("tokenizer.json"))
    name = good.name.replace("-dense-", "-broken-")
    broken = dataclasses.replace(good, name=name, data=buf.getvalue(),
                                 register={**good.register, "name": name})
    with pytest.raises(mlapi.ModelDeployError, match=r"failed: .*run `lr models deploy`") as exc:
        ensure_model(ml_client, broken, timeout=120)
    assert "\n" not in str(exc.value)
    assert mlapi.find_model(ml_client, name) is None  # the model it uploaded is gone


def _registered(client: Any, name: str) -> list[str]:
    """Ids of the models whose name starts with ``name`` (any state)."""
    return [m["model_id"] for m in mlapi.list_models(client, name)]


def test_upload_at_the_engine_chunk_limit(ml_client: Any, tmp_path: Path) -> None:
    """A zip one byte over ml-commons' chunk limit goes up as a chunk of exactly
    UPLOAD_CHUNK_LIMIT bytes and one of 1 byte; a chunk one byte larger is refused by the
    engine, and the model that upload registered is removed."""
    bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False), seed=11))
    limit = mlapi.UPLOAD_CHUNK_LIMIT
    assert limit == 10_000_000
    data = np.random.default_rng(0).bytes(limit + 1)  # never deployed: content is not read
    sha = hashlib.sha256(data).hexdigest()
    good = export_dense(bundle)
    name = good.name.replace("-dense-", "-atlimit-")
    model_id = mlapi.upload(ml_client, {**good.register, "name": name}, data, sha)
    try:
        model = mlapi.get_model(ml_client, model_id)
        assert (model["model_state"], model["total_chunks"]) == ("REGISTERED", 2)
        assert model["model_content_size_in_bytes"] == limit + 1
    finally:
        mlapi.delete(ml_client, model_id)
    over = name.replace("-atlimit-", "-overlimit-")
    with pytest.raises(EngineError, match=r"chunk 1/1 \(10,000,001 bytes\).*Chunk size exceeds"):
        mlapi.upload(ml_client, {**good.register, "name": over}, data, sha,
                     chunk_bytes=limit + 1)
    assert _registered(ml_client, over) == []


def test_a_half_done_deploy_leaves_nothing_registered(ml_client: Any, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The dense model uploads and deploys, the sparse one fails to deploy: deploy_bundle
    raises and removes both models it uploaded."""
    from lr_opensearch.cluster import deploy as deploy_module

    bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False), seed=12))
    good = export_sparse(bundle)
    name = good.name.replace("-sparse-", "-brokensparse-")
    broken = dataclasses.replace(good, name=name, data=_zip_of({"tokenizer.json": b"{not json",
                                                               "idf.json": b"{}"}),
                                 register={**good.register, "name": name})
    monkeypatch.setattr(deploy_module, "export_sparse", lambda *a, **k: broken)
    with pytest.raises(EngineError, match="lr models deploy"):
        deploy_bundle(ml_client, bundle)
    assert _registered(ml_client, f"lr-{bundle.bundle_id[:12]}-") == []


def test_two_deploys_at_once_one_says_the_other_is_running(ml_client: Any, ml_node: NodeConfig,
                                                          tmp_path: Path) -> None:
    """Two `lr models deploy` of one bundle started together: one deploys, the other says
    another deploy is running (a lease in the cluster) instead of failing half-way; the
    models end deployed, once each, and the lease is gone."""
    import os
    import subprocess
    import sys

    from lr_opensearch.cluster.lease import LEASE_INDEX

    path = tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False), seed=13)
    bundle = load_bundle(path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LR_OPENSEARCH_")}
    argv = [sys.executable, "-m", "lr_opensearch.cli", "models", "deploy", "--bundle", str(path),
            "--url", ml_node.url, "--timeout", "240"]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    done = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    codes = sorted(rc for rc, _out, _err in done)
    loser = next((err for rc, _out, err in done if rc != 0), "")
    assert codes == [0, 1], done
    assert "another lr models deploy" in loser and "is running" in loser, loser
    assert "Failed to find model" not in loser and "Traceback" not in loser
    models = mlapi.list_models(ml_client, f"lr-{bundle.bundle_id[:12]}-")
    assert len(models) == 2 and all(m["state"] == mlapi.DEPLOYED for m in models), models
    assert not ml_client.exists(index=LEASE_INDEX, id=f"models-deploy-{bundle.bundle_id[:12]}")


def _zip_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_undeployed_model_then_restart_and_deploy_again(adi: dict[str, Any], ml_client: Any,
                                                        ml_node: NodeConfig) -> None:
    rec, index = adi["record"], adi["index"]
    query = adi["queries"][0]["text"]
    before = ml_client.search(index=index, body=text_hybrid_body(rec, query))
    mlapi.undeploy(ml_client, rec["sparse_model_id"])
    with pytest.raises(EngineError, match=r"is UNDEPLOYED .*lr models deploy") as exc:
        check_serving(ml_client, cluster_meta(make_adapter(ml_client), index), index)
    assert "\n" not in str(exc.value)

    # a restart: ml-commons redeploys the dense model (deployed at shutdown) by itself, soon
    # or not yet; the sparse one, undeployed before, stays so until `lr models deploy`
    stop_node(ml_node.node_dir, timeout=60)
    start_node(ml_node, install(ml=True), timeout=300)
    client = make_client(ml_node.url, timeout=180)
    with pytest.raises(EngineError, match="lr models deploy"):
        check_serving(client, cluster_meta(make_adapter(client), index), index)
    again = deploy_bundle(client, adi["bundle"], index, default_pipeline=True)
    assert again["actions"]["sparse"] == "deployed"
    assert again["actions"]["dense"] in ("reused", "deployed")  # nothing uploaded
    assert (again["dense_model_id"], again["sparse_model_id"]) == \
        (rec["dense_model_id"], rec["sparse_model_id"])
    check_serving(client, cluster_meta(make_adapter(client), index), index)
    after = client.search(index=index, body=text_hybrid_body(rec, query))
    assert [h["_id"] for h in after["hits"]["hits"]] == [h["_id"] for h in before["hits"]["hits"]]
