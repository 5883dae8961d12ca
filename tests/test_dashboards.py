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
from lr_opensearch.inspect.dashboards import check_references
from lr_opensearch.search.elasticsearch import ElasticsearchAdapter
from lr_opensearch.search.opensearch import OpenSearchAdapter

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
