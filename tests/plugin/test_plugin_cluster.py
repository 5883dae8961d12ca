"""The LightRetriever plugin on a two-node cluster (slow tier): a bundle loaded through one
node is served by the other, which builds the model from the models index on its first
search (its own replica of it), with the same ranking as `lr search`."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from node_support import free_port
from plugin_support import QUERIES, loaded_corpus, plugin_search

from lr_opensearch.engine.client import make_client
from lr_opensearch.node.cluster import ClusterSpec, start_cluster, stop_cluster
from lr_opensearch.plugin.install import plugin_installation
from lr_opensearch.search import Retriever

pytestmark = [pytest.mark.slow, pytest.mark.node]

MODELS = "/_plugins/lightretriever/models"


def _taken(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSpec]:
    base = free_port()
    while _taken(base + 1):
        base = free_port()
    spec = ClusterSpec(root=tmp_path_factory.mktemp("plugin-cluster"), nodes=2,
                       base_http_port=base, heap=os.environ.get("LR_TEST_CLUSTER_HEAP", "512m"),
                       cluster_name="lr-plugin-cluster",
                       transport_ports=(free_port(), free_port()))
    started = time.monotonic()
    start_cluster(spec, plugin_installation(), timeout=400)
    print(f"\n[cluster] 2 nodes with the plugin green in {time.monotonic() - started:.0f} s")
    try:
        yield spec
    finally:
        stop_cluster(spec, timeout=60)


def test_the_second_node_serves_a_bundle_loaded_through_the_first(
        cluster: ClusterSpec, tmp_path: Any) -> None:
    first, second = (make_client(url, timeout=120) for url in cluster.urls)
    bundle, index, _ = loaded_corpus(first, tmp_path, seed=81, doc_seed=12)
    try:
        second.cluster.health(wait_for_status="green", timeout="60s", request_timeout=90)
        assert [m["bundle_id"] for m in first.transport.perform_request("GET", MODELS)["models"]] \
            == [bundle.bundle_id]
        assert second.transport.perform_request("GET", MODELS)["models"] == []
        retriever = Retriever(bundle, first, index, fusion="client")
        for text in QUERIES:
            status, answer = plugin_search(second, index, {"text": text})
            assert status == 200, answer
            expected = retriever.search(text)
            assert [h["_id"] for h in answer["hits"]["hits"]] == [h.doc_id for h in expected]
        held = second.transport.perform_request("GET", MODELS)["models"]
        assert [m["bundle_id"] for m in held] == [bundle.bundle_id]
    finally:
        first.indices.delete(index=index, ignore_unavailable=True)
