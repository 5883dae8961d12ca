"""The local node manager: lock files, JDK choice, config files, and the CLI lifecycle.

The lifecycle tests drive ``lr node start/status/logs/stop`` (OpenSearch, and once with
``--engine elasticsearch``) in subprocesses on their own free ports and throwaway node
directories (separate from the session's test nodes).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from node_support import free_port
from waiting import wait_until

from lr_opensearch.errors import ConfigError, NodeError
from lr_opensearch.node import NodeConfig, load_lock
from lr_opensearch.node.config import default_node_dir, write_node_files
from lr_opensearch.node.java import find_java, java_major
from lr_opensearch.node.lock import LOCK_PATH, Artifact, verify_artifact


def test_lock_file_pins_every_artifact() -> None:
    lock = load_lock()
    assert lock.distribution.coordinates == \
        f"org.opensearch.distribution.integ-test-zip:opensearch:{lock.opensearch_version}:zip"
    assert {p.name for p in lock.plugins} == {"opensearch-knn", "opensearch-neural-search"}
    for art in lock.artifacts:
        assert len(art.sha256) == 64 and int(art.sha256, 16) >= 0
        assert art.size > 0 and art.coordinates.count(":") == 3
        assert art.version.startswith(lock.opensearch_version)
    raw = json.loads(LOCK_PATH.read_text())
    assert all({"groupId", "artifactId", "version", "packaging", "sha256"} <= set(a)
               for a in raw["artifacts"])


def test_elasticsearch_lock_and_config(tmp_path: Path) -> None:
    """The Elasticsearch lock pins one 9.x distribution; its node config differs only where
    the engines do (yml name, security off, master bootstrap setting, defaults)."""
    lock = load_lock(engine="elasticsearch")
    assert lock.engine == "elasticsearch" and lock.version.startswith("9.")
    assert lock.distribution.coordinates == \
        f"org.elasticsearch.distribution.integ-test-zip:elasticsearch:{lock.version}:zip"
    assert not lock.plugins and len(lock.distribution.sha256) == 64
    assert load_lock().engine == "opensearch" and load_lock().digest != lock.digest
    with pytest.raises(NodeError, match="lock of engine 'elasticsearch', not 'opensearch'"):
        load_lock(lock.path, engine="opensearch")
    with pytest.raises(ConfigError, match="unknown engine 'solr'"):
        NodeConfig(node_dir=tmp_path, engine="solr")

    es = NodeConfig(node_dir=tmp_path / "e", engine="elasticsearch")
    assert (es.http_port, es.transport, es.heap) == (9250, 9350, "512m")
    single = es.node_settings()
    assert single["xpack.security.enabled"] is False and single["discovery.type"] == "single-node"
    pair = NodeConfig(node_dir=tmp_path / "p", engine="elasticsearch", http_port=9251,
                      seed_ports=(9352,)).node_settings()
    assert pair["cluster.initial_master_nodes"] == ["lr-9251", "lr-9252"]
    assert "cluster.initial_cluster_manager_nodes" not in pair
    assert default_node_dir(9250, tmp_path, "elasticsearch") == tmp_path / "nodes" / "elasticsearch-9250"
    assert default_node_dir(9200, tmp_path) == tmp_path / "nodes" / "9200"

    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    for name in es.kind.config_files:
        (home / "config" / name).write_text(f"# {name}\n")
    write_node_files(es, home)
    yml = (es.config_dir / "elasticsearch.yml").read_text()
    assert "xpack.security.enabled: false" in yml and "http.port: 9250" in yml
    assert not (es.config_dir / "opensearch.yml").exists()
    assert (es.config_dir / "roles.yml").is_file()
    assert "-Xmx512m" in (es.config_dir / "jvm.options.d" / "lr.options").read_text()


def test_cli_node_dir_per_engine(tmp_path: Path) -> None:
    """Default node dirs: per engine with --engine; without it, the Elasticsearch dir of the
    port only when that one (and not OpenSearch's) holds a node's state."""
    import argparse

    from lr_opensearch.cli.node import _node_dir

    def where(engine: str | None, port: int | None) -> Path:
        return _node_dir(argparse.Namespace(data_dir=None, cache_dir=str(tmp_path),
                                            engine=engine, http_port=port))

    nodes = tmp_path / "nodes"
    assert where("elasticsearch", None) == nodes / "elasticsearch-9250"
    assert where("opensearch", None) == where(None, None) == nodes / "9200"
    assert where(None, 9250) == nodes / "9250"
    (nodes / "elasticsearch-9250").mkdir(parents=True)
    (nodes / "elasticsearch-9250" / "node.json").write_text("{}")
    assert where(None, 9250) == nodes / "elasticsearch-9250"
    (nodes / "9250").mkdir()
    (nodes / "9250" / "node.json").write_text("{}")
    assert where(None, 9250) == nodes / "9250"


def test_verify_artifact_rejects_a_corrupt_file(tmp_path: Path) -> None:
    good = tmp_path / "x.zip"
    good.write_bytes(b"hello")
    art = Artifact("plugin", "x", "g", "x", "1", "zip", 5,
                   "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824")
    verify_artifact(good, art)
    good.write_bytes(b"hellO")
    with pytest.raises(NodeError, match="sha256 of .* is"):
        verify_artifact(good, art)
    with pytest.raises(NodeError, match="has 3 bytes"):
        good.write_bytes(b"abc")
        verify_artifact(good, art)
    with pytest.raises(NodeError, match="missing"):
        verify_artifact(tmp_path / "absent.zip", art)


def test_java_choice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    java = find_java(21, 25)
    assert java.major >= 21 and java_major(java.path) == java.major
    fake = tmp_path / "jdk17"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "java").write_text("#!/bin/sh\n")
    (fake / "release").write_text('JAVA_VERSION="17.0.15"\n')
    assert java_major(fake) == 17
    monkeypatch.setenv("LR_JAVA_HOME", str(fake))
    with pytest.raises(NodeError, match="LR_JAVA_HOME=.* is not a JDK 21"):
        find_java(21, 25)
    monkeypatch.delenv("LR_JAVA_HOME")
    monkeypatch.setenv("JAVA_HOME", str(fake))  # too old: skipped, not used
    assert find_java(21, 25).major >= 21


def test_node_config_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "jvm.options").write_text("-Xms1g\n-Xmx1g\n")
    (home / "config" / "log4j2.properties").write_text("status = error\n")
    config = NodeConfig(node_dir=tmp_path / "n", http_port=9333, heap="1536m",
                        seed_ports=(9434,))
    write_node_files(config, home)
    yml = (config.config_dir / "opensearch.yml").read_text()
    assert '"http.port": 9333' not in yml and "http.port: 9333" in yml
    assert "transport.port: 9433" in yml
    assert "cluster.routing.allocation.disk.threshold_enabled: false" in yml
    assert 'discovery.seed_hosts: ["127.0.0.1:9433", "127.0.0.1:9434"]' in yml
    assert 'cluster.initial_cluster_manager_nodes: ["lr-9333", "lr-9334"]' in yml
    assert "discovery.type" not in yml
    assert "-Xmx1536m" in (config.config_dir / "jvm.options.d" / "lr.options").read_text()
    single = NodeConfig(node_dir=tmp_path / "s").node_settings()
    assert single["discovery.type"] == "single-node" and single["network.host"] == "127.0.0.1"
    with pytest.raises(ConfigError, match="heap"):
        NodeConfig(node_dir=tmp_path, heap="lots")
    with pytest.raises(ConfigError, match="not a TCP port"):
        NodeConfig(node_dir=tmp_path, http_port=70000)


def _lr(*args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LR_TEST_")}
    return subprocess.run([sys.executable, "-m", "lr_opensearch.node", *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.node
def test_cli_lifecycle(tmp_path: Path) -> None:
    """install (cached) -> start -> start again -> status -> logs -> stop -> status."""
    http, transport = free_port(), free_port()
    where = ["--http-port", str(http), "--data-dir", str(tmp_path / "node")]
    inst = _lr("install")
    assert inst.returncode == 0, inst.stderr
    try:
        first = _lr("start", *where, "--transport-port", str(transport), "--heap", "512m")
        assert first.returncode == 0, first.stdout + first.stderr
        assert "cluster green" in first.stdout and "opensearch-knn" in first.stdout
        assert "opensearch-neural-search" in first.stdout
        with urllib.request.urlopen(f"http://127.0.0.1:{http}/_cat/plugins?format=json") as r:
            assert "opensearch-knn" in {p["component"] for p in json.loads(r.read())}
        second = _lr("start", *where)
        assert second.returncode == 0 and "already running" in second.stderr
        status = _lr("status", *where, "--json")
        assert status.returncode == 0
        report = json.loads(status.stdout)
        assert report["running"] and report["health"] == "green"
        assert report["url"] == f"http://127.0.0.1:{http}"
        logs = _lr("logs", *where, "-n", "200")
        assert logs.returncode == 0 and "started" in logs.stdout
    finally:
        stop = _lr("stop", *where)
    assert stop.returncode == 0 and "stopped node" in stop.stdout
    # it says which node it stops before it does (issue 29: `lr node stop` alone stops 9200's)
    assert f"stopping the OpenSearch node at http://127.0.0.1:{http}" in stop.stdout
    assert "pid" in stop.stdout
    after = _lr("status", *where)
    assert after.returncode == 3 and "not running" in after.stdout
    again = _lr("stop", *where)
    assert again.returncode == 0 and "no node running" in again.stdout


def _put(url: str, body: dict) -> None:
    req = urllib.request.Request(url, method="PUT", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200


def _health_server(health: dict, indices: list) -> Any:
    """A stand-in node on a free loopback port answering ``_cluster/health`` with
    ``health`` (HTTP 408 when its wait timed out, as the engine answers) and ``_cat/indices``
    with ``indices`` (the caller shuts it down)."""
    import http.server
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's spelling
            asks = "_cluster/health" in self.path
            body = json.dumps(health if asks else indices).encode()
            self.send_response(408 if asks and health["timed_out"] else 200)  # as the engine
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_green_on_a_single_node_accepts_its_unassignable_replicas(
        caplog: pytest.LogCaptureFixture) -> None:
    """Waiting for green, a lone node that is yellow (its replicas have nowhere to go) is
    ready: the wait ends at once and says which index asks for replicas; two nodes that are
    yellow, or a red node, still wait."""
    from lr_opensearch.node.process import wait_for_health

    yellow = {"status": "yellow", "timed_out": True, "number_of_nodes": 1,
              "unassigned_shards": 1}
    server = _health_server(yellow, [{"index": "replicated", "rep": "1"}])
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        started = time.monotonic()
        wait_for_health(url, "green", 30)
        assert time.monotonic() - started < 15
        assert "replicated" in caplog.text and "number_of_replicas" in caplog.text
        yellow["number_of_nodes"] = 2
        with pytest.raises(NodeError, match="not green"):
            wait_for_health(url, "green", 2)
        yellow.update(number_of_nodes=1, status="red")
        with pytest.raises(NodeError, match="not green"):
            wait_for_health(url, "green", 2)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.node
def test_a_restarted_single_node_is_yellow_by_nature_and_never_stopped(tmp_path: Path) -> None:
    """A single node whose index asks for a replica is yellow for good: `lr node start`
    (waiting for green) accepts yellow there and names the index; and a node that answers
    but never reaches the health asked for (a primary it cannot assign) is left running."""
    http, transport = free_port(), free_port()
    where = ["--http-port", str(http), "--data-dir", str(tmp_path / "node")]
    url = f"http://127.0.0.1:{http}"
    try:
        first = _lr("start", *where, "--transport-port", str(transport), "--heap", "512m")
        assert first.returncode == 0, first.stdout + first.stderr
        _put(f"{url}/replicated", {"settings": {"number_of_replicas": 1}})
        assert _lr("stop", *where).returncode == 0
        again = _lr("start", *where, "--timeout", "400", timeout=600)
        assert again.returncode == 0, again.stdout + again.stderr
        assert "cluster yellow" in again.stdout and "replicated" in again.stderr
        assert "number_of_replicas" in again.stderr

        _put(f"{url}/stranded", {"settings": {"number_of_replicas": 0,
                                              "index.routing.allocation.require._name": "none"}})
        assert _lr("stop", *where).returncode == 0
        red = _lr("start", *where, "--timeout", "150", timeout=600)
        assert red.returncode == 1 and "left running" in red.stderr, red.stdout + red.stderr
        status = _lr("status", *where, "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["health"] == "red"
    finally:
        _lr("stop", *where)


@pytest.mark.node
def test_cli_lifecycle_elasticsearch(tmp_path: Path) -> None:
    """The same CLI with --engine elasticsearch: start -> status -> stop (one ES start)."""
    http, transport = free_port(), free_port()
    node_dir = tmp_path / "es"
    where = ["--http-port", str(http), "--data-dir", str(node_dir)]
    try:
        first = _lr("start", "--engine", "elasticsearch", *where,
                    "--transport-port", str(transport))
        assert first.returncode == 0, first.stdout + first.stderr
        assert "cluster green, Elasticsearch 9." in first.stdout
        status = _lr("status", *where, "--json")
        report = json.loads(status.stdout)
        assert status.returncode == 0 and report["engine"] == "elasticsearch"
        assert report["health"] == "green" and report["url"] == f"http://127.0.0.1:{http}"
        assert "xpack.security.enabled: false" in (node_dir / "config" / "elasticsearch.yml").read_text()
        mixed = _lr("start", *where)  # an OpenSearch start on the ES node's dir
        assert mixed.returncode != 0 and "runs an Elasticsearch node" in mixed.stderr
        pid = report["pid"]
    finally:
        stop = _lr("stop", *where)
    assert stop.returncode == 0 and "stopped node" in stop.stdout
    # The launcher's child (the server JVM) is gone too: nothing is left in its group.
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _pgrp(p) == pid]
    assert not left, f"processes of the node's group still alive: {left}"
    assert _lr("status", *where).returncode == 3


def _pgrp(proc: Path) -> int | None:
    try:
        fields = (proc / "stat").read_text().rsplit(")", 1)[-1].split()
    except OSError:
        return None
    return int(fields[2]) if fields[0] not in ("Z", "X") else None


def test_start_refuses_a_taken_port(tmp_path: Path) -> None:
    """A port in use gives a clear error at once, not a hung or half-started node."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = str(sock.getsockname()[1])
        proc = _lr("start", "--http-port", port, "--data-dir", str(tmp_path / "n"), timeout=300)
    assert proc.returncode == 1
    assert f"HTTP port 127.0.0.1:{port} is already in use" in proc.stderr
    assert not (tmp_path / "n" / "node.json").exists()


@pytest.mark.slow
@pytest.mark.node
def test_two_node_cluster(tmp_path: Path) -> None:
    """Two local nodes form one cluster; an index with 1 replica goes green across them."""
    from lr_opensearch.engine.client import make_client
    from lr_opensearch.node import NodeConfig, install, start_node, stop_node

    inst = install()
    http = (free_port(), free_port())
    transport = (free_port(), free_port())
    configs = [NodeConfig(node_dir=tmp_path / f"n{i}", http_port=http[i],
                          transport_port=transport[i], heap="512m", cluster_name="lr-pair",
                          seed_ports=(transport[1 - i],),
                          initial_managers=(f"lr-{http[0]}", f"lr-{http[1]}"))
               for i in range(2)]
    try:
        start_node(configs[0], inst, wait=False)
        start_node(configs[1], inst, timeout=400)
        client = make_client(configs[0].url, timeout=120)
        health = client.cluster.health(wait_for_nodes="2", wait_for_status="green",
                                       timeout="120s", request_timeout=150)
        assert health["number_of_nodes"] == 2 and not health["timed_out"]
        client.indices.create(index="pair", body={"settings": {"number_of_replicas": 1}})
        health = client.cluster.health(index="pair", wait_for_status="green", timeout="120s",
                                       request_timeout=150)
        assert health["active_shards"] == 2
    finally:
        for config in configs:
            stop_node(config.node_dir)


def test_prune_keeps_the_current_and_running_installations(tmp_path: Path) -> None:
    from lr_opensearch.node.install import MARKER, prune_installations

    homes = {name: tmp_path / f"opensearch-{name}" for name in ("old", "busy", "new", "partial")}
    for name, home in homes.items():
        home.mkdir()
        if name != "partial":
            (home / MARKER).write_text("{}")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)",
                                str(homes["busy"] / "bin" / "opensearch")])
    cmdline = Path(f"/proc/{sleeper.pid}/cmdline")  # it appears once exec has completed
    wait_until(lambda: b"opensearch-busy" in cmdline.read_bytes(), "the sleeper's command line",
               timeout=5, pause=0.05)
    try:
        removed = prune_installations(tmp_path, keep=homes["new"])
    finally:
        sleeper.kill()
        sleeper.wait()
    assert removed == [homes["old"]]
    assert all(homes[n].exists() for n in ("busy", "new", "partial"))


def test_packaged_versions_and_their_locks(tmp_path: Path) -> None:
    """Each packaged version names its own lock, whose version is that version (one record);
    a prefix picks a version, an unknown one is refused with the valid ones; each version
    has its own default node dir; --with-ml exists for the default version only."""
    from lr_opensearch.node import get_engine
    from lr_opensearch.node.install import _select_lock

    for kind in (get_engine("opensearch"), get_engine("elasticsearch")):
        for version in kind.versions:
            lock = load_lock(engine=kind.name, version=version)
            assert (lock.engine, lock.version) == (kind.name, version)
            assert all(a.version.startswith(version) for a in lock.plugins)
    opensearch = get_engine("opensearch")
    assert opensearch.default_version == load_lock().version == "3.6.0"
    assert opensearch.version("2.19") == opensearch.version("2.19.1") == "2.19.1"
    with pytest.raises(ConfigError, match=r"OpenSearch 2\.18 is not packaged; valid "
                                          r"versions: 3\.6\.0, 2\.19\.1"):
        load_lock(version="2.18")
    assert default_node_dir(9200, tmp_path, "opensearch", "2.19") == \
        tmp_path / "nodes" / "opensearch-2.19.1-9200"
    assert default_node_dir(9200, tmp_path, "opensearch", "3.6.0") == tmp_path / "nodes" / "9200"
    with pytest.raises(NodeError, match="--with-ml is packaged for OpenSearch 3.6.0 only"):
        _select_lock(None, "opensearch", True, "2.19.1")


def test_opensearch_219_lock_assembles_the_missing_modules(tmp_path: Path) -> None:
    """2.19.1's integ-test-zip has only transport-netty4: the lock names the modules the node
    needs and their jars, and install writes each module's folder from them (descriptor,
    policy); 2.x runs on Java 11-21 (no security manager in 24+)."""
    from lr_opensearch.node.install import _write_modules

    lock = load_lock(version="2.19.1")
    assert (lock.java_min_major, lock.java_max_major) == (11, 21)
    assert {p.name for p in lock.plugins} == {"opensearch-knn", "opensearch-neural-search"}
    names = {m.name for m in lock.modules}
    assert names == {"lang-painless", "mapper-extras", "analysis-common", "lang-mustache"}
    jars = [a for a in lock.artifacts if a.role == "module"]
    assert {a.module for a in jars} == names
    assert all(len(a.sha256) == 64 and a.packaging == "jar" for a in jars)

    store = tmp_path / "artifacts"
    store.mkdir()
    paths = {}
    for jar in jars:
        paths[jar.coordinates] = store / jar.file_name
        paths[jar.coordinates].write_bytes(jar.coordinates.encode())
    top = tmp_path / "home"
    _write_modules(top, lock, paths)
    painless = top / "modules" / "lang-painless"
    assert (painless / "lang-painless-2.19.1.jar").read_bytes() == \
        b"org.opensearch.plugin:lang-painless:2.19.1:jar"
    assert len(list(painless.glob("*.jar"))) == 8  # painless, its SPI, antlr, 5 asm jars
    descriptor = (painless / "plugin-descriptor.properties").read_text().splitlines()
    assert {"name=lang-painless", "classname=org.opensearch.painless.PainlessPlugin",
            "version=2.19.1", "opensearch.version=2.19.1", "java.version=11",
            "extended.plugins="} <= set(descriptor)
    assert 'permission java.lang.RuntimePermission "createClassLoader";' in \
        (painless / "plugin-security.policy").read_text()
    common = (top / "modules" / "analysis-common" / "plugin-descriptor.properties").read_text()
    assert "extended.plugins=lang-painless" in common.splitlines()
    assert not (top / "modules" / "mapper-extras" / "plugin-security.policy").exists()
    with pytest.raises(NodeError, match="already has module lang-painless"):
        _write_modules(top, lock, paths)


def test_a_module_jar_must_name_a_module_of_the_lock(tmp_path: Path) -> None:
    raw = json.loads(load_lock(version="2.19.1").path.read_text())
    raw["artifacts"][1]["module"] = "lang-python"
    bad = tmp_path / "bad.lock.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(NodeError, match="names one of the lock's modules"):
        load_lock(bad)
    raw["modules"]["lang-python"] = {"classname": "x.Y", "description": "no jar"}
    raw["artifacts"][1]["module"] = "lang-painless"
    bad.write_text(json.dumps(raw))
    with pytest.raises(NodeError, match=r"module\(s\) \['lang-python'\] have no jar"):
        load_lock(bad)


def test_java_range_for_opensearch_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A lock's max_major keeps Java 24+ (no security manager) away from OpenSearch 2.x."""
    def fake(name: str, version: str) -> Path:
        home = tmp_path / name
        (home / "bin").mkdir(parents=True)
        (home / "bin" / "java").write_text("#!/bin/sh\n")
        (home / "release").write_text(f'JAVA_VERSION="{version}"\n')
        return home

    new, old = fake("jdk25", "25.0.1"), fake("jdk17", "17.0.15")
    monkeypatch.setenv("LR_JAVA_HOME", str(new))
    with pytest.raises(NodeError, match="LR_JAVA_HOME=.* is not a JDK 11-21"):
        find_java(11, 21, 21)
    monkeypatch.setenv("LR_JAVA_HOME", str(old))
    assert find_java(11, 21, 21).path == old
    monkeypatch.delenv("LR_JAVA_HOME")
    monkeypatch.setenv("JAVA_HOME", str(new))  # too new: skipped, the scan finds one in range
    monkeypatch.setattr("lr_opensearch.node.java.JVM_ROOTS", (tmp_path,))
    assert find_java(11, 21, 21).path == old
    monkeypatch.setattr("lr_opensearch.node.java.JVM_ROOTS", (tmp_path / "none",))
    with pytest.raises(NodeError, match="no Java 11-21 JDK found"):
        find_java(11, 21, 21)


def test_prune_keeps_the_other_packaged_versions(tmp_path: Path) -> None:
    """Installing one packaged version never removes another's installation; a superseded
    installation of the same version goes."""
    from lr_opensearch.node.install import MARKER, prune_installations

    def home(name: str, version: str) -> Path:
        path = tmp_path / f"opensearch-{name}"
        path.mkdir()
        (path / MARKER).write_text(json.dumps({"version": version, "flavour": ""}))
        return path

    current, other, stale = home("3.6.0-new", "3.6.0"), home("2.19.1-a", "2.19.1"), \
        home("3.6.0-old", "3.6.0")
    assert prune_installations(tmp_path, keep=current, version="3.6.0") == [stale]
    assert other.exists()
    again = home("2.19.1-b", "2.19.1")
    assert prune_installations(tmp_path, keep=again, version="2.19.1") == [other]
    assert current.exists()
