"""OpenSearch with the k-NN plugin alone (no neural-search: what some managed clusters
offer): ingest, calibration and every fusion path that needs no ``hybrid`` query work, the
one query (``fusion="calibrated"``) included; server fusion is refused with the reason, and
``auto`` fuses on the client.

The node is the packaged OpenSearch installation copied without its neural-search plugin
(slow tier: the copy and a node start)."""

from __future__ import annotations

import dataclasses
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from ingest_support import ingest_config
from node_support import free_port

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.client import connect
from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.errors import ConfigError
from lr_opensearch.indexing.run import run as ingest
from lr_opensearch.node import NodeConfig, install, start_node, stop_node
from lr_opensearch.search import Retriever
from lr_opensearch.search.calibration import read_calibration

pytestmark = [pytest.mark.slow, pytest.mark.node]

DATA = Path(__file__).resolve().parents[1] / "data" / "legacy-legs"
NEURAL = "opensearch-neural-search"
QUERIES = ("supersonic boundary layer", "heat transfer plate", "a study in detail")


@pytest.fixture(scope="module")
def knn_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A node of the packaged OpenSearch with k-NN and without neural-search; its URL."""
    base = install()
    root = tmp_path_factory.mktemp("knn-only")
    home = root / "opensearch"
    shutil.copytree(base.home, home, symlinks=True)
    assert (home / "plugins" / NEURAL).is_dir(), "the packaged node lost its neural-search"
    shutil.rmtree(home / "plugins" / NEURAL)
    config = NodeConfig(node_dir=root / "node", http_port=free_port(),
                        transport_port=free_port(), cluster_name="lr-test-knn-only")
    try:
        start_node(config, dataclasses.replace(base, home=home), timeout=300)
    except Exception as exc:  # noqa: BLE001 - the test fails, it does not skip
        pytest.fail(f"the k-NN-only node did not start: {exc}", pytrace=False)
    try:
        yield f"http://127.0.0.1:{config.http_port}"
    finally:
        stop_node(config.node_dir, timeout=60)


def test_every_path_but_the_hybrid_query_works_with_knn_alone(knn_only: str,
                                                              tmp_path: Path) -> None:
    client = connect(knn_only)
    plugins = {p["component"] for p in client.cat.plugins(format="json")}
    assert "opensearch-knn" in plugins and NEURAL not in plugins
    index = f"lr-knn-only-{uuid.uuid4().hex[:8]}"
    summary = ingest(ingest_config(DATA / "beir" / "corpus.jsonl.gz", DATA / "bundle", index,
                                   knn_only, tmp_path / "state"))
    assert summary.complete and summary.counts.indexed > 0
    assert read_calibration(make_adapter(client), index).scales  # the ingest calibrated it
    r = Retriever(load_bundle(DATA / "bundle"), client, index, candidates=30)
    for text in QUERIES:
        one = r.search(text, k=10, fusion="calibrated", explain=True)
        fused = r.search(text, k=10, fusion="client")
        auto = r.search(text, k=10)  # auto: no hybrid query here, so the client fuses
        assert one and fused, text
        assert [h.doc_id for h in auto] == [h.doc_id for h in fused], text
        assert all(h.explanation is not None and h.explanation.legs for h in one), text
        for mode in ("dense", "sparse", "bm25"):
            assert r.search(text, k=5, mode=mode), (text, mode)
    plan = r.dsl(QUERIES[0], fusion="calibrated")[0]
    assert plan["path"] == "calibrated" and len(plan["requests"]) == 1
    assert "bool" in plan["requests"][0]["body"]["query"]
    with pytest.raises(ConfigError, match="neural-search"):
        r.search(QUERIES[0], fusion="server")
