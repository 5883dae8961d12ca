"""The LightRetriever plugin on real bundles (slow tier): the packaged MiniLM and
bge-small-en-v1.5 fitted on ADI (conftest's ``fitted_minilm`` / ``fitted_bge``), ADI's 82
documents ingested by ``python -m ingest.bulk`` into the plugin node, `lr plugin load`, and
every one of ADI's 35 test queries searched by the plugin and by ``lr search``'s retriever:
the same top 10, scores within 1e-5."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from incluster_support import read_jsonl
from ingest_support import REPO, data_dir
from plugin_support import TOL, plugin_search

from lr_opensearch.bundle import load_bundle
from lr_opensearch.plugin.load import load_plugin_model
from lr_opensearch.search import Retriever

pytestmark = [pytest.mark.slow, pytest.mark.node,
              pytest.mark.timeout(3600)]  # a first fit of bge-small: minutes, more under load

ADI = data_dir() / "adi"


def _test_queries() -> list[str]:
    judged = {line.split("\t")[0] for line in
              (ADI / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    return [q["text"] for q in read_jsonl(ADI / "queries.jsonl.gz") if str(q["_id"]) in judged]


@pytest.fixture(scope="module", params=["minilm", "bge-small"])
def real(request: pytest.FixtureRequest, plugin_node: Any,
         tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(bundle, index, client): ADI ingested with the fitted bundle, the bundle loaded."""
    path: Path = request.getfixturevalue("fitted_minilm" if request.param == "minilm"
                                         else "fitted_bge")
    client = plugin_node.client()
    index = f"lr-plugin-real-{request.param}"
    proc = subprocess.run(
        [sys.executable, "-m", "ingest.bulk", str(ADI / "corpus.jsonl.gz"), "--bundle", str(path),
         "--index", index, "--url", plugin_node.url, "--no-progress", "-q",
         "--state-dir", str(tmp_path_factory.mktemp("state"))],
        cwd=REPO, text=True, capture_output=True, timeout=1800, check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    bundle = load_bundle(path)
    done = load_plugin_model(client, bundle, index)
    print(f"\n[plugin] {request.param}: {done['parts']:,} bytes stored, "
          f"{done['bytes']:,} bytes in the node's memory")
    yield bundle, index, client
    client.indices.delete(index=index, ignore_unavailable=True)


def test_all_adi_test_queries_rank_as_lr_search(real: Any) -> None:
    bundle, index, client = real
    texts = _test_queries()
    assert len(texts) == 35
    retriever = Retriever(bundle, client, index, fusion="client")
    same, worst = 0, 0.0
    for text in texts:
        expected = retriever.search(text)
        status, answer = plugin_search(client, index, {"text": text})
        assert status == 200, answer
        got = answer["hits"]["hits"]
        if [h["_id"] for h in got] == [h.doc_id for h in expected]:
            same += 1
            worst = max([worst, *(abs(g["_score"] - e.score) for g, e in zip(got, expected,
                                                                              strict=True))])
    print(f"\n[plugin] {bundle.config.backbone_name}: top 10 equal for {same} of {len(texts)}, "
          f"largest score difference {worst:.2e}")
    assert same == len(texts)
    assert worst <= TOL
