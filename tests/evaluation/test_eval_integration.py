"""``lr eval`` end to end on a real node: ingest through the ingest library, every run,
the JSON contract, TREC files, the sweep plot, and index reuse."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from ingest_support import build_tiny_bundle, tiny_beir

from lr_opensearch.evaluation import (
    compute_metrics,
    default_runs,
    load_beir,
    read_trec,
    run_names,
)

pytestmark = [pytest.mark.node, pytest.mark.matrix]  # matrix: also run on OpenSearch 2.19

def test_lr_eval_end_to_end(
    tmp_path: Path,
    opensearch_url: str,
    os_client: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: Any,
) -> None:
    from lr_opensearch.cli import main

    monkeypatch.setenv("LR_INGEST_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bundle = build_tiny_bundle(tmp_path)
    data = tiny_beir(tmp_path / "tinyset")
    out = tmp_path / "report"
    index = "lr-test-eval-tinyset"
    args = [
        "eval",
        "--dataset",
        str(data),
        "--bundle",
        str(bundle),
        "--index",
        index,
        "--url",
        opensearch_url,
        "--out",
        str(out),
        "--batch-size",
        "3",
        "--json",
    ]
    try:
        assert main(args) == 0
        report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert report["dataset"] == "tinyset" and report["queries"] == 8 and report["docs"] == 24
        assert report["index_status"] == "ingested"
        assert report["instruction"] == {"name": "default", "prompt": "", "chosen_by": "bundle default"}
        assert set(report["runs"]) == set(default_runs()) == set(run_names()) - {
            "lr-hybrid+rerank", "bm25+rerank", "xtr", "xtr+rerank"}
        assert set(default_runs()) == {
            "bm25", "full-dense", "lr-dense", "lr-sparse", "lr-hybrid", "lr-hybrid-linear",
            "lr-hybrid-calibrated",
            "lr-dense+sparse", "lr-dense+bm25", "lr-dense+sparse+bm25", "full-hybrid",
        }
        qrels = load_beir(data).qrels
        for name, metrics in report["runs"].items():
            assert {"ndcg@10", "recall@20", "recall@50", "recall@100", "mrr@10", "qps"} <= set(
                metrics
            )
            assert metrics["qps"] > 0
            run = read_trec(out / "runs" / f"{name}.trec")
            if name == "lr-sparse":
                # a random tiny model's sparse top-k may hold none of a query's tokens:
                # such a query rightly gets no sparse hit (seen for one topic in CI)
                assert set(run) <= set(qrels) and len(run) >= len(qrels) // 2
            else:
                assert set(run) == set(qrels)
            assert compute_metrics(qrels, run) == pytest.approx(
                {k: v for k, v in metrics.items() if k not in ("qps", "seconds")}
            )
        # the queries are the topics' own words: BM25 must find the judged documents
        assert report["runs"]["bm25"]["recall@20"] == pytest.approx(1.0)
        assert report["runs"]["bm25"]["ndcg@10"] > 0.8
        assert (out / "sweep.png").stat().st_size > 1000
        assert len(report["sweep"]["opensearch"]["ndcg@10"]) == 11
        # second run: the index is reused (same bundle, whole corpus), one run only
        assert main(args[:-1] + ["--runs", "bm25", "--no-sweep"]) == 0
        text = capsys.readouterr().out
        assert "tinyset" in text and "bm25" in text and "lr-dense" not in text
        assert json.loads((out / "report.json").read_text())["index_status"] == "reused"
        assert main(["eval", "--compare", str(out)]) == 0
        assert "bm25" in capsys.readouterr().out
        # the rerank run, asked for by name: LR hybrid's top 20 rescored by the full model
        assert main(args[:-1] + ["--runs", "lr-hybrid,lr-hybrid+rerank", "--no-sweep",
                                 "--json"]) == 0
        reranked = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["runs"]
        assert set(reranked) == {"lr-hybrid", "lr-hybrid+rerank"}
        run = read_trec(out / "runs" / "lr-hybrid+rerank.trec")
        assert set(run) == set(qrels)
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.mark.parametrize("held", ["foreign", "collection+foreign"])
def test_lr_eval_never_writes_into_an_index_holding_other_documents(
    held: str,
    tmp_path: Path,
    opensearch_url: str,
    os_client: Any,
    index_name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An index of the same bundle that holds documents not in the collection (another
    corpus ingested into it) is refused, with why and what to do; nothing is written."""
    from ingest_support import ingest_config, write_jsonl

    from lr_opensearch.cli import main
    from lr_opensearch.indexing.run import run

    monkeypatch.setenv("LR_INGEST_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bundle = build_tiny_bundle(tmp_path)
    data = tiny_beir(tmp_path / "tinyset")
    foreign = [{"_id": f"other-{i}", "text": f"a document of another corpus, number {i}"}
               for i in range(10)]
    own = [json.loads(x) for x in gzip.decompress((data / "corpus.jsonl.gz").read_bytes())
           .decode().splitlines()]
    docs = foreign + (own[:5] if held == "collection+foreign" else [])
    corpus = write_jsonl(tmp_path / "other.jsonl", docs)
    run(ingest_config(corpus, bundle, index_name, opensearch_url, tmp_path / "seed-state"))
    args = ["eval", "--dataset", str(data), "--bundle", str(bundle), "--index", index_name,
            "--url", opensearch_url, "--out", str(tmp_path / "report"), "--runs", "bm25",
            "--no-sweep"]
    caplog.clear()
    assert main(args) == 1
    (error,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert index_name in error and "10 document" in error and "--index" in error
    os_client.indices.refresh(index=index_name)
    assert os_client.count(index=index_name)["count"] == len(docs)
    assert not (tmp_path / "report" / "report.json").exists()
