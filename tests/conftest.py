"""Shared fixtures: a real OpenSearch cluster (and Elasticsearch node) for integration tests.

Where the OpenSearch cluster comes from (first that applies):

1. env ``LR_TEST_OPENSEARCH_URL``: an external cluster (e.g. your dev node,
   ``http://127.0.0.1:9210``; basic auth / TLS through the LR_OPENSEARCH_* variables);
2. ``LR_TEST_BACKEND=docker``: the ``opensearch`` service of ``docker/docker-compose.yml``
   through pytest-docker (images built by docker/build.sh; tests/docker_support.py). The
   Docker tests (``-m docker``, tests/apps/test_docker.py) use it whatever the backend;
3. otherwise the project's local node (lr_opensearch.node): installed into the cache if
   missing, started once per session on free ports with a throwaway node dir under
   pytest's tmp, stopped at the end.

**The version matrix.** ``LR_TEST_OPENSEARCH_VERSION`` (e.g. ``2.19.1``; default the
packaged default, 3.6.0) selects which packaged OpenSearch the throwaway node runs (or which
version the external cluster must be); the tests marked ``matrix`` (ingest, every fusion
path, explain, eval) are the ones CI runs again on each other version::

    LR_TEST_OPENSEARCH_VERSION=2.19.1 python3 -m pytest -m "matrix and not slow"

Elasticsearch (``es_url`` / ``es_client``, for the lr_opensearch.engine.elasticsearch adapter's tests): env
``LR_TEST_ELASTICSEARCH_URL``, else a throwaway local node (``lr node ... --engine
elasticsearch``, heap 512m) started on free ports the first time a test asks for it.

If no cluster can be had the tests FAIL with the reason; they are never skipped.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from node_support import free_port, opensearch_test_version


@pytest.fixture(autouse=True, scope="session")
def _table_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Unfitted tables the tests compute stay in the session's temporary directory
    (``fit.build.table_cache_path``), not in the user's cache."""
    before = os.environ.get("LR_TABLE_CACHE")
    os.environ["LR_TABLE_CACHE"] = str(tmp_path_factory.mktemp("tables"))
    yield
    if before is None:
        os.environ.pop("LR_TABLE_CACHE", None)
    else:
        os.environ["LR_TABLE_CACHE"] = before


REPO = Path(__file__).resolve().parent.parent
COMPOSE_FILE = REPO / "docker" / "docker-compose.yml"


def _answers(url: str) -> bool:
    from lr_opensearch.engine.client import make_client

    try:
        return bool(make_client(url, timeout=5).ping())
    except Exception:  # noqa: BLE001 - any failure means "not up yet"
        return False


def _backend() -> str:
    """Where ``opensearch_url`` comes from: ``external``, ``docker`` or ``local`` (the module
    docstring). A Docker engine that merely answers changes nothing: Docker is opt-in."""
    if os.environ.get("LR_TEST_OPENSEARCH_URL"):
        return "external"
    backend = os.environ.get("LR_TEST_BACKEND", "local")
    if backend not in ("local", "docker"):
        pytest.fail(f"LR_TEST_BACKEND={backend!r}: use 'local' (default) or 'docker'",
                    pytrace=False)
    return backend


def _es_answers(url: str) -> bool:
    """True if ``_cluster/health`` answers (Elasticsearch's integ-test-zip has no ``GET /``)."""
    from elasticsearch import Elasticsearch

    try:
        Elasticsearch(url, request_timeout=5).cluster.health()
        return True
    except Exception:  # noqa: BLE001 - any failure means "not up"
        return False


def _from_docker(request: pytest.FixtureRequest) -> str:
    services = request.getfixturevalue("docker_services")  # (its port: docker_compose_command)
    port = services.port_for("opensearch", 9200)
    url = f"http://127.0.0.1:{port}"
    services.wait_until_responsive(check=lambda: _answers(url), timeout=400.0, pause=2.0)
    return url


def _from_local_node(tmp_factory: pytest.TempPathFactory, engine: str = "opensearch",
                     heap: str | None = None, env_url: str = "LR_TEST_OPENSEARCH_URL",
                     version: str | None = None) -> Iterator[str]:
    """Install (if needed) and start a throwaway node of ``engine`` (``version``: one of its
    packaged versions, default its default) on free ports."""
    from lr_opensearch.errors import LRError
    from lr_opensearch.node import NodeConfig, get_engine, install, start_node, stop_node

    kind = get_engine(engine)
    node_dir = tmp_factory.mktemp(f"{kind.name}-node")
    http_port = free_port()
    transport_port = free_port()
    config = NodeConfig(node_dir=node_dir, http_port=http_port, transport_port=transport_port,
                        heap=heap or os.environ.get("LR_TEST_NODE_HEAP", "1g"),
                        cluster_name="lr-test", engine=kind.name)
    try:
        started = time.monotonic()
        start_node(config, install(engine=kind.name, version=version), timeout=300)
        print(f"\n[conftest] {kind.display} {kind.version(version)} test node {config.url} ready in "
              f"{time.monotonic() - started:.0f} s (node dir {node_dir})")
    except LRError as exc:
        pytest.fail(f"no {kind.display} node for the integration tests: {exc}\n"
                    f"Run `python -m lr_opensearch.node install --engine {kind.name} "
                    f"--version {kind.version(version)}` (needs mvn + a JDK), or point "
                    f"{env_url} at a running node.", pytrace=False)
    try:
        yield config.url
    finally:
        stop_node(node_dir, timeout=60)


@pytest.fixture(scope="session")
def docker_compose_command() -> str:
    """pytest-docker: compose through the engine tests/docker_support.py finds, after the
    images are built (no engine or a failed build fails the test, with the reason)."""
    from docker_support import ensure_images

    ensure_images()
    # The compose file publishes on LR_DOCKER_HTTP_PORT; a free one keeps dev nodes safe. Picked
    # after the image builds (minutes), right before `up`: picked earlier, another process
    # (a test node) once took it in between ("bind: address already in use").
    os.environ.setdefault("LR_DOCKER_HTTP_PORT", str(free_port()))
    return "docker compose"


@pytest.fixture(scope="session")
def docker_compose_file() -> str:
    """pytest-docker: our compose file (OpenSearch + Dashboards, security disabled)."""
    return str(COMPOSE_FILE)


@pytest.fixture(scope="session")
def docker_compose_project_name() -> str:
    return f"lr-opensearch-tests-{os.getpid()}"


@pytest.fixture(scope="session")
def docker_setup() -> list[str]:
    """pytest-docker: only the OpenSearch service; no ``--wait``: podman without systemd
    never runs healthchecks, so ``_from_docker`` polls the node itself."""
    return ["up -d opensearch"]


@pytest.fixture(scope="session")
def docker_cleanup() -> list[str]:
    """pytest-docker: every service of every profile, and the volumes."""
    return ['--profile "*" down -v']


@pytest.fixture(scope="session")
def docker_opensearch_url(request: pytest.FixtureRequest) -> str:
    """URL of the compose file's single OpenSearch node (started once per session)."""
    return _from_docker(request)


@pytest.fixture(scope="session")
def opensearch_url(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real OpenSearch cluster for this test session (see the module docstring)."""
    backend = _backend()
    external = os.environ.get("LR_TEST_OPENSEARCH_URL")
    version = os.environ.get("LR_TEST_OPENSEARCH_VERSION")
    if backend == "external" and external:
        if not _answers(external):
            pytest.fail(f"LR_TEST_OPENSEARCH_URL={external} does not answer; start that "
                        "cluster or unset the variable to let the tests start a node",
                        pytrace=False)
        if version:
            _check_version(external, opensearch_test_version())
        yield external
    elif backend == "docker":
        if version:
            pytest.fail("LR_TEST_OPENSEARCH_VERSION selects the local node's version; the "
                        "Docker backend runs the compose file's", pytrace=False)
        yield request.getfixturevalue("docker_opensearch_url")
    else:
        yield from _from_local_node(tmp_path_factory, version=opensearch_test_version())


def _check_version(url: str, expected: str) -> None:
    """Fail the session when the external cluster is not the version asked for."""
    from lr_opensearch.engine.client import make_client

    found = str(make_client(url, timeout=10).info()["version"]["number"])
    if found != expected:
        pytest.fail(f"LR_TEST_OPENSEARCH_VERSION={expected} but LR_TEST_OPENSEARCH_URL={url} "
                    f"runs OpenSearch {found}", pytrace=False)


@pytest.fixture(scope="session")
def os_client(opensearch_url: str) -> Any:
    """An ``opensearchpy.OpenSearch`` client on the session's cluster."""
    from lr_opensearch.engine.client import make_client

    client = make_client(opensearch_url, timeout=120)
    client.cluster.health(wait_for_status="yellow", timeout="60s", request_timeout=90)
    return client


@pytest.fixture(scope="session")
def secure_endpoint(opensearch_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A TLS + basic-auth nginx in front of the session's OpenSearch (tests/secure_proxy.py):
    certificates made for this session. No nginx is a failure, never a skip."""
    from secure_proxy import start_proxy

    if not opensearch_url.startswith("http://"):
        pytest.fail(f"the secured-endpoint tests put their own TLS proxy in front of a plain "
                    f"http node; {opensearch_url} is not one", pytrace=False)
    try:
        endpoint, proc = start_proxy(tmp_path_factory.mktemp("nginx"), opensearch_url)
    except RuntimeError as exc:
        pytest.fail(f"no TLS proxy for the secured-endpoint tests: {exc}", pytrace=False)
    try:
        yield endpoint
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - make sure it is gone
            proc.kill()


@pytest.fixture(scope="session")
def os_capabilities(os_client: Any) -> Any:
    """``lr_opensearch.engine.client.Capabilities`` of the session's cluster."""
    from lr_opensearch.engine.client import cluster_capabilities

    return cluster_capabilities(os_client)


@pytest.fixture
def index_name(request: pytest.FixtureRequest, os_client: Any) -> Iterator[str]:
    """A unique index name for one test; the index is deleted afterwards."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name.lower())[:40]
    name = f"lr-test-{base.strip('-')}-{uuid.uuid4().hex[:8]}"
    yield name
    os_client.indices.delete(index=name, ignore_unavailable=True)


@pytest.fixture
def ingest_here(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``python -m ingest.bulk ARGS`` run in this process (tests/ingest_support.Here)."""
    from ingest_support import Here

    return Here(caplog, monkeypatch)


@pytest.fixture(scope="session")
def es_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a real Elasticsearch node: ``LR_TEST_ELASTICSEARCH_URL`` or a throwaway local
    9.x node (started only when a test asks for it, stopped at the end of the session)."""
    external = os.environ.get("LR_TEST_ELASTICSEARCH_URL")
    if external:
        if not _es_answers(external):
            pytest.fail(f"LR_TEST_ELASTICSEARCH_URL={external} does not answer; start that "
                        "node or unset the variable to let the tests start one", pytrace=False)
        yield external
    else:
        yield from _from_local_node(tmp_path_factory, "elasticsearch",
                                    heap=os.environ.get("LR_TEST_ES_HEAP", "512m"),
                                    env_url="LR_TEST_ELASTICSEARCH_URL")


@pytest.fixture(scope="session")
def es_client(es_url: str) -> Any:
    """An ``elasticsearch.Elasticsearch`` client on the session's Elasticsearch node."""
    from elasticsearch import Elasticsearch

    client = Elasticsearch(es_url, request_timeout=120)
    client.cluster.health(wait_for_status="yellow", timeout="60s")
    return client


def _fitted_adi_bundle(model: str, label: str) -> Path:
    """``model`` with its query table fitted on ADI, from the bundle store: fitted once per
    store, then reused (``fit.fitted.fitted_bundle``, what `lr bundle build --fit-corpus`
    and zero-config ingest build)."""
    from ingest_support import data_dir

    from lr_opensearch.fit.fitted import fitted_bundle

    corpus = data_dir() / "adi" / "corpus.jsonl.gz"
    if not corpus.is_file():
        pytest.fail(f"the shared ADI collection is missing ({corpus})", pytrace=False)
    started = time.monotonic()
    path = fitted_bundle(corpus, model=model, progress=False)
    print(f"\n[conftest] fitted {label} bundle {path} ready in {time.monotonic() - started:.0f} s")
    return path


@pytest.fixture(scope="session")
def fitted_minilm() -> Path:
    """The real bundle: the packaged MiniLM with its query table fitted on ADI (what the
    README's `lr bundle build --fit-corpus` and zero-config ingest build), from the bundle
    store: fitted once per store (minutes on 2 cores), then reused (`lr demo` uses the same
    one)."""
    from lr_opensearch.fit.fitted import DEFAULT_MODEL

    return _fitted_adi_bundle(DEFAULT_MODEL, "MiniLM")


@pytest.fixture(scope="session")
def fitted_bge() -> Path:
    """The packaged bge-small-en-v1.5 (12 layers, CLS pooling, the query prompt "Represent
    this sentence for searching relevant passages: " in every table row) fitted on ADI, as
    `lr bundle build --model packaged:bge-small --fit-corpus` builds it; from the bundle
    store like ``fitted_minilm`` (the first fit on a machine: minutes on 2 cores)."""
    return _fitted_adi_bundle("packaged:bge-small", "bge-small")


@pytest.fixture(scope="session")
def plugin_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A throwaway local OpenSearch node (``LR_TEST_OPENSEARCH_VERSION``, default 3.6.0) with
    the LightRetriever plugin built from this checkout's source and installed
    (``lr_opensearch.plugin.install.plugin_installation``); ``.url``, ``.restart()``.
    ``LR_TEST_PLUGIN_NODE_DIR`` + ``LR_TEST_PLUGIN_HTTP_PORT``: a node of this checkout's
    plugin already running from that directory (a developer's, left running)."""
    from plugin_support import PluginNode

    from lr_opensearch.errors import LRError

    where = os.environ.get("LR_TEST_PLUGIN_NODE_DIR")
    node = (PluginNode(Path(where), opensearch_test_version(),
                       http_port=int(os.environ["LR_TEST_PLUGIN_HTTP_PORT"]))
            if where else PluginNode(tmp_path_factory.mktemp("plugin-node"),
                                     opensearch_test_version()))
    try:
        if not where:
            node.start()
    except LRError as exc:
        pytest.fail(f"no OpenSearch node with the LightRetriever plugin: {exc}", pytrace=False)
    try:
        yield node
    finally:
        if not where:
            node.stop()


@pytest.fixture(scope="session")
def plugin_client(plugin_node: Any) -> Any:
    """A client of ``plugin_node`` (the same after a restart: same URL)."""
    return plugin_node.client()
