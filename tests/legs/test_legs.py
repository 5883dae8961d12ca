"""The leg registry: a leg defined once, a fourth leg registered in one place (this file)
searched, fused, explained and reported with no edit elsewhere, and what the code before
the registry wrote (tests/data/legacy-legs: a bundle with one weight field per leg, an
``lr eval`` report, the hits of every search mode) still loading and searching the same."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ingest_support import ingest_config

from lr_opensearch import legs
from lr_opensearch.bundle import BundleConfig, load_bundle
from lr_opensearch.cli.search import format_hits, hits_json
from lr_opensearch.errors import ConfigError
from lr_opensearch.evaluation import compare_table, load_reports, run_names
from lr_opensearch.evaluation.config import EvalConfig
from lr_opensearch.indexing.run import run as ingest
from lr_opensearch.legs import QUERY_TEXT, Leg, LegContext
from lr_opensearch.search import Retriever
from lr_opensearch.search.fusion import fuse

LEGACY = Path(__file__).resolve().parents[1] / "data" / "legacy-legs"
LEGACY_ID = "d5f7bc033146c87d682532371ee341c6"  # what the code before the registry wrote


# ---- the registry itself --------------------------------------------------------------------
def test_registry_lists_legs_in_order_and_refuses_unknown_ones() -> None:
    assert legs.names()[:3] == ("dense", "sparse", "bm25")
    assert legs.modes()[0] == legs.HYBRID and set(legs.names()) <= set(legs.modes())
    assert legs.baseline().name == "bm25"
    with pytest.raises(ConfigError, match="valid legs: dense, sparse, bm25"):
        legs.get("colbert")
    with pytest.raises(ConfigError, match="registered already"):
        legs.register(legs.get("dense"))
    with pytest.raises(ConfigError, match="built in"):
        legs.unregister("bm25")
    assert legs.reference_weights({"dense": 0.4, "sparse": 0.2, "bm25": 0.4}) == {
        "full_dense": 0.4, "sparse": 0.2, "bm25": 0.4}


def test_weights_are_mappings_over_every_leg() -> None:
    w = legs.validate_weights({"bm25": 0.5, "dense": 0.5})
    assert list(w) == list(legs.names()) and w["bm25"] == 0.5 and w["sparse"] == 0.0
    assert legs.fusion_config(w).legs == ("dense", "bm25")
    assert legs.weights_of({"weights": [0.6, 0.4], "legs": ["dense", "sparse"]}) == {
        "dense": 0.6, "sparse": 0.4}
    assert legs.weights_of({"dense_weight": 0.7, "sparse_weight": 0.3}) == {
        "dense": 0.7, "sparse": 0.3}


# ---- what the code before the registry wrote --------------------------------------------------
def test_legacy_bundle_loads_with_its_id_and_weights() -> None:
    manifest = json.loads((LEGACY / "bundle" / "lightretriever.json").read_text())
    assert "weights" not in manifest["config"] and "bm25_weight" in manifest["config"]
    bundle = load_bundle(LEGACY / "bundle")
    assert bundle.bundle_id == LEGACY_ID
    assert dict(bundle.config.weights) == {**dict.fromkeys(legs.names(), 0.0),
                                           "dense": 0.5, "sparse": 0.2, "bm25": 0.3}
    # a config of the two-leg era (no bm25_weight) loads with BM25 at 0
    two = {k: v for k, v in manifest["config"].items() if k != "bm25_weight"}
    two.update(dense_weight=0.7, sparse_weight=0.3)
    assert BundleConfig.from_dict(two).weights["bm25"] == 0.0
    # new manifests keep the weighted legs as one mapping
    assert bundle.config.to_dict()["weights"] == {"dense": 0.5, "sparse": 0.2, "bm25": 0.3}


def test_legacy_report_loads_and_compares() -> None:
    (report,) = load_reports([LEGACY / "report.json"])
    assert isinstance(report["weights"], list)  # written as a list beside "legs"
    assert legs.weights_of(report) == {"dense": 0.5, "sparse": 0.2, "bm25": 0.3}
    table = compare_table([report])
    assert "lr-dense+sparse+bm25" in table and "bm25" in table


@pytest.fixture()
def legacy_index(opensearch_url: str, os_client: Any, tmp_path: Path) -> Iterator[str]:
    index = f"lr-test-legacy-{uuid.uuid4().hex[:8]}"
    ingest(ingest_config(LEGACY / "beir" / "corpus.jsonl.gz", LEGACY / "bundle", index,
                         opensearch_url, tmp_path / "state"))
    yield index
    os_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.mark.node
def test_legacy_bundle_searches_as_before(os_client: Any, legacy_index: str) -> None:
    """Every search mode gives the hits, ranks and per-leg scores the code before the
    registry gave on the same bundle and corpus (tests/data/legacy-legs/expected.json)."""
    expected = json.loads((LEGACY / "expected.json").read_text())
    r = Retriever(load_bundle(LEGACY / "bundle"), os_client, legacy_index)
    for case in expected["searches"]:
        extra = {"fusion": case["fusion"]} if case["fusion"] else {}
        hits = r.search(case["query"], k=5, mode=case["mode"], explain=True, **extra)
        # equal scores may come back in another order from a new index (HNSW ties): compare
        # the ranked scores, and each document's values by id
        assert [h.score for h in hits] == pytest.approx([w["score"] for w in case["hits"]],
                                                        rel=1e-5), case
        wanted = {w["doc_id"]: w for w in case["hits"]}
        tied_out = [h for h in hits if h.doc_id not in wanted]
        assert len(tied_out) <= 1, case  # at most the last place can swap with a tie
        for got in hits:
            want = wanted.get(got.doc_id)
            if want is None:
                continue
            for name in ("dense", "sparse", "bm25"):
                for what, value in ((f"{name}_score", got.scores.get(name)),
                                    (f"{name}_norm", got.explanation.leg(name).norm)):
                    expected_value = want[what]
                    assert (value is None) == (expected_value is None), (case, what)
                    if value is not None:
                        assert value == pytest.approx(expected_value, rel=1e-5), (case, what)


# ---- a fourth leg, registered here and nowhere else -------------------------------------------
def _title_query(adapter: Any, text: str, ctx: LegContext) -> dict[str, Any]:
    """BM25 on the title alone (engine-neutral DSL); the caller's filter applies."""
    query: dict[str, Any] = {"match": {"title": text}}
    return {"bool": {"must": [query], "filter": [ctx.filter]}} if ctx.filter else query


TITLE = Leg(name="title_bm25", label="BM25 on titles", input=QUERY_TEXT,
            needs="the query texts", sub_query=_title_query, run="title-bm25")


@pytest.fixture()
def title_leg() -> Iterator[Leg]:
    legs.register(TITLE)
    yield TITLE
    legs.unregister(TITLE.name)


@pytest.mark.node
def test_a_fourth_leg_is_searched_fused_explained_and_reported(
        title_leg: Leg, os_client: Any, legacy_index: str, opensearch_url: str,
        tmp_path: Path) -> None:
    bundle = load_bundle(LEGACY / "bundle")
    weights = {"dense": 0.3, "sparse": 0.2, "bm25": 0.3, title_leg.name: 0.2}
    r = Retriever(bundle, os_client, legacy_index, weights=weights, candidates=30)
    query = "eiffel tower paris"
    # searched: alone, and as a fourth sub-query of the hybrid (server and client fusion)
    alone = r.search(query, k=30, mode=title_leg.name)
    assert alone and all(title_leg.name in h.scores for h in alone)
    server = r.search(query, k=10, fusion="server", explain=True)
    client = r.search(query, k=10, fusion="client", explain=True)
    assert [h.doc_id for h in server] == [h.doc_id for h in client]
    assert [h.score for h in server] == pytest.approx([h.score for h in client], rel=1e-5)
    # fused: the client fusion of the four legs' own lists, by hand
    lists = {name: [(h.doc_id, h.scores[name] if name != "dense" else
                     h.explanation.leg(name).engine_score) for h in
                    r.search(query, k=30, mode=name, explain=True)] for name in weights}
    by_hand = fuse(lists, weights=weights, k=10)
    assert [h.doc_id for h in by_hand] == [h.doc_id for h in client]
    assert [h.score for h in by_hand] == pytest.approx([h.score for h in client], rel=1e-5)
    # explained: the new leg's score, norm and rank beside the others
    top = next(h for h in client if title_leg.name in h.scores)
    part = top.explanation.leg(title_leg.name)
    assert part.score == top.scores[title_leg.name] and part.rank >= 1 and part.norm > 0
    assert list(top.explanation.legs) == list(weights)
    assert title_leg.name in format_hits(query, client, explain=True).splitlines()[1]
    assert hits_json(query, client)["hits"][0]["scores"][title_leg.name] is not None
    plan = r.dsl(query)[0]
    assert plan["fusion"]["legs"] == list(weights)
    assert {"match": {"title": query}} in plan["requests"][0]["body"]["query"]["hybrid"]["queries"]
    # reported: lr eval runs the new leg alone, under its run name
    assert title_leg.run in run_names()
    from lr_opensearch.evaluation.runs import evaluate

    out = tmp_path / "eval"
    shutil.copytree(LEGACY / "beir", tmp_path / "beir")
    report = evaluate(tmp_path / "beir", bundle, os_client, index=legacy_index,
                      config=EvalConfig(runs=(title_leg.run, "lr-hybrid"), out_dir=out,
                                        url=opensearch_url, sweep=False))
    assert report["index_status"] == "reused"
    assert 0.0 < report["runs"][title_leg.run]["ndcg@10"] <= 1.0
    assert (out / "runs" / f"{title_leg.run}.trec").is_file()
    assert report["weights"] == {"dense": 0.5, "sparse": 0.2, "bm25": 0.3}


@pytest.mark.node
def test_a_fourth_leg_reaches_the_cli_the_eval_sweep_and_the_inspector(
        title_leg: Leg, os_client: Any, legacy_index: str, opensearch_url: str,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The registered leg, with no edit elsewhere: `lr search --mode` / `--weights` take it,
    `lr eval --sweep-leg` sweeps it against the bundle's legs (its one-leg run and the
    others' re-fused), and the inspector's slider moves it."""
    from lr_opensearch.cli import main

    bundle_dir = str(LEGACY / "bundle")
    query = "eiffel tower paris"
    base = ["search", "--bundle", bundle_dir, "--index", legacy_index, "--url", opensearch_url,
            "--json"]
    assert main([*base, "--mode", title_leg.name, query]) == 0
    alone = json.loads(capsys.readouterr().out)[0]  # one object per query
    assert alone["hits"] and all(h["scores"][title_leg.name] is not None for h in alone["hits"])
    weights = "dense=0.3,sparse=0.2,bm25=0.3,title_bm25=0.2"
    assert main([*base, "--weights", weights, "--fusion", "client", query]) == 0
    fused = json.loads(capsys.readouterr().out)[0]
    assert any(h["scores"].get(title_leg.name) is not None for h in fused["hits"])
    # lr eval: the sweep moves the new leg; at weight 0 it is the bundle's hybrid re-fused
    shutil.copytree(LEGACY / "beir", tmp_path / "beir")
    out = tmp_path / "eval"
    runs = ",".join(["lr-dense", "lr-sparse", "bm25", title_leg.run, "lr-hybrid"])
    assert main(["eval", "--dataset", str(tmp_path / "beir"), "--bundle", bundle_dir,
                 "--index", legacy_index, "--url", opensearch_url, "--runs", runs,
                 "--sweep-leg", title_leg.name, "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    sweep = report["sweep"]
    assert sweep["leg"] == title_leg.name and len(sweep["weight"]) == 11
    assert sweep["opensearch"]["ndcg@10"][0] == pytest.approx(
        report["runs"]["lr-hybrid"]["ndcg@10"], abs=1e-9)
    assert sweep["opensearch"]["ndcg@10"][-1] == pytest.approx(
        report["runs"][title_leg.run]["ndcg@10"], abs=1e-9)
    assert (out / "sweep.png").stat().st_size > 0
    # the inspector: its slider is the new leg's, and moving it weighs the new leg
    from lr_opensearch.inspect import create_app

    app = create_app(bundle_dir, legacy_index, client=os_client, slider=title_leg.name,
                     full=False).test_client()
    page = app.get("/").get_data(as_text=True)
    assert f"{title_leg.label} weight" in page and f'id="{title_leg.name}"' in page
    got = app.get(f"/api/search?q=eiffel+tower&{title_leg.name}=0.5").get_json()
    assert got["weights"][title_leg.name] == pytest.approx(0.5)
    assert got["weights"] == pytest.approx(legs.move_weight(
        {"dense": 0.5, "sparse": 0.2, "bm25": 0.3}, title_leg.name, 0.5))
    assert title_leg.name in got["lists"]


def test_an_unregistered_leg_is_refused_with_the_list() -> None:
    with pytest.raises(ConfigError, match="unknown fusion leg"):
        legs.validate_weights({"title_bm25": 1.0})
