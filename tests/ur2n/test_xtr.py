"""XTR scoring with missing-similarity imputation, and the XTR retriever without a node.

The scoring case is computed by hand; the retriever runs against an in-memory stand-in for
the engine (exact inner-product top-k' over a few token vectors, the engine's score
transform), so what is checked is the request-to-ranking path and the rerank stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from lr_opensearch.errors import BundleMismatchError, ConfigError
from lr_opensearch.legs.scores import score_from_inner_product
from lr_opensearch.search.rerank import RerankStage
from lr_opensearch.ur2n.xtr import (
    TOKEN_FIELD,
    XTRRetriever,
    check_token_index,
    doc_of_token,
    imputed_similarity,
    token_doc_id,
    xtr_scores,
)

# Two query tokens, k' = 3. q1 retrieved A (0.9), B (0.7), A (0.3): m1 = 0.3.
# q2 retrieved C (0.8), B (0.5), C (0.4): m2 = 0.4.
RETRIEVED = [[("A", 0.9), ("B", 0.7), ("A", 0.3)], [("C", 0.8), ("B", 0.5), ("C", 0.4)]]


def test_xtr_scores_hand_computed_with_imputation() -> None:
    # A: q1 max 0.9, q2 missed -> m2 0.4: (0.9 + 0.4) / 2 = 0.65
    # B: q1 0.7, q2 0.5: 0.60;  C: q1 missed -> m1 0.3, q2 max 0.8: 0.55
    got = xtr_scores(RETRIEVED)
    assert [d for d, _ in got] == ["A", "B", "C"]
    assert [s for _, s in got] == pytest.approx([0.65, 0.60, 0.55])
    # Missing counted as 0 (no imputation) would put B first (A 0.45, B 0.60, C 0.40):
    # imputation is what changes the order here.
    assert xtr_scores(RETRIEVED, k=2) == got[:2]


def test_imputed_value_is_the_smallest_retrieved_similarity() -> None:
    assert imputed_similarity(RETRIEVED[0]) == pytest.approx(0.3)
    assert imputed_similarity([]) == 0.0


def test_xtr_scores_edge_cases() -> None:
    assert xtr_scores([]) == []
    assert xtr_scores([[], []]) == []
    # A token that retrieved nothing adds 0 to every document; ties break by doc id.
    got = xtr_scores([[("b", 0.5), ("a", 0.5)], []])
    assert got == [("a", pytest.approx(0.25)), ("b", pytest.approx(0.25))]


def test_token_ids_round_trip() -> None:
    assert doc_of_token(token_doc_id("doc#7", 12)) == "doc#7"
    with pytest.raises(ConfigError, match="not a token _id"):
        doc_of_token("plain-id")


def test_check_token_index_refuses_other_indices() -> None:
    meta = {"format": "ur2n-token-index", "bundle_id": "b1", "token_dim": 4}
    assert check_token_index(meta, "i", "b1", 4) == meta
    with pytest.raises(BundleMismatchError, match="another UR²N bundle"):
        check_token_index(meta, "i", "b2")
    with pytest.raises(BundleMismatchError, match="not a UR²N token index"):
        check_token_index({"format": "lightretriever-index"}, "i")


class _FakeIndices:
    def __init__(self, meta: dict[str, Any]) -> None:
        self.meta = meta

    def get_mapping(self, index: str) -> dict[str, Any]:
        return {index: {"mappings": {"_meta": {"lightretriever": self.meta}}}}


class FakeTokenEngine:
    """Exact knn over token vectors with the engine's inner-product score transform."""

    def __init__(self, docs: dict[str, np.ndarray], texts: dict[str, str]) -> None:
        self.ids = [token_doc_id(d, p) for d, v in docs.items() for p in range(len(v))]
        self.vectors = np.concatenate(list(docs.values()))
        self.texts = texts
        self.indices = _FakeIndices({"format": "ur2n-token-index", "bundle_id": "fake",
                                     "token_dim": self.vectors.shape[1]})
        self.msearch_calls = 0

    def msearch(self, body: Sequence[dict[str, Any]]) -> dict[str, Any]:
        self.msearch_calls += 1
        responses = []
        for search in body[1::2]:
            knn = search["query"]["knn"][TOKEN_FIELD]
            ips = self.vectors @ np.asarray(knn["vector"], dtype=np.float32)
            top = np.argsort(-ips, kind="stable")[: knn["k"]]
            hits = [{"_id": self.ids[i], "_score": score_from_inner_product(float(ips[i]))}
                    for i in top]
            responses.append({"took": 1, "hits": {"hits": hits}})
        return {"responses": responses}

    def mget(self, index: str, body: dict[str, Any]) -> dict[str, Any]:
        return {"docs": [{"_id": d["_id"], "found": True,
                          "_source": {"title": "", "text": self.texts[d["_id"]]}}
                         for d in body["docs"]]}


def _engine() -> FakeTokenEngine:
    rng = np.random.default_rng(0)
    docs = {f"d{i}": rng.standard_normal((3 + i % 3, 4)).astype(np.float32) for i in range(6)}
    return FakeTokenEngine(docs, {d: f"text of {d}" for d in docs})


def test_retriever_scores_like_the_formula_in_one_msearch() -> None:
    engine = _engine()
    queries = [np.random.default_rng(s).standard_normal((3, 4)).astype(np.float32)
               for s in (1, 2)]
    xtr = XTRRetriever(engine, "tokens", k_prime=4)
    hits = xtr.search_vectors(queries, k=5)
    assert engine.msearch_calls == 1  # every query token of the batch in one _msearch
    for q, got in zip(queries, hits, strict=True):
        retrieved = []
        for row in q:
            ips = engine.vectors @ row
            top = np.argsort(-ips, kind="stable")[:4]
            retrieved.append([(doc_of_token(engine.ids[i]), float(ips[i])) for i in top])
        want = xtr_scores(retrieved, 5)
        assert [h.doc_id for h in got] == [d for d, _ in want]
        assert [h.score for h in got] == pytest.approx([s for _, s in want], abs=1e-5)
        assert [h.rank for h in got] == list(range(1, len(got) + 1))
        assert all(h.source and h.source["text"] == f"text of {h.doc_id}" for h in got)


class ReverseIdReranker:
    """Scores a text by its document number: the last id wins."""

    name = "reverse-id"

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return [float(t.rsplit("d", 1)[1]) for t in texts]


def test_rerank_reorders_the_top_hits_only() -> None:
    engine = _engine()
    query = np.random.default_rng(3).standard_normal((2, 4)).astype(np.float32)
    first = XTRRetriever(engine, "tokens", k_prime=6).search_vectors([query], k=6)[0]
    xtr = XTRRetriever(engine, "tokens", k_prime=6, encode=lambda texts: [query] * len(texts),
                       rerank=RerankStage(ReverseIdReranker(), depth=3))
    got = xtr.search_batch(["q"], k=5)[0]
    top3 = sorted((h.doc_id for h in first[:3]), key=lambda d: -int(d[1:]))
    assert [h.doc_id for h in got[:3]] == top3  # reranked by the reranker's score
    assert [h.doc_id for h in got[3:]] == [h.doc_id for h in first[3:5]]  # kept order
    assert got[0].first_stage_score == pytest.approx(
        next(h.score for h in first if h.doc_id == got[0].doc_id))


def test_retriever_checks_shapes_and_needs_an_encoder() -> None:
    xtr = XTRRetriever(_engine(), "tokens")
    with pytest.raises(ConfigError, match=r"\[Tq, 4\]"):
        xtr.search_vectors([np.zeros((2, 3), dtype=np.float32)], k=3)
    with pytest.raises(ConfigError, match="needs encode="):
        xtr.search_batch(["q"])
    with pytest.raises(BundleMismatchError):
        XTRRetriever(_engine(), "tokens", bundle_id="another")


def test_stage_clock_splits_the_wall_time_per_query() -> None:
    from lr_opensearch.evaluation.model_runs import StageClock, TimedReranker

    clock = StageClock()
    reranker = TimedReranker(ReverseIdReranker(), clock)
    assert reranker.name == "reverse-id"
    assert reranker.score("q", ["d2", "d5"]) == [2.0, 5.0]
    clock.seconds["rerank"] = 1.0  # pin the measured time for an exact split
    clock.seconds["encode"] = 0.5
    assert clock.per_query_ms(4.0, 10) == pytest.approx(
        {"first_stage": 250.0, "encode": 50.0, "rerank": 100.0})


def test_first_queries_keeps_their_judgments_only(tmp_path: Any) -> None:
    from lr_opensearch.evaluation.beir import Dataset
    from lr_opensearch.evaluation.runs import first_queries

    ds = Dataset("d", tmp_path, tmp_path / "c.jsonl", {"q1": "a", "q2": "b", "q3": "c"},
                 {"q1": {"x": 1}, "q2": {"y": 1}, "q3": {"z": 1}}, 3)
    two = first_queries(ds, 2)
    assert list(two.queries) == ["q1", "q2"] and set(two.qrels) == {"q1", "q2"}
    assert first_queries(ds, None) is ds and first_queries(ds, 9) is ds
    with pytest.raises(ConfigError, match="max_queries"):
        first_queries(ds, 0)


def test_indexable_docs_leaves_out_what_ingest_skips(tmp_path: Any) -> None:
    from lr_opensearch.evaluation.beir import Dataset, indexable_docs

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "title": "", "text": ""}\n'
                      '{"_id": "a", "text": "again"}\n{"_id": "c", "title": "t"}\n')
    ds = Dataset("d", tmp_path, corpus, {}, {}, 4)
    assert indexable_docs(ds) == 2  # b is empty, the second a a duplicate
