"""The LightRetriever plugin against `lr search`: the same top 10 and scores (within 1e-5)
for several queries, weights, modes, filters, paging and explain, on a node with the plugin
built from this checkout (tests/conftest.py ``plugin_node``)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from plugin_support import QUERIES, TOL, assert_same, loaded_corpus, plugin_search

from lr_opensearch.cli import main as cli_main
from lr_opensearch.search import Retriever

pytestmark = [pytest.mark.node, pytest.mark.matrix]




@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory, plugin_client: Any) -> Any:
    """(bundle, index) with the bundle loaded into the cluster and the index's record."""
    bundle, index, _ = loaded_corpus(plugin_client, tmp_path_factory.mktemp("b"), seed=3, doc_seed=7)
    yield bundle, index
    plugin_client.indices.delete(index=index, ignore_unavailable=True)


def both(plugin_client: Any, loaded: Any, text: str, **options: Any) -> tuple[list[Any], list[Any]]:
    """(lr search's hits, the plugin's hits) for one text and the same options."""
    bundle, index = loaded
    retriever = Retriever(bundle, plugin_client, index, fusion="client")
    body: dict[str, Any] = {"text": text}
    names = {"k": "size", "from_": "from", "source": "_source"}
    body.update({names.get(key, key): v for key, v in options.items()})
    hits = retriever.search(text, **options)
    status, answer = plugin_search(plugin_client, index, body)
    assert status == 200, answer
    return hits, answer["hits"]["hits"]


@pytest.mark.parametrize("text", QUERIES)
def test_hybrid_equals_lr_search(plugin_client: Any, loaded: Any, text: str) -> None:
    expected, got = both(plugin_client, loaded, text)
    assert len(expected) == 10
    assert_same(expected, got)
    assert all("lr_dense" not in h["_source"] and "lr_sparse" not in h["_source"] for h in got)
    assert [h["_source"] for h in got] == [h.source for h in expected]


def test_without_source_the_same_hits(plugin_client: Any, loaded: Any) -> None:
    """``"_source": false`` answers the same ids and scores without the documents (no
    multi-get), as ``lr search``'s ``source=False``."""
    expected, got = both(plugin_client, loaded, QUERIES[1], source=False)
    assert_same(expected, got)
    assert got and all("_source" not in h for h in got)


def test_legs_fuse_in_sub_query_order(plugin_client: Any, loaded: Any) -> None:
    """The float32 sums of the fusion follow the legs' order, which the record keeps as a
    list (a mapping's _meta object comes back in no set order)."""
    status, answer = plugin_search(plugin_client, loaded[1], {"text": QUERIES[0]})
    assert status == 200
    assert answer["lightretriever"]["legs"] == ["dense", "sparse", "bm25"]


def test_the_answer_says_where_the_time_went(plugin_client: Any, loaded: Any) -> None:
    """``lightretriever.timings``: each phase in milliseconds, each leg's own took, and the
    phases within the answer's ``took`` (the profile bench/scale.py reads)."""
    status, answer = plugin_search(plugin_client, loaded[1], {"text": QUERIES[0]})
    assert status == 200
    timings = answer["lightretriever"]["timings"]
    phases = ["resolve_ms", "encode_ms", "legs_ms", "fuse_ms", "fetch_ms"]
    assert list(timings) == phases[:3] + ["leg_took_ms"] + phases[3:]
    assert all(isinstance(timings[p], float) and timings[p] >= 0.0 for p in phases)
    assert list(timings["leg_took_ms"]) == ["dense", "sparse", "bm25"]
    assert all(isinstance(t, int) and 0 <= t <= timings["legs_ms"] + 1
               for t in timings["leg_took_ms"].values())
    assert timings["fetch_ms"] > 0.0  # the page's sources: one multi-get
    assert sum(timings[p] for p in phases) <= answer["took"] + 1


@pytest.mark.parametrize("options", [
    {"weights": {"dense": 0.7, "sparse": 0.3}},
    {"weights": {"sparse": 0.5, "bm25": 0.5}, "candidates": 7},
    {"mode": "dense"}, {"mode": "sparse", "k": 5}, {"mode": "bm25"},
    {"from_": 5, "k": 7}, {"candidates": 3, "k": 10},
    {"filter": {"term": {"metadata.group": "b"}}},
    {"normalization": "l2"}, {"combination": "rrf"}, {"combination": "rrf", "rank_constant": 5},
    {"combination": "geometric_mean"}, {"combination": "harmonic_mean"},
    {"semantics": "linear"}, {"semantics": "linear", "combination": "rrf"},
    {"semantics": "linear", "normalization": "l2", "weights": {"dense": 1.0, "sparse": 0.5}},
    {"filter": [{"term": {"metadata.group": "a"}}, {"exists": {"field": "title"}}],
     "weights": {"dense": 0.5, "bm25": 0.5}},
])
def test_options_equal_lr_search(plugin_client: Any, loaded: Any, options: dict[str, Any]) -> None:
    for text in QUERIES[:3]:
        expected, got = both(plugin_client, loaded, text, **options)
        assert expected, options
        assert_same(expected, got)


def test_explain_gives_each_legs_scores(plugin_client: Any, loaded: Any) -> None:
    expected, got = both(plugin_client, loaded, QUERIES[0], explain=True)
    assert_same(expected, got)
    for e, g in zip(expected, got, strict=True):
        legs = g["_explanation"]["legs"]
        assert sorted(legs) == sorted(e.explanation.legs)
        for name, leg in e.explanation.legs.items():
            mine = legs[name]
            for key, value in (("engine_score", leg.engine_score), ("score", leg.score),
                               ("norm", leg.norm), ("rank", leg.rank)):
                if value is None:
                    assert mine[key] is None, (name, key)
                else:
                    assert abs(mine[key] - value) <= TOL, (name, key, mine[key], value)


def _readme_block() -> list[str]:
    """The README's plugin block, as commands (continuation lines joined)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if "_lightretriever" in b]
    assert len(blocks) == 1, f"README.md should show one curl of _lightretriever, not {len(blocks)}"
    commands, current = [], ""
    for line in blocks[0].splitlines():
        current += line + "\n"
        if current.count("'") % 2 == 0 and not line.endswith("\\"):
            commands.append(current.strip())
            current = ""
    return commands


def test_readme_commands_as_written(plugin_client: Any, loaded: Any, plugin_node: Any) -> None:
    """The README's block, run as written (its node URL, index ``docs`` and bundle path
    swapped for this node's, index and bundle): `lr plugin load`, then the curl, which
    answers `lr search`'s top 10 and scores."""
    bundle, index = loaded
    start, load, curl = _readme_block()
    assert start.split("#")[0].strip() == "lr node start --with-plugin"
    assert load == "lr plugin load --bundle bundles/minilm --index docs"
    argv = load.replace("bundles/minilm", str(bundle.path)).replace("--index docs",
                                                                    f"--index {index}").split()
    assert cli_main([*argv[1:], "--url", plugin_node.url]) == 0
    command = curl.replace("http://127.0.0.1:9200/docs/", f"{plugin_node.url}/{index}/")
    assert command != curl
    run = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120,
                         check=True)
    answer = json.loads(run.stdout)
    text = re.search(r'"text": "([^"]*)"', curl)
    assert text, "the README's curl should send a text"
    expected = Retriever(bundle, plugin_client, index, fusion="client").search(text.group(1))
    assert len(answer["hits"]["hits"]) == len(expected) == 10
    assert_same(expected, answer["hits"]["hits"])


def test_lr_plugin_status(plugin_client: Any, loaded: Any, plugin_node: Any,
                          capsys: pytest.CaptureFixture[str]) -> None:
    bundle, _ = loaded
    capsys.readouterr()
    assert cli_main(["plugin", "status", "--json", "--url", plugin_node.url]) == 0
    status = json.loads(capsys.readouterr().out)
    assert len(status["nodes"]) == 1
    assert bundle.bundle_id in [row["bundle_id"] for row in status["stored"]]
    held = status["node_models"]
    assert bundle.bundle_id in [m["bundle_id"] for m in held["models"]]
    assert held["max_bytes"] == 256 * 2**20
