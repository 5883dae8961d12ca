"""The UR²N token index on the real node: ingest -> stored vectors -> XTR retrieval.

Token vectors come from a seeded stand-in (a numpy function of the text): what is tested
is the index, the ingest and the retrieval, not a model. Expected rankings are computed
here by brute force with numpy and the same XTR formula.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ingest.token_index import (
    TokenIngestSummary,
    ensure_token_index,
    read_records,
    write_tokens,
)
from lr_opensearch.errors import BundleMismatchError, CorpusError
from lr_opensearch.instructions import document_text
from lr_opensearch.ur2n.xtr import (
    XTRRetriever,
    doc_of_token,
    token_adapter,
    token_doc_id,
    xtr_scores,
)

pytestmark = pytest.mark.node

DIM = 8
WORDS = "boundary layer flow heat wing shock pressure drag lift vortex".split()


def stand_in(texts: list[str]) -> list[np.ndarray]:
    """[T, DIM] L2-normalised rows per text, T = its word count (max 6), seeded by the text."""
    out = []
    for text in texts:
        rng = np.random.default_rng(zlib.crc32(text.encode()))
        v = rng.standard_normal((min(len(text.split()), 6), DIM)).astype(np.float32)
        out.append(v / np.linalg.norm(v, axis=1, keepdims=True))
    return out


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    lines = [json.dumps({"_id": f"doc{i}", "title": f"t{i}",
                         "text": " ".join(rng.choice(WORDS, size=3 + i % 4))})
             for i in range(24)]
    lines.insert(5, "{not json")  # a bad line: logged and skipped
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _ingest(os_client: Any, index: str, corpus: Path) -> TokenIngestSummary:
    adapter = token_adapter(os_client)
    ensure_token_index(adapter, index, "stand-in", DIM)
    summary = TokenIngestSummary()
    records = read_records(str(corpus), summary, strict=False)
    return write_tokens(adapter, index, records, stand_in, DIM, batch_size=5, summary=summary)


def test_token_index_round_trip(os_client: Any, index_name: str, corpus: Path) -> None:
    summary = _ingest(os_client, index_name, corpus)
    texts = {r.id: r.encoder_text() for r in read_records(str(corpus), TokenIngestSummary(),
                                                          strict=False)}
    vectors = dict(zip(texts, stand_in(list(texts.values())), strict=True))
    n_tokens = sum(len(v) for v in vectors.values())
    assert (summary.records, summary.tokens, summary.rejected) == (24, n_tokens, 1)
    assert os_client.count(index=index_name)["count"] == 24 + n_tokens

    stored = os_client.get(index=index_name, id=token_doc_id("doc3", 2))["_source"]
    assert stored["doc_id"] == "doc3" and stored["pos"] == 2
    np.testing.assert_allclose(stored["lr_token"], vectors["doc3"][2], rtol=0, atol=1e-7)
    record = os_client.get(index=index_name, id="doc3")["_source"]
    assert record["n_tokens"] == len(vectors["doc3"]) and record["title"] == "t3"

    # XTR through the node equals XTR by brute force (k' small, ef_search large: exact).
    ids = [token_doc_id(d, p) for d, v in vectors.items() for p in range(len(v))]
    table = np.concatenate(list(vectors.values()))
    queries = stand_in(["heat flow wing", "shock drag lift vortex"])
    xtr = XTRRetriever(os_client, index_name, k_prime=12, ef_search=512, bundle_id="stand-in",
                       token_dim=DIM)
    got = xtr.search_vectors(queries, k=8)
    for q, hits in zip(queries, got, strict=True):
        retrieved = []
        for row in q:
            ips = table @ row
            top = np.argsort(-ips, kind="stable")[:12]
            retrieved.append([(doc_of_token(ids[i]), float(ips[i])) for i in top])
        want = xtr_scores(retrieved, 8)
        assert [h.doc_id for h in hits] == [d for d, _ in want]
        assert [h.score for h in hits] == pytest.approx([s for _, s in want], abs=1e-5)
        assert all(h.source and h.source["title"] == f"t{h.doc_id[3:]}" for h in hits)

    # Running again overwrites (deterministic ids) instead of doubling.
    _ingest(os_client, index_name, corpus)
    assert os_client.count(index=index_name)["count"] == 24 + n_tokens


def test_token_index_refuses_another_bundle_and_bad_lines(os_client: Any, index_name: str,
                                                          corpus: Path) -> None:
    adapter = token_adapter(os_client)
    assert ensure_token_index(adapter, index_name, "stand-in", DIM) is True
    with pytest.raises(BundleMismatchError, match="another UR²N bundle"):
        ensure_token_index(adapter, index_name, "other-bundle", DIM)
    with pytest.raises(BundleMismatchError, match="another UR²N bundle"):
        XTRRetriever(os_client, index_name, token_dim=DIM + 1)
    with pytest.raises(CorpusError, match=r"corpus.jsonl:6: malformed_json"):
        list(read_records(str(corpus), TokenIngestSummary(), strict=True))


@pytest.mark.slow  # two ingests and four runs: about 10 s on a quiet 2-core machine, more loaded
def test_eval_runs_retrieve_then_rerank_with_one_model(tmp_path: Path, opensearch_url: str,
                                                       os_client: Any, capsys: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`lr eval` xtr / xtr+rerank / bm25+rerank with a tiny random UR²N bundle: the reranked
    run holds XTR's top 20 in the order of the same model's rerank scores."""
    from ingest_support import build_tiny_bundle, tiny_beir
    from test_ur2n_model import tiny_decoder

    from ingest.token_index import main as ingest_main
    from lr_opensearch.cli import main
    from lr_opensearch.evaluation import load_beir, read_trec

    monkeypatch.setenv("LR_INGEST_STATE_DIR", str(tmp_path / "state"))
    model = tiny_decoder()
    ur2n = model.save(tmp_path / "ur2n")
    data = tiny_beir(tmp_path / "tinyset")
    tokens, lr_index = f"lr-test-tokens-{tmp_path.name[-12:]}", f"lr-test-lr-{tmp_path.name[-12:]}"
    try:
        assert ingest_main([str(data / "corpus.jsonl.gz"), "--ur2n-bundle", str(ur2n),
                            "--index", tokens, "--url", opensearch_url]) == 0
        runs = "bm25,bm25+rerank,xtr,xtr+rerank"
        assert main(["eval", "--dataset", str(data), "--bundle", str(build_tiny_bundle(tmp_path)),
                     "--index", lr_index, "--url", opensearch_url, "--runs", runs,
                     "--reranker", "ur2n", "--ur2n-bundle", str(ur2n), "--token-index", tokens,
                     "--out", str(tmp_path / "out"), "--no-sweep", "--json"]) == 0
    finally:
        for index in (tokens, lr_index):
            os_client.indices.delete(index=index, ignore_unavailable=True)
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert set(report["runs"]) == set(runs.split(","))
    assert report["rerank"]["reranker"] == "ur2n" and report["rerank"]["depth"] == 20
    assert set(report["runs"]["xtr+rerank"]["ms_per_query"]) == {"first_stage", "encode", "rerank"}
    assert set(report["runs"]["bm25+rerank"]["ms_per_query"]) == {"first_stage", "rerank"}
    assert "ms_per_query" not in report["runs"]["bm25"]

    first = read_trec(tmp_path / "out" / "runs" / "xtr.trec")
    reranked = read_trec(tmp_path / "out" / "runs" / "xtr+rerank.trec")
    queries = load_beir(data).queries
    texts = {d["_id"]: document_text(d["title"], d["text"]) for d in _corpus(data)}
    for qid, hits in first.items():
        top = [doc for doc, _ in hits[:20]]
        scores = model.rerank_scores(queries[qid], [texts[d] for d in top])
        want = [d for _, d in sorted(zip(scores, top, strict=True), key=lambda p: -p[0])]
        assert [doc for doc, _ in reranked[qid][:20]] == want
        assert [doc for doc, _ in reranked[qid][20:]] == [doc for doc, _ in hits[20:]]


def _corpus(data: Path) -> list[dict[str, Any]]:
    import gzip

    with gzip.open(data / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]
