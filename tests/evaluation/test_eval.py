"""Unit tests of lr_opensearch.evaluation: BEIR loading, metrics, TREC files, sweep, tables."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import pytest

from lr_opensearch.errors import ConfigError, CorpusError
from lr_opensearch.evaluation import (
    compare_table,
    compute_metrics,
    load_beir,
    load_reports,
    parse_runs,
    read_trec,
    write_trec,
)
from lr_opensearch.evaluation.runs import weight_sweep
from lr_opensearch.legs.scores import score_from_inner_product


def make_beir(root: Path, *, gz: bool = True) -> Path:
    root.mkdir(parents=True)
    (root / "qrels").mkdir()
    docs = [{"_id": f"d{i}", "title": f"title {i}", "text": f"text {i}"} for i in range(5)]
    queries = [
        {"_id": "q1", "text": "one"},
        {"_id": "q2", "text": "two"},
        {"_id": "train", "text": "x"},
    ]
    for name, rows in (("corpus", docs), ("queries", queries)):
        data = "".join(json.dumps(r) + "\n" for r in rows).encode()
        if gz:
            (root / f"{name}.jsonl.gz").write_bytes(gzip.compress(data))
        else:
            (root / f"{name}.jsonl").write_bytes(data)
    (root / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t1\nq2\td3\t1\n"
    )
    return root


def test_load_beir_restricts_queries_to_the_split(tmp_path: Path) -> None:
    for gz in (True, False):
        ds = load_beir(make_beir(tmp_path / f"set{gz}", gz=gz))
        assert ds.queries == {"q1": "one", "q2": "two"}  # the unjudged "train" query is left out
        assert ds.qrels == {"q1": {"d1": 2, "d2": 1}, "q2": {"d3": 1}}
        assert ds.n_docs == 5 and ds.name == f"set{gz}"


def test_load_beir_errors_say_where(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_beir(tmp_path / "nope")
    root = make_beir(tmp_path / "bad")
    (root / "qrels" / "test.tsv").write_text("q9\td1\t1\n")
    with pytest.raises(ConfigError, match="not in the queries"):
        load_beir(root)
    (root / "qrels" / "test.tsv").write_text("q1\td1\tgood\n")
    with pytest.raises(CorpusError, match="test.tsv:1: relevance 'good'"):
        load_beir(root)
    (root / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    (root / "corpus.jsonl.gz").write_bytes(gzip.compress(b'{"_id": "a"}\n{oops\n'))
    with pytest.raises(CorpusError, match="corpus.jsonl.gz:2: invalid JSON"):
        load_beir(root)
    with pytest.raises(ConfigError, match="no qrels/dev.tsv"):
        load_beir(root, split="dev")


@pytest.mark.parametrize("qrels", ["", "query-id\tcorpus-id\tscore\n", "q1\td1\t0\n"])
def test_a_split_with_no_judgments_is_refused_before_anything_runs(tmp_path: Path,
                                                                   qrels: str) -> None:
    root = make_beir(tmp_path / "ds")
    (root / "qrels" / "test.tsv").write_text(qrels)
    with pytest.raises(ConfigError, match="judges no document relevant"):
        load_beir(root, "test")


def test_metrics_hand_computed() -> None:
    qrels = {"q1": {"a": 2, "b": 1}, "q2": {"c": 1}}
    run = {"q1": [("b", 3.0), ("x", 2.0), ("a", 1.0)]}  # q2 retrieved nothing: counts as 0
    m = compute_metrics(qrels, run)
    # trec_eval nDCG, linear gains: DCG = 1/log2(2) + 2/log2(4) = 2; IDCG = 2 + 1/log2(3)
    assert m["ndcg@10"] == pytest.approx((2 / (2 + 1 / math.log2(3))) / 2)
    assert m["recall@100"] == pytest.approx((1.0 + 0.0) / 2)
    assert m["mrr@10"] == pytest.approx((1.0 + 0.0) / 2)
    deep = {"q1": [(f"x{i}", 100.0 - i) for i in range(30)] + [("a", 1.0)], "q2": [("c", 1.0)]}
    m = compute_metrics(qrels, deep)
    assert m["recall@20"] == pytest.approx(0.5) and m["recall@50"] == pytest.approx(0.75)
    assert m["mrr@10"] == pytest.approx(0.5)


def test_trec_round_trip_and_run_names(tmp_path: Path) -> None:
    run = {"q1": [("d1", 2.5), ("d2", 1.25)], "q2": [("d3", 0.5)]}
    path = tmp_path / "runs" / "x.trec"
    write_trec(path, run, "lr-hybrid")
    assert path.read_text().splitlines()[1] == "q1 Q0 d2 2 1.250000 lr-hybrid"
    assert read_trec(path) == run
    assert parse_runs("bm25, lr-hybrid") == ["bm25", "lr-hybrid"]
    assert parse_runs(None)[0] == "bm25"
    with pytest.raises(ConfigError, match="valid runs: bm25, full-dense"):
        parse_runs("bm25,colbert")


def test_compare_table_and_reports(tmp_path: Path) -> None:
    rep = {
        "dataset": "adi",
        "runs": {
            "bm25": {"ndcg@10": 0.5, "recall@100": 0.9, "qps": 12.345},
            "lr-hybrid": {"ndcg@10": 0.25},
        },
    }
    (tmp_path / "adi").mkdir()
    (tmp_path / "adi" / "report.json").write_text(json.dumps(rep))
    table = compare_table(load_reports([tmp_path]))
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["dataset", "run", "ndcg@10"]
    assert lines[2].split() == ["adi", "bm25", "0.5000", "-", "-", "0.9000", "-", "12.3"]
    assert lines[3].split()[:3] == ["adi", "lr-hybrid", "0.2500"]
    assert compare_table([]) == "(no runs)"


def test_weight_sweep_endpoints_are_the_single_sides() -> None:
    qrels = {"q": {"s1": 1, "d1": 1}}
    dense = {"q": [("d1", 0.9), ("d2", 0.5), ("s1", -0.2)]}  # inner products
    sparse = {"q": [("s1", 7.0), ("s2", 3.0)]}
    curves = weight_sweep({"dense": dense, "sparse": sparse}, {"dense": 0.7, "sparse": 0.3},
                          "dense", qrels, depth=10)
    only_dense = compute_metrics(qrels, {"q": dense["q"]})["ndcg@10"]
    # dense weight 0: a leg of weight 0 is not searched, so the sparse list alone (both
    # semantics); dense weight 1: the dense list alone
    only_sparse = compute_metrics(qrels, {"q": sparse["q"]})["ndcg@10"]
    for sem in ("opensearch", "linear"):
        assert curves[sem]["ndcg@10"][-1] == pytest.approx(only_dense)
        assert curves[sem]["ndcg@10"][0] == pytest.approx(only_sparse)
    # in between both legs count: s1 (sparse top) and d1 (dense top) both relevant, top 2
    assert curves["opensearch"]["ndcg@10"][5] == pytest.approx(1.0)
    assert curves["leg"] == "dense"
    assert len(curves["weight"]) == 11 and curves["weight"][7] == 0.7


def test_the_sweep_moves_any_leg_and_the_others_keep_their_proportions() -> None:
    """Three legs: sweeping BM25, dense and sparse share the rest 2:1 (the bundle's 0.4 /
    0.2); each point equals fuse() with those weights (the sweep is the hybrid's, not a
    dense-sparse pair of its own)."""
    from lr_opensearch.legs import move_weight
    from lr_opensearch.search.fusion import fuse

    weights = {"dense": 0.4, "sparse": 0.2, "bm25": 0.4, "full_dense": 0.0}
    point = move_weight(weights, "bm25", 0.7)
    assert point == pytest.approx({"dense": 0.2, "sparse": 0.1, "bm25": 0.7})
    runs = {"dense": {"q": [("a", 0.5), ("b", 0.1)]}, "sparse": {"q": [("b", 3.0), ("c", 1.0)]},
            "bm25": {"q": [("c", 9.0), ("a", 2.0)]}}
    qrels = {"q": {"c": 1}}
    curves = weight_sweep(runs, weights, "bm25", qrels, depth=10)
    back = {"dense": [(d, score_from_inner_product(s)) for d, s in runs["dense"]["q"]],
            "sparse": runs["sparse"]["q"], "bm25": runs["bm25"]["q"]}
    want = compute_metrics(qrels, {"q": [(h.doc_id, h.score) for h in fuse(back, weights=point)]})
    assert curves["opensearch"]["ndcg@10"][7] == pytest.approx(want["ndcg@10"])
    with pytest.raises(ConfigError, match="lr-sparse"):
        weight_sweep({"dense": runs["dense"]}, weights, "dense", qrels, depth=10)
    assert score_from_inner_product(-0.2) == pytest.approx(1 / 1.2)
