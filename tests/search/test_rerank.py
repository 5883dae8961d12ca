"""The rerank stage: ordering on a tiny case, the budget, the full-model reranker's scores,
and reranking through the Retriever against the real node."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lr_opensearch.errors import ConfigError
from lr_opensearch.search.hits import Hit
from lr_opensearch.search.rerank import RerankStage


class LengthReranker:
    """Scores a text by its length (a real, deterministic scorer for the stage's tests)."""

    name = "length"

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls = 0

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        self.calls += 1
        time.sleep(self.delay_s)
        return [float(len(t)) for t in texts]


def _hits(texts: list[str]) -> list[Hit]:
    return [Hit(doc_id=f"d{i}", rank=i + 1, score=10.0 - i, source={"title": "", "text": t})
            for i, t in enumerate(texts)]


def test_the_top_depth_is_reordered_and_the_rest_kept() -> None:
    hits = _hits(["aa", "aaaa", "a", "aaa", "aaaaaa", "aaaaa"])
    out = RerankStage(LengthReranker(), depth=4, batch_size=3).apply("q", hits)
    assert [h.doc_id for h in out] == ["d1", "d3", "d0", "d2", "d4", "d5"]
    assert [h.rank for h in out] == [1, 2, 3, 4, 5, 6]
    assert out[0].score == 4.0 and out[0].first_stage_score == 9.0
    assert out[4].score == 6.0 and out[4].first_stage_score is None  # below depth: untouched


def test_the_budget_leaves_unscored_hits_in_first_stage_order() -> None:
    hits = _hits(["a", "aaa", "aa", "aaaaa", "aaaa", "aaaaaa"])
    slow = LengthReranker(delay_s=0.05)
    out = RerankStage(slow, depth=6, batch_size=2, budget_s=0.01).apply("q", hits)
    assert slow.calls == 1  # the budget was spent after the first batch
    assert [h.doc_id for h in out] == ["d1", "d0", "d2", "d3", "d4", "d5"]
    with pytest.raises(ConfigError, match="budget_s"):
        RerankStage(slow, budget_s=0)
    with pytest.raises(ConfigError, match="title and text"):
        RerankStage(slow).apply("q", [Hit("x", 1, 1.0)])


def test_the_full_model_reranker_scores_as_the_full_dense_run(tmp_path: Path) -> None:
    from ingest_support import build_tiny_bundle

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.model import DocEncoder
    from lr_opensearch.model.full_model import FullModelReranker, full_query_encoder

    bundle = load_bundle(build_tiny_bundle(tmp_path / "b"))
    reranker = FullModelReranker(bundle)
    texts = ["heat transfer in boundary layers", "the eiffel tower", "patients in hospitals"]
    got = reranker.score("boundary layer", texts)
    q = full_query_encoder(bundle)(["boundary layer"])[0]
    d = DocEncoder.from_bundle(bundle).encode_dense(texts)
    np.testing.assert_allclose(got, d @ q, rtol=1e-5, atol=1e-6)


@pytest.mark.node
def test_reranking_through_the_retriever(os_client: Any, opensearch_url: str,
                                         tmp_path: Path) -> None:
    from ingest_support import ingest_adi

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.model.full_model import FullModelReranker
    from lr_opensearch.search import Retriever

    index = f"lr-test-rerank-{uuid.uuid4().hex[:8]}"
    path = ingest_adi(tmp_path, opensearch_url, index, limit=40)
    try:
        bundle = load_bundle(path)
        reranker = FullModelReranker(bundle)
        plain = Retriever(bundle, os_client, index)
        reranked = Retriever(bundle, os_client, index, rerank=reranker, rerank_depth=15)
        text = "computer information retrieval systems"
        first = plain.search(text, k=15)
        hits = reranked.search(text, k=5)
        scores = reranker.score(text, [
            f"{h.source.get('title', '')} {h.source.get('text', '')}".strip() for h in first])
        order = sorted(range(len(first)), key=lambda i: -scores[i])[:5]
        assert [h.doc_id for h in hits] == [first[i].doc_id for i in order]
        assert [h.rank for h in hits] == [1, 2, 3, 4, 5]
        assert all(h.first_stage_score is not None for h in hits)
        page2 = reranked.search(text, k=5, from_=5)  # paging over the reranked list
        assert [h.doc_id for h in page2] == [first[i].doc_id for i in
                                             sorted(range(15), key=lambda i: -scores[i])[5:10]]
        with pytest.raises(ConfigError, match="title and text"):
            reranked.search(text, k=5, source=False)
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)
