"""The compose file's services, driven from the host as a user would (``pytest -m docker``):
``lr index create`` + ``python -m ingest.bulk`` against the container, the one-shot ingest
container, hybrid search equal to the local node's, the Elasticsearch profile, a three-node
cluster that loses a node mid-ingest, and ``down -v`` leaving nothing behind. The engine and
images come from tests/docker_support.py (no engine: the tests fail with the reason)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from docker_support import compose, ensure_images, leftovers
from ingest_support import (
    REPO,
    build_tiny_bundle,
    checkpoint_indexed,
    data_dir,
    index_ids,
    ingest_cli,
    read_corpus,
    wait_for_checkpoint,
    write_jsonl,
)
from node_support import free_port
from waiting import wait_until

from lr_opensearch import QueryEncoder, Retriever, connect, load_bundle
from lr_opensearch.node import load_lock

pytestmark = pytest.mark.docker

CHILD_ENV = {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}


def _lr(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lr_opensearch.cli", *args], cwd=REPO,
                          text=True, capture_output=True, timeout=600, check=False,
                          env={**os.environ, **CHILD_ENV})


def _load(url: str, bundle: Path, corpus: Path, index: str, state: Path) -> None:
    """The README's two steps from the host: create the index, ingest the corpus."""
    made = _lr("index", "create", "--bundle", str(bundle), "--index", index, "--url", url)
    assert made.returncode == 0, made.stderr[-2000:]
    proc = ingest_cli([str(corpus), "--bundle", str(bundle), "--index", index, "--url", url,
                       "--state-dir", str(state), "--no-progress", "-q"])
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("docker_bundle"))


@pytest.fixture(scope="module")
def adi(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz")
    return write_jsonl(tmp_path_factory.mktemp("adi") / "corpus.jsonl", docs), docs


@pytest.fixture(scope="module")
def host_loaded(docker_opensearch_url: str, tiny: Path, adi: tuple[Path, list[dict[str, Any]]],
                tmp_path_factory: pytest.TempPathFactory) -> str:
    """ADI in an index of the container, loaded from the host; returns the index name."""
    index = f"lr-docker-{uuid.uuid4().hex[:8]}"
    _load(docker_opensearch_url, tiny, adi[0], index, tmp_path_factory.mktemp("state"))
    return index


def test_host_cli_ingests_into_the_container(docker_opensearch_url: str, host_loaded: str,
                                            adi: tuple[Path, list[dict[str, Any]]]) -> None:
    client = connect(docker_opensearch_url)
    ids = index_ids(client, host_loaded)
    assert len(ids) == len(set(ids)) == len(adi[1])
    assert set(ids) == {d["_id"] for d in adi[1]}
    assert {p["component"] for p in client.cat.plugins(format="json")} >= {
        "opensearch-knn", "opensearch-neural-search"}


def test_hybrid_search_equals_the_local_node(docker_opensearch_url: str, host_loaded: str,
                                            opensearch_url: str, tiny: Path,
                                            adi: tuple[Path, list[dict[str, Any]]],
                                            tmp_path: Path) -> None:
    """Same bundle, same corpus, same ingest: the container and the local node (the same
    OpenSearch and plugins) return the same hits with the same scores."""
    assert opensearch_url != docker_opensearch_url, "the comparison needs the local node"
    index = f"lr-docker-local-{uuid.uuid4().hex[:8]}"
    _load(opensearch_url, tiny, adi[0], index, tmp_path / "state")
    local = connect(opensearch_url)
    try:
        bundle = load_bundle(tiny)
        in_docker = Retriever(bundle, connect(docker_opensearch_url), host_loaded)
        on_host = Retriever(bundle, local, index)
        queries = [q["text"] for q in read_corpus(data_dir() / "adi" / "queries.jsonl.gz",
                                                  limit=8)]
        for text in queries:
            want, got = on_host.search(text, k=10), in_docker.search(text, k=10)
            assert len(want) == 10, text
            assert [h.doc_id for h in got] == [h.doc_id for h in want], text
            assert [h.score for h in got] == pytest.approx([h.score for h in want],
                                                           rel=1e-6), text
    finally:
        local.indices.delete(index=index, ignore_unavailable=True)


def _ingest_job(project: str, corpus: Path, bundle: Path, tmp_path: Path) -> str:
    """`docker compose run ingest` with ``corpus`` and ``bundle`` mounted; returns the index."""
    job = tmp_path / "job"
    job.mkdir()
    shutil.copyfile(corpus, job / "corpus.jsonl")
    shutil.copytree(bundle, job / "bundle")
    graph = _lr("bundle", "onnx", str(job / "bundle"))  # the image has no torch, no network
    assert graph.returncode == 0, graph.stderr[-2000:]
    index = f"lr-docker-job-{uuid.uuid4().hex[:8]}"
    name = f"{project}-{index}"
    # No --rm: podman 4.3's Docker API reports exit 0 for a removed container whatever its
    # status. --no-deps: the node runs already (compose would recreate it on podman).
    run = compose(project, "run", "--no-deps", "--name", name, "ingest",
                  env={"LR_INGEST_DIR": str(job), "LR_INGEST_CORPUS": "corpus.jsonl",
                       "LR_INGEST_INDEX": index, "LR_INGEST_USER": str(os.getuid())},
                  timeout=900)
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False, timeout=120)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    return index


def _search_in_image(url: str, index: str, bundle: Path,
                     queries: list[str]) -> tuple[list[Any], list[Any]]:
    """``lr search --json`` on the host and in the torch-free search image (``lr-search``,
    docker/build.sh search) with ``bundle`` mounted; each one's hits as (id, score 1e-6)."""
    import json

    from lr_opensearch import __version__

    image = f"localhost/lr-opensearch/lr-search:{__version__}"
    args = ["search", "--index", index, "--url", url, "--json", *queries]
    host = _lr(*args, "--bundle", str(bundle))
    assert host.returncode == 0, host.stderr[-2000:]
    # No --rm (podman 4.3's Docker API reports exit 0 for a removed container whatever its
    # status); the caller's uid reads the bundle (pytest's tmp dirs are private).
    name = f"lr-search-test-{uuid.uuid4().hex[:8]}"
    run = subprocess.run(["docker", "run", "--name", name, "--network", "host", "--user",
                          str(os.getuid()), "-v", f"{bundle}:/bundle:ro", image, *args,
                          "--bundle", "/bundle"],
                         capture_output=True, text=True, timeout=600, check=False)
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False, timeout=120)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]

    def ranked(out: str) -> list[list[tuple[str, float]]]:
        return [[(h["doc_id"], round(h["score"], 6)) for h in d["hits"]] for d in json.loads(out)]

    return ranked(host.stdout), ranked(run.stdout)


def test_search_image_searches_without_torch(docker_opensearch_url: str, host_loaded: str,
                                            tiny: Path,
                                            adi: tuple[Path, list[dict[str, Any]]]) -> None:
    """The torch-free search image (``lr-search``, docker/build.sh search): ``lr search`` in
    it returns the host's hits and scores for the index the host loaded; torch is not in it."""
    from lr_opensearch import __version__

    queries = [q["text"] for q in read_corpus(data_dir() / "adi" / "queries.jsonl.gz", limit=3)]
    want, got = _search_in_image(docker_opensearch_url, host_loaded, tiny, queries)
    assert len(want) == len(queries) and all(len(hits) == 10 for hits in want)
    assert got == want
    image = f"localhost/lr-opensearch/lr-search:{__version__}"
    probe = subprocess.run(["docker", "run", "--rm", "--entrypoint", "python", image, "-c",
                            "import importlib.util as u; print(u.find_spec('torch'))"],
                           capture_output=True, text=True, timeout=300, check=False)
    assert probe.returncode == 0 and probe.stdout.strip() == "None", probe.stderr[-2000:]


ENCODE_IN_IMAGE = """\
import importlib.metadata as m, importlib.util as u, json, sys
from lr_opensearch.bundle import load_bundle
from lr_opensearch.model import open_doc_encoder
heavy = sorted(d.metadata['Name'] for d in m.distributions() if d.metadata['Name'].lower()
               .startswith(('torch', 'transformers', 'nvidia', 'cuda', 'triton')))
e = open_doc_encoder(load_bundle('/bundle'))
b = e.encode(json.loads(sys.argv[1]))
print(json.dumps({"heavy": heavy, "torch": u.find_spec('torch') is not None,
                  "encoder": type(e).__name__, "dense": b.dense.tolist(),
                  "sparse": [sorted(s) for s in b.sparse]}))
"""


def test_project_image_has_no_torch_and_encodes_offline_as_the_host(
        tiny: Path, tmp_path: Path) -> None:
    """The project image holds no torch, transformers or CUDA wheel; with the network off and
    only the bundle mounted (its graph put in by ``lr bundle onnx`` on the host) its document
    encoder runs on ONNX Runtime and gives the host torch encoder's vectors and terms. Its
    ingest into a node: the one-shot ingest tests below."""
    import json

    from lr_opensearch import __version__
    from lr_opensearch.model import DocEncoder

    ensure_images()
    bundle = tmp_path / "bundle"
    shutil.copytree(tiny, bundle)
    graph = _lr("bundle", "onnx", str(bundle))
    assert graph.returncode == 0, graph.stderr[-2000:]
    texts = [d["text"] for d in read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=6)]
    run = subprocess.run(["docker", "run", "--rm", "--network", "none", "--user", str(os.getuid()),
                          "-v", f"{bundle}:/bundle:ro", "--entrypoint", "python",
                          f"localhost/lr-opensearch/lr:{__version__}", "-c", ENCODE_IN_IMAGE,
                          json.dumps(texts)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0 and run.stdout.strip(), (run.stdout + run.stderr)[-3000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["heavy"] == [] and got["torch"] is False and got["encoder"] == "OnnxDocEncoder"
    want = DocEncoder.from_bundle(load_bundle(bundle), device="cpu").encode(texts)
    np.testing.assert_allclose(np.array(got["dense"]), want.dense, atol=1e-5)
    assert got["sparse"] == [sorted(t) for t in want.sparse]


def test_one_shot_ingest_container(docker_opensearch_url: str, docker_compose_project_name: str,
                                   host_loaded: str, tiny: Path,
                                   adi: tuple[Path, list[dict[str, Any]]],
                                   tmp_path: Path) -> None:
    """`docker compose run --rm ingest` with the corpus and bundle mounted: every id, and the
    stored vectors equal those the host's ingest wrote."""
    index = _ingest_job(docker_compose_project_name, adi[0], tiny, tmp_path)
    client = connect(docker_opensearch_url)
    ids = index_ids(client, index)
    assert len(ids) == len(set(ids)) == len(adi[1])
    assert set(ids) == {d["_id"] for d in adi[1]}
    for doc in adi[1][::20]:
        mine = client.get(index=index, id=doc["_id"])["_source"]
        host = client.get(index=host_loaded, id=doc["_id"])["_source"]
        np.testing.assert_allclose(mine["lr_dense"], host["lr_dense"], rtol=1e-4, atol=1e-5)
        assert mine["lr_sparse"].keys() == host["lr_sparse"].keys()
    client.indices.delete(index=index)


@pytest.mark.parametrize("real", ["fitted_minilm", "fitted_bge"])
def test_one_shot_ingest_container_with_the_real_bundle(
        docker_opensearch_url: str, docker_compose_project_name: str, real: str,
        adi: tuple[Path, list[dict[str, Any]]], tmp_path: Path,
        request: pytest.FixtureRequest) -> None:
    """A real bundle through the one-shot ingest container, searched from the host and from
    the search image: the README's (the packaged MiniLM fitted on ADI, 384 d, mean pooling)
    and bge-small-en-v1.5's (12 layers, CLS pooling, its query prompt in the table): every
    id, the stored vectors are the host encoder's, the dense leg's top 10 is the exact one,
    the hybrid answers every query, and ``lr search`` in the ``lr-search`` image returns the
    host's hits and scores."""
    from lr_opensearch.indexing.reader import document_text
    from lr_opensearch.model import DocEncoder

    path: Path = request.getfixturevalue(real)
    index = _ingest_job(docker_compose_project_name, adi[0], path, tmp_path)
    client = connect(docker_opensearch_url)
    try:
        ids = index_ids(client, index)
        assert len(ids) == len(set(ids)) == len(adi[1])
        bundle = load_bundle(path)
        sample = adi[1][::10]
        expected = DocEncoder.from_bundle(bundle, device="cpu", batch_size=8).encode(
            [document_text(d.get("title", ""), d["text"]) for d in sample])
        stored = {h["_id"]: h["_source"] for h in client.search(
            index=index, body={"query": {"match_all": {}}, "size": 1000})["hits"]["hits"]}
        for i, doc in enumerate(sample):
            np.testing.assert_allclose(stored[doc["_id"]]["lr_dense"], expected.dense[i],
                                       rtol=1e-4, atol=1e-5)
            assert len(stored[doc["_id"]]["lr_sparse"]) == len(expected.sparse[i])
        texts = [q["text"] for q in read_corpus(data_dir() / "adi" / "queries.jsonl.gz")]
        order = list(stored)
        matrix = np.array([stored[i]["lr_dense"] for i in order], np.float32)
        exact = [[order[j] for j in np.argsort(-row, kind="stable")[:10]]
                 for row in QueryEncoder(bundle).encode_batch(texts).dense
                 @ matrix.T]
        retriever = Retriever(bundle, client, index)
        dense = retriever.search_batch(texts, 10, mode="dense")
        assert [[h.doc_id for h in hits] for hits in dense] == exact
        assert all(len(hits) == 10 for hits in retriever.search_batch(texts, 10))
        want, got = _search_in_image(docker_opensearch_url, index, path, texts[:5])
        assert all(len(hits) == 10 for hits in want) and got == want
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)


def test_elasticsearch_profile_takes_the_host_ingest(
        tiny: Path, adi: tuple[Path, list[dict[str, Any]]], tmp_path: Path) -> None:
    """The Elasticsearch image (the lock's version), loaded from the host like OpenSearch."""
    ensure_images()
    project = f"lr-opensearch-es-{os.getpid()}"
    env = {"LR_DOCKER_ES_PORT": str(free_port())}
    url = f"http://127.0.0.1:{env['LR_DOCKER_ES_PORT']}"
    try:
        up = compose(project, "--profile", "elasticsearch", "up", "-d", "elasticsearch", env=env)
        assert up.returncode == 0, up.stderr[-3000:]
        client = _wait_for_nodes(url, 1, timeout=300)
        _load(url, tiny, adi[0], "lr-docker-es", tmp_path / "state")
        ids = index_ids(client, "lr-docker-es")
        assert len(ids) == len(set(ids)) == len(adi[1])
        assert set(ids) == {d["_id"] for d in adi[1]}
        versions = {n["version"] for n in client.nodes.info()["nodes"].values()}  # no GET /
        assert versions == {load_lock(engine="elasticsearch").version}
    finally:
        down = compose(project, "--profile", "*", "down", "-v", env=env)
    assert down.returncode == 0, down.stderr[-2000:]
    assert leftovers(project) == {"containers": [], "volumes": [], "networks": []}


def _wait_for_nodes(url: str, nodes: int, timeout: float) -> Any:
    """The client of ``url`` once its cluster has exactly ``nodes`` nodes."""
    def formed() -> Any:
        try:
            client = connect(url, timeout=30)
            health = client.cluster.health(wait_for_nodes=str(nodes), timeout="10s",
                                           request_timeout=30)
        except Exception:  # noqa: BLE001 - not up yet
            return None
        return client if health["number_of_nodes"] == nodes else None

    return wait_until(formed, f"{url}: a cluster of {nodes} nodes", timeout=timeout, pause=2)


def _sigkill(container: str, pid: int) -> None:
    """SIGKILL the container's main process: directly where this host sees it (a root
    engine: at once, while the ingest runs fast), else through ``docker kill``."""
    try:
        os.kill(pid, signal.SIGKILL)
    except (PermissionError, ProcessLookupError):
        killed = subprocess.run(["docker", "kill", container], capture_output=True, text=True,
                                timeout=60, check=False)
        assert killed.returncode == 0, killed.stderr


def _ingest_with_a_node_loss(project: str, url: str, bundle: Path, corpus: Path, index: str,
                             state: Path) -> tuple[int, int]:
    """Ingest from the host; SIGKILL os3 once 100 documents are in, start it again once the
    other two have dropped it; rerun to resume if the first run gave up. Returns (acked at
    the kill, reruns)."""
    args = [str(corpus), "--bundle", str(bundle), "--index", index, "--url", url,
            "--state-dir", str(state), "--no-progress", "-q", "--chunk-size", "8",
            "--batch-size", "8", "--sort-window", "32", "--timeout", "60",
            "--max-attempts", "12", "--max-backoff", "10"]
    victim = f"{project}-os3-1"
    pid = subprocess.run(["docker", "inspect", "--format", "{{.State.Pid}}", victim],
                         capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    proc = subprocess.Popen([sys.executable, "-m", "ingest.bulk", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **CHILD_ENV})
    wait_for_checkpoint(proc, state, 100, timeout=300, pause=0.05)
    _sigkill(victim, int(pid))
    acked = checkpoint_indexed(state)
    assert proc.poll() is None, "the ingest finished before the kill; give it more documents"
    _wait_for_nodes(url, 2, timeout=300)  # os3 comes back once the others have dropped it
    started = compose(project, "--profile", "cluster", "start", "os3")
    assert started.returncode == 0, started.stderr
    _, err = proc.communicate(timeout=900)
    reruns, code = 0, proc.returncode
    while code != 0:  # 1: gave up while the shard was away; the same command resumes
        assert reruns < 3, f"ingest keeps failing: {err[-3000:]}"
        again = ingest_cli(args, timeout=900)
        code, err, reruns = again.returncode, again.stderr.decode(), reruns + 1
    return acked, reruns


def test_three_nodes_lose_one_mid_ingest_then_down_leaves_nothing(
        tiny: Path, tmp_path: Path) -> None:
    ensure_images()
    project = f"lr-opensearch-cluster-{os.getpid()}"
    env = {"LR_DOCKER_CLUSTER_PORT": str(free_port())}
    url = f"http://127.0.0.1:{env['LR_DOCKER_CLUSTER_PORT']}"
    docs = read_corpus(data_dir() / "cranfield" / "corpus.jsonl.gz")  # 1,400 documents
    docs = [d for d in docs if d.get("title", "").strip() or d.get("text", "").strip()]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", docs)
    try:
        up = compose(project, "--profile", "cluster", "up", "-d", "os1", "os2", "os3", env=env)
        assert up.returncode == 0, up.stderr[-3000:]
        started = time.monotonic()
        client = _wait_for_nodes(url, 3, timeout=600)
        print(f"\n[docker] three nodes formed in {time.monotonic() - started:.0f} s")
        index = f"lr-docker-cluster-{uuid.uuid4().hex[:8]}"
        made = _lr("index", "create", "--bundle", str(tiny), "--index", index, "--url", url,
                   "--shards", "3", "--replicas", "1")
        assert made.returncode == 0, made.stderr[-2000:]
        acked, reruns = _ingest_with_a_node_loss(project, url, tiny, corpus, index,
                                                 tmp_path / "state")
        print(f"[docker] os3 killed with {acked} documents acknowledged; reruns: {reruns}")
        assert acked < len(docs) // 2, "the kill came too late to be mid-ingest"
        client = _wait_for_nodes(url, 3, timeout=300)
        client.cluster.health(index=index, wait_for_status="green", timeout="120s",
                              request_timeout=150)
        ids = index_ids(client, index)
        assert len(ids) == len(set(ids)) == len(docs)
        assert set(ids) == {d["_id"] for d in docs}
    finally:
        down = compose(project, "--profile", "*", "down", "-v", env=env)
    assert down.returncode == 0, down.stderr[-2000:]
    assert leftovers(project) == {"containers": [], "volumes": [], "networks": []}
