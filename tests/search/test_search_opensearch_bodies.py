"""Unit tests of the OpenSearch request bodies, response parsing, explain and hit assembly."""

from __future__ import annotations

import numpy as np
import pytest

from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.engine.clauses import filter_clauses
from lr_opensearch.engine.opensearch import OpenSearchAdapter, pipeline_name
from lr_opensearch.engine.results import EngineHit, EngineResult, parse_response
from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.legs import fusion_config
from lr_opensearch.legs.scores import inner_product_from_score, score_from_inner_product
from lr_opensearch.search.explain import token_contributions
from lr_opensearch.search.fusion import fuse
from lr_opensearch.search.hits import (
    assemble_client,
    assemble_server,
    assemble_single,
)
from lr_opensearch.search.request import SearchOptions, SearchRequest

ADAPTER = OpenSearchAdapter(client=None)
FLT = {"term": {"metadata.lang": "en"}}


def test_dense_query_knn_with_efficient_filter_and_ef_search():
    q = ADAPTER.dense_query(
        np.array([0.5, -1.25], dtype=np.float32), knn_depth=50, filter=FLT, ef_search=200
    )
    assert q == {
        "knn": {
            "lr_dense": {
                "vector": [0.5, -1.25],
                "k": 50,
                "filter": FLT,
                "method_parameters": {"ef_search": 200},
            }
        }
    }
    two = ADAPTER.dense_query(np.zeros(2), knn_depth=5, filter=[FLT, {"exists": {"field": "title"}}])
    assert two["knn"]["lr_dense"]["filter"] == {
        "bool": {"filter": [FLT, {"exists": {"field": "title"}}]}
    }
    assert "method_parameters" not in two["knn"]["lr_dense"]
    with pytest.raises(ConfigError, match="1-d and finite"):
        ADAPTER.dense_query(np.array([np.nan, 1.0]), knn_depth=5)


def test_sparse_query_is_linear_rank_features_with_count_boosts():
    key_a, key_dot = encode_key("paris"), encode_key(".")
    q = ADAPTER.sparse_query({key_dot: 1.0, key_a: 2.0}, filter=FLT)
    assert q == {
        "bool": {
            "should": [
                {"rank_feature": {"field": f"lr_sparse.{k}", "boost": b, "linear": {}}}
                for k, b in sorted([(key_a, 2.0), (key_dot, 1.0)])
            ],
            "minimum_should_match": 1,
            "filter": [FLT],
        }
    }
    assert ADAPTER.sparse_query({}) == {"match_none": {}}


def test_hybrid_text_and_body():
    d, s = ADAPTER.dense_query(np.ones(2), knn_depth=3), ADAPTER.sparse_query({"a": 1.0})
    assert ADAPTER.hybrid_query(d, s) == {"hybrid": {"queries": [d, s]}}
    body = ADAPTER.body(d, size=7, source=["title"], timeout="250ms")
    assert body == {
        "size": 7,
        "query": d,
        "track_total_hits": False,
        "_source": ["title"],
        "timeout": "250ms",
    }
    bm25 = ADAPTER.text_query("wing flutter", filter=FLT)
    assert bm25 == {
        "bool": {
            "must": [{"multi_match": {"query": "wing flutter", "fields": ["title", "text"]}}],
            "filter": [FLT],
        }
    }


def test_filter_clauses_and_pipeline_names():
    assert (
        filter_clauses(None) == []
        and filter_clauses(FLT) == [FLT]
        and filter_clauses([FLT]) == [FLT]
    )
    with pytest.raises(ConfigError, match="filter must be"):
        filter_clauses("lang:en")  # type: ignore[arg-type]
    assert pipeline_name(fusion_config((0.7, 0.3))) == "lr-hybrid-min_max-arithmetic_mean-7000-3000"
    assert pipeline_name(fusion_config()) == "lr-hybrid-min_max-arithmetic_mean-4000-2000-4000"
    assert (
        pipeline_name(fusion_config((0.5, 0.5), combination="rrf", rank_constant=10))
        == "lr-hybrid-rrf-10-5000-5000"
    )
    assert pipeline_name(fusion_config(normalization="l2")) != pipeline_name(fusion_config())


def test_hybrid_pipeline_travels_inline_in_the_body():
    pipe = ADAPTER.hybrid_pipeline(fusion_config((0.6, 0.4)))
    proc = pipe["phase_results_processors"][0]["normalization-processor"]
    assert proc["normalization"]["technique"] == "min_max"
    assert proc["combination"] == {
        "technique": "arithmetic_mean",
        "parameters": {"weights": [0.6, 0.4]},
    }
    assert "description" not in pipe
    assert ADAPTER.hybrid_pipeline(fusion_config((0.6, 0.4))) is pipe  # rendered once
    body = ADAPTER.body({"match_all": {}}, size=3, pipeline=pipe)
    assert body["search_pipeline"] == pipe


def test_parse_response_errors_name_the_cause():
    ok = parse_response(
        {"took": 3, "hits": {"hits": [{"_id": "1", "_score": 2.5, "_source": {"title": "t"}}]}}, "x"
    )
    assert ok == EngineResult([EngineHit("1", 2.5, {"title": "t"})], 3, False)
    err = {
        "error": {
            "root_cause": [{"type": "query_shard_exception", "reason": "no such field lr_dense"}]
        },
        "status": 400,
    }
    with pytest.raises(EngineError, match="query_shard_exception: no such field lr_dense"):
        parse_response(err, "dense search #0")
    shard = {
        "_shards": {"failed": 1, "failures": [{"reason": {"type": "t", "reason": "boom"}}]},
        "hits": {"hits": []},
    }
    with pytest.raises(EngineError, match="1 shard"):
        parse_response(shard, "q")
    assert parse_response({"timed_out": True, "hits": {"hits": []}}, "q").timed_out


@pytest.mark.parametrize("ip", [0.0, 0.3, 12.75, -0.5, -40.0])
def test_inner_product_recovery(ip):
    assert inner_product_from_score(score_from_inner_product(ip)) == pytest.approx(ip, abs=1e-12)
    s32 = float(np.float32(score_from_inner_product(ip)))  # what Lucene returns
    assert inner_product_from_score(s32) == pytest.approx(ip, abs=1e-6 * max(1.0, abs(ip)) ** 2)


def test_token_contributions_decode_keys_and_sort():
    q = {encode_key("wing"): 2.0, encode_key("."): 1.0, encode_key("absent"): 1.0}
    doc = {encode_key("wing"): 0.5, encode_key("."): 1.5, encode_key("other"): 9.0}
    out = token_contributions(q, doc)
    assert [(c.token, c.contribution) for c in out] == [(".", 1.5), ("wing", 1.0)]
    assert out[1].key == encode_key("wing") and out[1].query_count == 2.0
    assert token_contributions(q, None) == []


def _req(**kw):
    """A resolved request: the SearchOptions fields (k, from_, mode, explain) and the
    resolved ones (path, config, source, strip_sparse, timeout)."""
    resolved = dict(path="client", config=fusion_config((0.7, 0.3)), source=None, strip_sparse=False,
                    timeout=None)
    resolved.update({key: kw.pop(key) for key in list(kw) if key in resolved})
    options = SearchOptions(**{"k": 2, **kw})
    return SearchRequest(options, **resolved)


DENSE = EngineResult(
    [EngineHit("a", 4.0, {"title": "A"}), EngineHit("b", 3.0, None), EngineHit("c", 0.5, None)],
    1,
    False,
)
SPARSE = EngineResult(
    [EngineHit("b", 10.0, {"title": "B", "lr_sparse": {"x": 2.0}}), EngineHit("d", 6.0, None)],
    1,
    False,
)


def test_assemble_client_matches_fuse_and_paginates():
    expected = fuse(
        [(h.doc_id, h.score) for h in DENSE.hits], [(h.doc_id, h.score) for h in SPARSE.hits],
        weights=(0.7, 0.3))
    page1 = assemble_client([DENSE, SPARSE], None, _req(k=2))
    page2 = assemble_client([DENSE, SPARSE], None, _req(k=2, from_=2))
    got = page1 + page2
    assert [h.doc_id for h in got] == [h.doc_id for h in expected]
    assert [h.rank for h in got] == [1, 2, 3, 4]
    assert [h.score for h in got] == [h.score for h in expected]
    a = got[[h.doc_id for h in got].index("a")]
    assert a.scores.get("dense") == pytest.approx(3.0) and a.scores.get("sparse") is None and a.title == "A"
    c = next(h for h in got if h.doc_id == "c")
    assert c.scores.get("dense") == pytest.approx(1.0 - 1.0 / 0.5)  # negative inner product recovered


def test_assemble_linear_normalises_inner_products():
    hits = assemble_client(
        [DENSE, SPARSE], None, _req(k=4, config=fusion_config((0.7, 0.3), semantics="linear"))
    )
    ips = {"a": 3.0, "b": 2.0, "c": -1.0}
    b = next(h for h in hits if h.doc_id == "b")
    assert b.score == pytest.approx(0.7 * (2.0 + 1.0) / (4.0 + 1e-8) + 0.3 * 1.0)
    assert b.scores.get("dense") == pytest.approx(ips["b"])


def test_assemble_single_and_explain():
    q = {"x": 3.0, "y": 1.0}
    req = _req(mode="sparse", path="single", k=5, explain=True, strip_sparse=True)
    hits = assemble_single(SPARSE, q, req)
    b = hits[0]
    assert b.score == 10.0 and b.scores.get("sparse") == 10.0 and b.scores.get("dense") is None
    assert "lr_sparse" not in b.source and b.source["title"] == "B"
    e = b.explanation
    assert e.leg("sparse").rank == 1 and e.leg("dense").rank is None and e.fused is None
    assert [(t.token, t.contribution) for t in e.top_tokens] == [("x", 6.0)]
    assert e.sparse_from_tokens == 6.0
    dense = assemble_single(DENSE, q, _req(mode="dense", path="single", k=1, from_=1))
    assert [(h.doc_id, h.rank, h.score) for h in dense] == [("b", 2, pytest.approx(2.0))]


def test_assemble_server_uses_server_scores_and_explains_from_parts():
    fused = EngineResult([EngineHit("b", 0.65, None), EngineHit("a", 0.6, None)], 1, False)
    hits = assemble_server(fused, [DENSE, SPARSE], None, _req(explain=True))
    assert [(h.doc_id, h.score) for h in hits] == [("b", 0.65), ("a", 0.6)]
    e = hits[0].explanation
    assert e.fused == 0.65 and e.leg("dense").rank == 2 and e.leg("sparse").rank == 1
    assert e.leg("dense").score == pytest.approx(2.0) and e.leg("sparse").norm == pytest.approx(1.0)
    plain = assemble_server(fused, [], None, _req())
    assert plain[0].explanation is None and plain[0].scores.get("dense") is None


def test_search_modules_leave_torch_out() -> None:
    import json
    import subprocess
    import sys

    mods = [
        "lr_opensearch.search",
        "lr_opensearch.engine.opensearch",
        "lr_opensearch.search.hits",
        "lr_opensearch.search.explain",
        "lr_opensearch.cli.search",
        "lr_opensearch.search.fusion",
        "lr_opensearch.engine.elasticsearch",
        "lr_opensearch.evaluation",
        "lr_opensearch.evaluation.runs",
        "lr_opensearch.cli.eval",
    ]
    code = (
        f"import importlib, json, sys\nfor m in {mods!r}: importlib.import_module(m)\n"
        "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_bm25_clause_keeps_at_most_its_term_limit():
    """The BM25 text is cut by analysed terms, not by whitespace words: a hyphenated word is
    several terms, an unspaced CJK run one term per ideograph, an emoji one term."""
    from lr_opensearch.engine.clauses import TEXT_QUERY_MAX_TERMS, text_query_cut

    limit = TEXT_QUERY_MAX_TERMS
    exact = " ".join(f"w{i}" for i in range(limit))
    assert text_query_cut(exact) == len(exact)  # at the limit: whole
    assert text_query_cut(exact + " more") == len(exact) + 1
    hyphenated = "-".join(f"w{i}" for i in range(limit + 50))
    assert text_query_cut(hyphenated) == len("-".join(f"w{i}" for i in range(limit))) + 1
    assert text_query_cut("北" * (limit + 1)) == limit
    assert text_query_cut("\U0001F600" * (limit + 1)) == limit
    adapter = OpenSearchAdapter(None)
    text = adapter.text_query("北" * 1000)["multi_match"]["query"]
    assert text == "北" * limit


@pytest.mark.parametrize("version,ef_search,weighted_rrf", [
    ("2.19.1", 100, False), ("3.4.0", 100, True), ("3.5.0", None, True), ("3.6.0", None, True)])
def test_what_differs_by_opensearch_version(version: str, ef_search: int | None,
                                            weighted_rrf: bool) -> None:
    """Capabilities decide what differs by version: before 3.5 a knn clause that names no
    ef_search carries k-NN's default (lucene searched only k candidates); before 3.1 weighted
    RRF cannot be fused by the server (its score-ranker-processor takes no weights)."""
    from lr_opensearch.engine.client import Capabilities
    from lr_opensearch.options import KNN_DEFAULT_EF_SEARCH

    caps = Capabilities(version=version, distribution="opensearch", knn=True,
                        neural_search=True, plugins=(), nodes=1)
    assert caps.knn_ef_search == ef_search and caps.weighted_rrf is weighted_rrf
    adapter = OpenSearchAdapter(object())  # a client that is never called
    adapter._capabilities = caps
    knn = adapter.dense_query(np.zeros(2), knn_depth=10)["knn"]["lr_dense"]
    assert knn.get("method_parameters") == (
        {"ef_search": KNN_DEFAULT_EF_SEARCH} if ef_search else None)
    named = adapter.dense_query(np.zeros(2), knn_depth=10, ef_search=300)["knn"]["lr_dense"]
    assert named["method_parameters"] == {"ef_search": 300}  # the caller's wins
    why = adapter.server_fusion_blocker(fusion_config((0.6, 0.4), combination="rrf"))
    assert (why is None) is weighted_rrf
    assert adapter.server_fusion_blocker(fusion_config((0.6, 0.4))) is None
