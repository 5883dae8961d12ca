"""Unit tests of the Elasticsearch adapter's request bodies (no node needed)."""

from __future__ import annotations

import numpy as np
import pytest

from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.engine.elasticsearch import ElasticsearchAdapter, ESCapabilities, es_index_body
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import fusion_config

FLT = {"term": {"metadata.lang": "en"}}


def test_index_body_dense_vector_max_inner_product_float_hnsw():
    body = es_index_body(dense_dim=384, bundle_id="abc")
    props = body["mappings"]["properties"]
    dense = props["lr_dense"]
    assert (dense["type"], dense["dims"], dense["index"], dense["similarity"]) == (
        "dense_vector",
        384,
        True,
        "max_inner_product",
    )
    assert dense["index_options"]["type"] == "hnsw"  # not the quantised int8_hnsw default
    assert props["lr_sparse"] == {"type": "sparse_vector"}
    meta = body["mappings"]["_meta"]["lightretriever"]
    assert (meta["bundle_id"], meta["dense_dim"], meta["key_encoding"]) == ("abc", 384, "lrk1")
    rf = es_index_body(dense_dim=8, bundle_id="x", sparse_type="rank_features")
    assert rf["mappings"]["properties"]["lr_sparse"] == {"type": "rank_features"}
    with pytest.raises(ConfigError, match="sparse_vector, rank_features"):
        es_index_body(dense_dim=8, bundle_id="x", sparse_type="sparse")


def test_knn_query_with_filter_and_num_candidates():
    es = ElasticsearchAdapter(client=None)
    q = es.dense_query(np.array([1.0, -2.0], dtype=np.float32), knn_depth=10, filter=FLT)
    assert q == {
        "knn": {
            "field": "lr_dense",
            "query_vector": [1.0, -2.0],
            "k": 10,
            "num_candidates": 15,
            "filter": [FLT],
        }
    }
    assert es.dense_query(np.ones(2), knn_depth=10, ef_search=400)["knn"]["num_candidates"] == 400
    assert es.dense_query(np.ones(2), knn_depth=50, ef_search=20)["knn"]["num_candidates"] == 50
    assert es.dense_query(np.ones(2), knn_depth=9000)["knn"]["num_candidates"] == 10_000


def test_sparse_vector_term_queries_with_count_boosts():
    es = ElasticsearchAdapter(client=None)
    a, dot = encode_key("wing"), encode_key(".")
    q = es.sparse_query({a: 2.0, dot: 1.0}, filter=FLT)
    assert q == {
        "bool": {
            "should": [
                {"term": {"lr_sparse": {"value": k, "boost": b}}}
                for k, b in sorted([(a, 2.0), (dot, 1.0)])
            ],
            "minimum_should_match": 1,
            "filter": [FLT],
        }
    }
    assert es.sparse_query({}) == {"match_none": {}}


def test_rank_features_variant_matches_opensearch_clause():
    es = ElasticsearchAdapter(client=None, sparse_type="rank_features")
    q = es.sparse_query({"wing": 3.0})
    assert q["bool"]["should"] == [
        {"rank_feature": {"field": "lr_sparse.wing", "boost": 3.0, "linear": {}}}
    ]


def _caps(retrievers: tuple[str, ...] = ("linear", "rrf"), why: str = "") -> ESCapabilities:
    return ESCapabilities("9.1.0", ("rank-rrf", "x-pack-core"), "trial", True, retrievers, why)


def test_server_fusion_needs_a_matching_retriever_and_licence():
    es = ElasticsearchAdapter(client=None)
    es._capabilities = _caps()
    linear = fusion_config((0.6, 0.4), "linear")
    assert es.server_fusion_blocker(linear) is None
    assert es.server_fusion_blocker(fusion_config((0.5, 0.5), "linear", combination="rrf")) is None
    # what no retriever computes: opensearch semantics, l2, weighted rrf
    assert "semantics 'opensearch'" in es.server_fusion_blocker(fusion_config((0.6, 0.4)))
    assert "l2" in es.server_fusion_blocker(fusion_config((0.6, 0.4), "linear", "l2"))
    assert "unequal" in es.server_fusion_blocker(
        fusion_config((0.6, 0.4), "linear", combination="rrf"))
    # a basic licence: no retrievers, and the reason is passed on
    es._capabilities = _caps((), "the linear and rrf retrievers need an Enterprise licence")
    assert "Enterprise" in es.server_fusion_blocker(linear)
    with pytest.raises(ConfigError, match="unknown sparse_type"):
        ElasticsearchAdapter(client=None, sparse_type="splade")


def test_linear_and_rrf_retriever_bodies():
    es = ElasticsearchAdapter(client=None)
    dense = es.dense_query(np.array([1.0, 0.0], dtype=np.float32), knn_depth=50)
    sparse = es.sparse_query({"wing": 2.0})
    body = es.hybrid_body([dense, sparse], fusion_config((0.7, 0.3), "linear"), size=50,
                          source=False, timeout="2s")
    assert body["size"] == 50 and body["_source"] is False and body["timeout"] == "2s"
    assert "query" not in body  # the retriever replaces the query
    linear = body["retriever"]["linear"]
    assert linear["rank_window_size"] == 50
    assert linear["retrievers"] == [
        {"retriever": {"standard": {"query": dense}}, "weight": 0.7, "normalizer": "minmax"},
        {"retriever": {"standard": {"query": sparse}}, "weight": 0.3, "normalizer": "minmax"},
    ]
    rrf = es.hybrid_body([dense, sparse], fusion_config((0.5, 0.5), "linear", combination="rrf",
                                                        rank_constant=40), size=20)
    assert rrf["retriever"] == {"rrf": {
        "retrievers": [{"standard": {"query": dense}}, {"standard": {"query": sparse}}],
        "rank_constant": 40, "rank_window_size": 20}}


def test_make_adapter_picks_elasticsearch_for_es_clients():
    from elasticsearch import Elasticsearch

    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.engine.opensearch import OpenSearchAdapter

    assert isinstance(make_adapter(Elasticsearch("http://127.0.0.1:1")), ElasticsearchAdapter)
    from opensearchpy import OpenSearch

    adapter = make_adapter(OpenSearch("http://127.0.0.1:1"))
    assert type(adapter) is OpenSearchAdapter
