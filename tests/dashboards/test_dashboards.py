"""``lr dashboards export`` against real indices: well-formed ndjson for the saved-objects
import API, every reference resolving, fields typed from the mapping, the bundle visible."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from tiny_artifacts import tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.dashboards.saved_objects import check_references
from lr_opensearch.engine.elasticsearch import ElasticsearchAdapter
from lr_opensearch.engine.opensearch import OpenSearchAdapter

pytestmark = pytest.mark.node


def _export(url: str, index: str, out: Path, *extra: str) -> list[dict[str, Any]]:
    from lr_opensearch.cli import main

    assert main(["dashboards", "export", "--index", index, "--url", url, "--out", str(out),
                 *extra]) == 0
    lines = out.read_text(encoding="utf-8").splitlines()
    objects = [json.loads(line) for line in lines]  # one JSON object per line
    assert all({"type", "id", "attributes", "references"} <= set(o) for o in objects)
    assert check_references(objects) == []
    return objects


def test_opensearch_dashboards_objects(os_client: Any, opensearch_url: str,
                                       tmp_path: Path) -> None:
    bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False)))
    index = f"lr-test-dash-{uuid.uuid4().hex[:8]}"
    OpenSearchAdapter(os_client).create_index(index, bundle)
    try:
        os_client.index(index=index, id="a", refresh=True, body={
            "title": "t", "text": "x", "lr_dense": [0.1] * 16, "lr_sparse": {"k": 1.0},
            "metadata": {"lang": "en", "year": 1999}})
        objects = _export(opensearch_url, index, tmp_path / "o.ndjson")
        kinds = [o["type"] for o in objects]
        assert kinds.count("index-pattern") == 1 and "search" in kinds
        assert kinds.count("visualization") >= 3
        pattern = objects[kinds.index("index-pattern")]
        assert pattern["attributes"]["title"] == index
        fields = {f["name"]: f for f in json.loads(pattern["attributes"]["fields"])}
        assert not fields["lr_dense"]["aggregatable"] and not fields["lr_sparse"]["searchable"]
        assert fields["metadata.lang.keyword"]["aggregatable"]
        assert fields["metadata.year"]["type"] == "number"
        labels = json.loads(pattern["attributes"]["fieldAttrs"])
        assert bundle.bundle_id in labels["lr_dense"]["customLabel"]
        for o in objects:
            if o["type"] == "visualization":
                state = json.loads(o["attributes"]["visState"])
                assert state["aggs"] and state["type"] in ("metric", "table", "histogram")
            if o["type"] in ("visualization", "search"):
                source = json.loads(o["attributes"]["kibanaSavedObjectMeta"]["searchSourceJSON"])
                assert source["indexRefName"] == o["references"][0]["name"]
        titles = " | ".join(o["attributes"]["title"] for o in objects)
        assert "metadata.lang.keyword" in titles and bundle.bundle_id in titles
        again = _export(opensearch_url, index, tmp_path / "p.ndjson", "--pattern", "lr-test-*")
        assert again[0]["attributes"]["title"] == "lr-test-*"
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)


def test_kibana_objects_for_an_elasticsearch_index(es_client: Any, es_url: str,
                                                   tmp_path: Path) -> None:
    bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False)))
    index = f"lr-test-kib-{uuid.uuid4().hex[:8]}"
    assert ElasticsearchAdapter(es_client).create_index(index, bundle)
    try:
        objects = _export(es_url, index, tmp_path / "k.ndjson")
        assert all(o.get("coreMigrationVersion") for o in objects)  # the Kibana variant
        assert objects[0]["attributes"]["title"] == index
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.mark.dashboards
def test_dashboards_import_accepts_the_objects(tmp_path: Path) -> None:
    """The compose file's OpenSearch and Dashboards (the public Dashboards image: a registry
    is needed, so it runs only as ``pytest -m dashboards``), an LR index on that OpenSearch,
    and the exported file through Dashboards' own import endpoint. No engine: a failure."""
    import os
    import subprocess
    import urllib.request

    from docker_support import ensure_images
    from node_support import free_port
    from waiting import wait_until

    from lr_opensearch.dashboards.saved_objects import saved_objects, to_ndjson
    from lr_opensearch.engine.client import make_client

    ensure_images()
    compose = Path(__file__).resolve().parents[2] / "docker" / "docker-compose.yml"
    env = {**os.environ, "LR_DOCKER_HTTP_PORT": str(free_port()),
           "LR_DOCKER_DASHBOARDS_PORT": str(free_port()), "COMPOSE_PROJECT_NAME": "lr-dash-test"}
    base = ["docker", "compose", "-f", str(compose)]
    subprocess.run([*base, "--profile", "dashboards", "up", "-d", "opensearch", "dashboards"],
                   env=env, check=True, timeout=900)
    try:
        dash = f"http://127.0.0.1:{env['LR_DOCKER_DASHBOARDS_PORT']}"
        def answers() -> bool:
            try:
                with urllib.request.urlopen(f"{dash}/api/status", timeout=5) as resp:
                    return bool(resp.status == 200)
            except OSError:
                return False

        wait_until(answers, f"Dashboards at {dash}/api/status", timeout=300, pause=5)
        client = make_client(f"http://127.0.0.1:{env['LR_DOCKER_HTTP_PORT']}")
        bundle = load_bundle(tiny_bundle(tmp_path / "b", wordpiece_tokenizer(padding=False)))
        index = "lr-dash-test"
        OpenSearchAdapter(client).create_index(index, bundle)
        adapter = OpenSearchAdapter(client)
        objects = saved_objects(index, adapter.index_mapping(index), adapter.index_meta(index))
        path = tmp_path / "objects.ndjson"
        path.write_text(to_ndjson(objects), encoding="utf-8")
        out = subprocess.run(["curl", "-sS", "-X", "POST",
                              f"{dash}/api/saved_objects/_import?overwrite=true",
                              "-H", "osd-xsrf: true", "--form", f"file=@{path}"],
                             capture_output=True, text=True, check=True, timeout=120)
        answer = json.loads(out.stdout)
        assert answer.get("success") is True, answer
        assert answer.get("successCount") == len(objects)
    finally:
        subprocess.run([*base, "--profile", "*", "down", "-v"], env=env, check=False,
                       timeout=300)
