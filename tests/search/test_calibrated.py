"""The ``calibrated`` fusion: per-leg scales measured on the index, the hybrid as one
``bool`` query. Unit tests of the clause shaping, then the real OpenSearch node: the
calibration record, the one query's scores against independently computed sums, explain,
the request ``--dsl`` prints, the filter, and the refusal without a calibration."""

from __future__ import annotations

import statistics
import uuid
from typing import Any

import numpy as np
import pytest
from corpus_support import random_docs, tiny_vocab
from tiny_artifacts import SENTENCES, tiny_bundle, wordpiece_tokenizer

from lr_opensearch import legs
from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.engine.templates import META_KEY
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import LegContext
from lr_opensearch.legs.builtin import heaviest
from lr_opensearch.legs.scores import score_from_inner_product
from lr_opensearch.options import CALIBRATED, CALIBRATED_SPARSE_TOKENS, FUSION_PATHS
from lr_opensearch.search import Retriever
from lr_opensearch.search.calibration import (
    CALIBRATION_KEY,
    Shape,
    calibrate,
    leg_key,
    pseudo_queries,
    read_calibration,
    sample_documents,
)
from lr_opensearch.search.explain import LUCENE_FEATURE_REL_TOL

pytestmark = pytest.mark.node

N_DOCS = 40
QUERIES = ["paris tower", "boundary layer heat transfer flow", "doctors treat patients"]


# ---- no node ---------------------------------------------------------------------------
def test_calibrated_is_a_fusion_path() -> None:
    assert CALIBRATED in FUSION_PATHS


def test_heaviest_keeps_the_largest_weights() -> None:
    w = {"a": 1.0, "b": 3.0, "c": 2.0, "d": 2.0}
    assert heaviest(w, 2) == {"b": 3.0, "c": 2.0}  # ties by key
    assert heaviest(w, None) is w and heaviest(w, 9) is w


def test_leg_keys_name_the_shape() -> None:
    assert leg_key("dense", Shape(5, ("text",))) == "dense"
    assert leg_key("sparse", Shape(5, ("text",))) == "sparse@5"
    assert leg_key("bm25", Shape(5, ("text",))) == "bm25@text"
    assert leg_key("bm25", Shape(None, ("text", "title"))) == "bm25"  # the leg's own fields
    with pytest.raises(ConfigError, match="text_fields"):
        Shape(None, ("body",))
    with pytest.raises(ConfigError, match="sparse_tokens"):
        Shape(0)


def test_one_query_flattens_the_legs_and_applies_the_filter_once() -> None:
    adapter = OpenSearchAdapter(None)
    flt = {"term": {"metadata.group": "a"}}
    ctx = legs.LegContext(knn_depth=30, filter=flt, sparse_tokens=2, text_fields=("text",))
    sub = [legs.get("dense").sub_query(adapter, np.ones(4, np.float32), ctx),
           legs.get("sparse").sub_query(adapter, {"k1": 1.0, "k2": 3.0, "k3": 2.0}, ctx),
           legs.get("bm25").sub_query(adapter, "heat flow", ctx)]
    body = adapter.calibrated_body(sub, [0.5, 2.0, 0.25], size=10, filter=flt)
    q = body["query"]["bool"]
    assert body["size"] == 10 and "search_pipeline" not in body
    assert q["filter"] == [flt] and q["minimum_should_match"] == 1
    knn, *features, match = q["should"]
    assert knn["knn"]["lr_dense"]["boost"] == 0.5 and knn["knn"]["lr_dense"]["k"] == 30
    assert knn["knn"]["lr_dense"]["filter"] == flt  # the knn pre-filter stays (k after it)
    assert [f["rank_feature"]["field"] for f in features] == ["lr_sparse.k2", "lr_sparse.k3"]
    assert [f["rank_feature"]["boost"] for f in features] == [6.0, 4.0]  # count x leg boost
    assert match == {"match": {"text": {"query": "heat flow", "boost": 0.25}}}


# ---- the node --------------------------------------------------------------------------
# the OpenSearch half runs again on every packaged OpenSearch version (the matrix)
@pytest.fixture(scope="module", params=[pytest.param("opensearch", marks=pytest.mark.matrix),
                                        "elasticsearch"])
def engine_client(request: pytest.FixtureRequest) -> Any:
    """The OpenSearch node, then the Elasticsearch 9.1 node (basic licence)."""
    return request.getfixturevalue("os_client" if request.param == "opensearch" else "es_client")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, engine_client: Any) -> Any:
    """(bundle, index, vectors [N, 16], sparse maps) on the node; deleted after."""
    os_client = engine_client
    adapter = make_adapter(os_client)
    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(tmp_path_factory.mktemp("b") / "bundle", tok, seed=3))
    vocab = tiny_vocab(tok)
    docs = random_docs(11, N_DOCS, vocab, vectors_first=True)
    vectors = np.stack([d.dense for d in docs])
    sparse, ops = [], []
    index = f"lr-test-calibrated-{uuid.uuid4().hex[:8]}"
    adapter.create_index(index, bundle)
    for i, doc in enumerate(docs):
        tokens, sp = doc.tokens, doc.sparse
        sparse.append(sp)
        sentence = SENTENCES[i % len(SENTENCES)]
        ops += [{"index": {"_index": index, "_id": f"d{i:02d}"}},
                {"lr_dense": vectors[i].tolist(), "lr_sparse": sp,
                 "title": f"doc {i} {tokens[0]} {tokens[1]}",
                 "text": f"{sentence}. {' '.join(tokens)}",
                 "metadata": {"group": "a" if i % 3 else "b"}}]
    if adapter.engine == "opensearch":
        assert not os_client.bulk(body=ops, refresh=True)["errors"]
    else:
        assert not os_client.bulk(operations=ops, refresh=True)["errors"]
    yield bundle, index, vectors, sparse
    os_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.fixture(scope="module")
def calibrated(corpus: Any, engine_client: Any) -> Any:
    bundle, index, *_ = corpus
    return calibrate(make_adapter(engine_client), index, bundle, sample_docs=N_DOCS)


def test_calibration_is_recorded_with_how_it_was_measured(
        corpus: Any, calibrated: Any, engine_client: Any) -> None:
    bundle, index, *_ = corpus
    adapter = make_adapter(engine_client)
    meta = adapter.index_mapping(index)["_meta"]
    assert meta[META_KEY]["bundle_id"] == bundle.bundle_id  # the other _meta stays
    record = read_calibration(adapter, index)
    assert record.to_meta() == meta[CALIBRATION_KEY]
    assert {"dense", "sparse", "bm25", f"sparse@{CALIBRATED_SPARSE_TOKENS}",
            "bm25@text"} <= set(record.scales)
    m = record.method
    assert m["sampled_documents"] == N_DOCS and m["documents"] == N_DOCS
    assert m["pseudo_queries"] > N_DOCS and m["bundle_id"] == bundle.bundle_id
    for leg in record.scales.values():
        assert leg.queries > 0 and leg.top1_mean >= leg.top10_mean > 0.0


def test_scales_are_the_legs_own_top_scores(corpus: Any, calibrated: Any, engine_client: Any) -> None:
    """The BM25 and dense scales equal the mean top-1 score of each leg searched alone
    (through the retriever's one-leg mode) for the same pseudo-queries."""
    bundle, index, *_ = corpus
    adapter = make_adapter(engine_client)
    texts = pseudo_queries(sample_documents(adapter, index, N_DOCS, 0), 0)
    r = Retriever(bundle, engine_client, index)
    for leg, over in (("bm25", {"text_fields": ("text",)}), ("dense", {})):
        tops = [hits[0].scores[leg] if leg == "bm25" else
                score_from_inner_product(hits[0].scores[leg])
                for hits in r.search(texts, k=1, mode=leg, **over) if hits]
        key = "bm25@text" if leg == "bm25" else leg
        assert calibrated.scales[key].top1_mean == pytest.approx(statistics.fmean(tops), rel=1e-5)
        assert calibrated.scales[key].queries == len(tops)


def test_one_query_scores_are_the_boosted_sum_of_the_legs(
        corpus: Any, calibrated: Any, engine_client: Any) -> None:
    """Each hit's score = sum over legs of weight / scale x that leg's engine score, the
    legs computed independently: numpy inner products, exact sparse dot products of the
    heaviest tokens, BM25 from the one-leg search on the same field."""
    bundle, index, vectors, sparse = corpus
    r = Retriever(bundle, engine_client, index, fusion=CALIBRATED)
    weights = dict(r.defaults.weights)
    shape = Shape(CALIBRATED_SPARSE_TOKENS, ("text",))
    for text in QUERIES:
        q = r.encoder.encode(text)
        top = heaviest(q.sparse, CALIBRATED_SPARSE_TOKENS)
        bm25 = {h.doc_id: h.scores["bm25"]
                for h in r.search(text, k=N_DOCS, mode="bm25", text_fields=("text",))}
        want = {}
        for i in range(N_DOCS):  # knn k = 50 candidates >= 40 documents: every doc has it
            doc = f"d{i:02d}"
            parts = {"dense": score_from_inner_product(float(vectors[i] @ q.dense)),
                     "sparse": sum(c * sparse[i].get(k, 0.0) for k, c in top.items()),
                     "bm25": bm25.get(doc, 0.0)}
            want[doc] = sum(weights[leg] / calibrated.scale(leg_key(leg, shape)) * s
                            for leg, s in parts.items() if weights.get(leg))
        hits = r.search(text, k=10)
        assert len(hits) == 10
        for h in hits:
            assert h.score == pytest.approx(want[h.doc_id], rel=4 * LUCENE_FEATURE_REL_TOL)
        best = sorted(want, key=lambda d: -want[d])[:3]
        assert hits[0].doc_id in best


def test_explain_shows_each_legs_part_of_the_sum(corpus: Any, calibrated: Any,
                                                 engine_client: Any) -> None:
    bundle, index, *_ = corpus
    r = Retriever(bundle, engine_client, index, fusion=CALIBRATED)
    weights = r.defaults.weights
    hits = r.search(QUERIES[1], k=5, explain=True)
    for h in hits:
        ex = h.explanation
        assert ex is not None and ex.fused == h.score
        parts = [weights[leg] * part.norm for leg, part in ex.legs.items() if part.norm is not None]
        assert parts and sum(parts) == pytest.approx(h.score, rel=1e-5)
        dense = ex.leg("dense")
        assert dense.engine_score is not None and dense.score == pytest.approx(
            legs.get("dense").score(dense.engine_score))


def test_dsl_is_one_request_that_gives_the_same_hits(corpus: Any, calibrated: Any,
                                                     engine_client: Any) -> None:
    bundle, index, *_ = corpus
    r = Retriever(bundle, engine_client, index, fusion=CALIBRATED)
    (plan,) = r.dsl(QUERIES[0], k=5)
    assert plan["path"] == CALIBRATED and len(plan["requests"]) == 1
    req = plan["requests"][0]
    assert req["path"] == f"/{index}/_search" and "bool" in req["body"]["query"]
    (sent,) = make_adapter(engine_client).msearch(index, [req["body"]])
    assert [h.doc_id for h in sent.hits] == [h.doc_id for h in r.search(QUERIES[0], k=5)]


def test_filter_paging_and_full_shape(corpus: Any, calibrated: Any, engine_client: Any) -> None:
    bundle, index, *_ = corpus
    r = Retriever(bundle, engine_client, index, fusion=CALIBRATED)
    flt = {"term": {"metadata.group": "b"}}
    hits = r.search(QUERIES[2], k=5, filter=flt)
    assert hits and all(h.source["metadata"]["group"] == "b" for h in hits)
    page = r.search(QUERIES[2], k=3, from_=2)
    assert [h.doc_id for h in page] == [h.doc_id for h in r.search(QUERIES[2], k=5)][2:]
    assert [h.rank for h in page] == [3, 4, 5]
    full = r.search(QUERIES[2], k=5, sparse_tokens=0, text_fields=("title", "text"))
    assert len(full) == 5  # the full shape is calibrated too ("sparse", "bm25")


def test_an_index_without_calibration_is_refused_with_the_command(
        corpus: Any, engine_client: Any, tmp_path: Any) -> None:
    bundle, index, *_ = corpus
    other = f"{index}-raw"
    make_adapter(engine_client).create_index(other, bundle)
    try:
        r = Retriever(bundle, engine_client, other, fusion=CALIBRATED)
        with pytest.raises(ConfigError, match=f"lr index calibrate --index {other}"):
            r.search(QUERIES[0])
    finally:
        engine_client.indices.delete(index=other, ignore_unavailable=True)


def test_lr_search_explain_and_dsl(corpus: Any, calibrated: Any, engine_client: Any,
                                   request: pytest.FixtureRequest, capsys: Any) -> None:
    """``lr search --fusion calibrated``: --explain shows each leg's calibrated part,
    --dsl the one request and its boosts; ``lr index calibrate`` prints the scales."""
    from lr_opensearch.cli import main

    bundle, index, *_ = corpus
    engine = make_adapter(engine_client).engine
    url = request.getfixturevalue("opensearch_url" if engine == "opensearch" else "es_url")
    where = ["--url", url]
    common = ["search", "--bundle", str(bundle.path), "--index", index, *where,
              "--fusion", CALIBRATED]
    assert main([*common, "--k", "3", "--explain", QUERIES[1]]) == 0
    text = capsys.readouterr().out
    assert "(calibrated " in text and "dense ip" in text
    assert main([*common, "--dsl", QUERIES[1]]) == 0
    text = capsys.readouterr().out
    assert text.count("GET /") == 1 and "boosts [" in text and '"minimum_should_match": 1' in text
    assert main(["index", "calibrate", "--index", index, "--bundle", str(bundle.path), *where,
                 "--sample-docs", "10", "--sparse-tokens", "3"]) == 0
    text = capsys.readouterr().out
    assert "sparse@3" in text and "bm25@text" in text
    assert "sparse@3" in read_calibration(make_adapter(engine_client), index).scales


def test_in_cluster_legs_take_their_boosts_inside_the_field() -> None:
    """Text-only legs (``neural``, ``neural_sparse``, ``match``) in the one query: each
    boost sits where OpenSearch reads it, the BM25 clause on the shape's field."""
    from lr_opensearch.engine.text_queries import text_sub_queries

    record = {"models": {"dense": "D", "sparse": "S"}}
    sub = text_sub_queries(record, "heat flow", ["dense", "sparse", "bm25"],
                           LegContext(knn_depth=20, text_fields=("text",)))
    body = OpenSearchAdapter(None).calibrated_body(sub, [0.5, 0.1, 0.25], size=10)
    neural, sparse, match = body["query"]["bool"]["should"]
    assert neural == {"neural": {"lr_dense": {"query_text": "heat flow", "k": 20,
                                              "model_id": "D", "boost": 0.5}}}
    assert sparse == {"neural_sparse": {"lr_sparse": {"query_text": "heat flow",
                                                      "model_id": "S", "boost": 0.1}}}
    assert match == {"match": {"text": {"query": "heat flow", "boost": 0.25}}}


def test_search_template_renders_the_text_only_one_query(corpus: Any, calibrated: Any,
                                                        engine_client: Any) -> None:
    """The stored template (``lr models deploy`` stores it) renders, for any text (quotes,
    backslashes), exactly the calibrated body of the text-only legs: checked through the
    node's own ``_render/template`` (no ml-commons needed to render)."""
    from lr_opensearch.cluster.deploy import store_template
    from lr_opensearch.engine.text_queries import TEMPLATE_PARAM, text_sub_queries

    bundle, index, *_ = corpus
    adapter = make_adapter(engine_client)
    if adapter.engine != "opensearch":
        return  # in-cluster encoding is OpenSearch's (ml-commons); nothing to check on ES
    record = {"models": {"dense": "D", "sparse": "S"}, "legs": ["dense", "sparse", "bm25"],
              "weights": [0.4, 0.2, 0.4], "dense_field": "lr_dense", "sparse_field": "lr_sparse"}
    name = store_template(engine_client, index, record, bundle)
    text = 'heat "flow" \\ tower'
    rendered = engine_client.render_search_template(
        body={"id": name, "params": {TEMPLATE_PARAM: text}})["template_output"]
    shape = Shape(None, ("text",))
    boosts = read_calibration(adapter, index).boosts(dict(zip(record["legs"], record["weights"], strict=True)),
                                                     shape, index=index)
    want = adapter.calibrated_body(
        text_sub_queries(record, text, record["legs"], LegContext(knn_depth=50, text_fields=("text",))),
        [boosts[n] for n in record["legs"]], size=10,
        source={"excludes": ["lr_dense", "lr_sparse"]})
    assert rendered == want
    sized = engine_client.render_search_template(
        body={"id": name, "params": {TEMPLATE_PARAM: "x", "size": 3}})
    assert sized["template_output"]["size"] == 3


def test_recalibrating_re_renders_the_stored_template(corpus: Any, calibrated: Any,
                                                      engine_client: Any, request: Any,
                                                      capsys: Any) -> None:
    """The stored text-only template carries the boosts of the calibration it was rendered
    with; ``lr index calibrate`` (as every ingest) writes new scales: the template is
    rendered again, so it still renders exactly the calibrated body ``lr search
    --in-cluster --fusion calibrated`` sends (its boosts read from the new scales)."""
    from lr_opensearch.cli import main
    from lr_opensearch.cluster.deploy import store_template
    from lr_opensearch.engine.text_queries import CLUSTER_KEY, TEMPLATE_PARAM, text_sub_queries
    from lr_opensearch.options import CALIBRATED_TEXT_FIELDS, DEFAULT_CANDIDATES

    bundle, index, *_ = corpus
    adapter = make_adapter(engine_client)
    if adapter.engine != "opensearch":
        return  # in-cluster encoding is OpenSearch's (ml-commons); nothing to check on ES
    other = f"{index}-recal"
    adapter.create_index(other, bundle)
    # a copy by search + bulk: 2.19.1's minimal distribution (the version matrix) has no _reindex
    docs = engine_client.search(index=index, body={"size": 10_000, "query": {"match_all": {}}})
    lines = [line for h in docs["hits"]["hits"]
             for line in ({"index": {"_index": other, "_id": h["_id"]}}, h["_source"])]
    assert lines and not engine_client.bulk(body=lines, refresh=True)["errors"]
    try:
        calibrate(adapter, other, bundle, sample_docs=N_DOCS)
        record = {"models": {"dense": "D", "sparse": "S"}, "legs": ["dense", "sparse", "bm25"],
                  "weights": [0.4, 0.2, 0.4], "dense_field": "lr_dense",
                  "sparse_field": "lr_sparse"}
        record["template"] = store_template(engine_client, other, record, bundle)
        # as lr models deploy does
        adapter.update_meta(other, META_KEY, lambda old: {**(old or {}), CLUSTER_KEY: record})
        shape = Shape(None, CALIBRATED_TEXT_FIELDS)
        weights = dict(zip(record["legs"], record["weights"], strict=True))
        before = read_calibration(adapter, other).boosts(weights, shape, index=other)

        assert main(["index", "calibrate", "--index", other, "--bundle", str(bundle.path),
                     "--url", request.getfixturevalue("opensearch_url"), "--sample-docs", "5",
                     "--seed", "7"]) == 0
        capsys.readouterr()
        boosts = read_calibration(adapter, other).boosts(weights, shape, index=other)
        assert boosts != before  # the new sample moved the scales
        text = "boundary layer heat"
        rendered = engine_client.render_search_template(
            body={"id": record["template"], "params": {TEMPLATE_PARAM: text}})
        want = adapter.calibrated_body(
            text_sub_queries(record, text, record["legs"],
                             LegContext(knn_depth=DEFAULT_CANDIDATES, text_fields=shape.text_fields)),
            [boosts[n] for n in record["legs"]], size=10,
            source={"excludes": ["lr_dense", "lr_sparse"]})
        assert rendered["template_output"] == want
    finally:
        engine_client.indices.delete(index=other, ignore_unavailable=True)
        engine_client.delete_script(id=f"lr-calibrated-{other}", ignore=[404])


def test_a_pseudo_query_without_tokens_is_left_out_not_fatal(
        tmp_path: Any, os_client: Any) -> None:
    """A sampled document whose words are all outside the vocabulary gives pseudo-queries
    with no token (CI: a Cranfield title under the tiny vocabulary ended an ingest with
    exit 1 after every document was loaded). They are left out and counted; the others
    calibrate."""
    adapter = make_adapter(os_client)
    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(tmp_path / "bundle", tok, seed=3))
    index = f"lr-test-calibrated-tokenless-{uuid.uuid4().hex[:8]}"
    adapter.create_index(index, bundle)
    outside = "high frequency gas discharges"
    assert not tok.encode(outside, add_special_tokens=False).ids or all(
        t == tok.token_to_id("[UNK]") for t in tok.encode(outside, add_special_tokens=False).ids)
    docs = [{"title": outside, "text": f"{outside}. {outside}"},
            {"title": "doc paris tower", "text": SENTENCES[1]},
            {"title": "doc boundary layer", "text": SENTENCES[3]}]
    ops: list[Any] = []
    for i, doc in enumerate(docs):
        ops += [{"index": {"_index": index, "_id": f"d{i}"}}, doc]
    try:
        assert not os_client.bulk(body=ops, refresh=True)["errors"]
        cal = calibrate(adapter, index, bundle, sample_docs=3)
        assert cal.method["sampled_documents"] == 3
        assert cal.method["pseudo_queries_without_tokens"] >= 1
        assert cal.method["pseudo_queries"] >= 2
        assert read_calibration(adapter, index).scales["bm25"].queries > 0
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)
