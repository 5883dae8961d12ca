"""The index layout against a REAL OpenSearch node (tests/conftest.py provides it).

Covers: index creation from the template, dense + sparse documents, knn recall against
exact numpy inner products, rank_feature scores against the exact sparse dot product
(within Lucene's feature precision), sparse keys that need encoding, the bundle check,
and the server-side hybrid pipeline (or a correct "not available" report).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from node_support import opensearch_test_version

from lr_opensearch.bundle.keys import decode_key, encode_key
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.engine.templates import render_hybrid_pipeline
from lr_opensearch.errors import BundleMismatchError, EngineError
from lr_opensearch.legs.fusion_config import fusion_config

pytestmark = [pytest.mark.node, pytest.mark.matrix]  # matrix: also run on OpenSearch 2.19

# Lucene's FeatureField keeps the top 17 bits of a float32 (Float.floatToIntBits(v) >>> 15):
# sign, 8 exponent bits and 8 explicit mantissa bits, i.e. 9 significant bits with the
# implicit one. Decoding shifts back (intBitsToFloat(bits << 15)): the stored value is the
# input TRUNCATED to 9 significant bits, so v * (1 - 2**-8) < stored <= v. A linear
# rank_feature clause scores boost * stored, and a bool.should sums clauses, so the engine's
# sparse score s satisfies  exact * (1 - 2**-8) - eps  <=  s  <=  exact + eps, where eps
# covers float32 rounding of the boosts, products and the sum.
FEATURE_REL_ERROR = 2.0**-8


@dataclass(frozen=True)
class _Config:
    served_dim: int
    key_encoding: str = "lrk1"


@dataclass(frozen=True)
class PlainBundle:
    """Just the attributes create_index / check_bundle read from a Bundle."""

    bundle_id: str
    config: _Config = field(default_factory=lambda: _Config(8))


def _ip_from_score(score: float) -> float:
    """Undo OpenSearch's innerproduct score transform (ip>=0: 1+ip; ip<0: 1/(1-ip))."""
    return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score


def _sparse_query(query: dict[str, float], size: int) -> dict[str, Any]:
    should = [{"rank_feature": {"field": f"lr_sparse.{key}", "linear": {}, "boost": count}}
              for key, count in query.items()]
    return {"size": size, "query": {"bool": {"should": should}}}


def test_index_from_template(os_client: Any, index_name: str) -> None:
    adapter = OpenSearchAdapter(os_client)
    assert adapter.create_index(index_name, PlainBundle("bundle-a", _Config(16)))
    body = adapter.index_body(PlainBundle("bundle-a", _Config(16)))
    mapping = os_client.indices.get_mapping(index=index_name)[index_name]["mappings"]
    props = mapping["properties"]
    assert props["lr_dense"]["type"] == "knn_vector" and props["lr_dense"]["dimension"] == 16
    assert props["lr_dense"]["method"]["engine"] == "lucene"
    assert props["lr_dense"]["method"]["space_type"] == "innerproduct"
    assert props["lr_sparse"]["type"] == "rank_features"
    assert mapping["_meta"] == body["mappings"]["_meta"]
    settings = os_client.indices.get_settings(index=index_name)[index_name]["settings"]["index"]
    assert settings["knn"] == "true" and settings["number_of_replicas"] == "0"
    health = os_client.cluster.health(index=index_name, wait_for_status="green",
                                       timeout="30s", request_timeout=60)
    assert health["status"] == "green"
    # strict mapping: a stray top-level field is refused, not silently added
    with pytest.raises(Exception, match="strict"):
        os_client.index(index=index_name, id="x", body={"lr_sparse": {"a": 1.0}, "oops": 1})


def test_bundle_check(os_client: Any, index_name: str) -> None:
    adapter = OpenSearchAdapter(os_client)
    assert adapter.create_index(index_name, PlainBundle("bundle-a", _Config(8)))
    meta = adapter.check_bundle(index_name, PlainBundle("bundle-a", _Config(8)))
    assert meta["bundle_id"] == "bundle-a"
    with pytest.raises(BundleMismatchError, match="bundle_id: index has 'bundle-a', bundle has 'bundle-b'"):
        adapter.check_bundle(index_name, PlainBundle("bundle-b", _Config(8)))
    with pytest.raises(BundleMismatchError, match="dense_dim"):
        adapter.check_bundle(index_name, PlainBundle("bundle-a", _Config(4)))
    with pytest.raises(EngineError, match="does not exist"):
        adapter.check_bundle(index_name + "-absent", PlainBundle("bundle-a"))
    # it exists already: False (another worker won the race), nothing changed
    assert not adapter.create_index(index_name, PlainBundle("bundle-b", _Config(8)))
    assert adapter.index_meta(index_name)["bundle_id"] == "bundle-a"


def test_the_cluster_runs_the_version_under_test(os_capabilities: Any) -> None:
    """The matrix is real: the session's node runs the OpenSearch version asked for
    (LR_TEST_OPENSEARCH_VERSION, default the packaged default); an external cluster named
    without a version is at least one the library supports (2.19+)."""
    if os.environ.get("LR_TEST_OPENSEARCH_URL") and not os.environ.get(
            "LR_TEST_OPENSEARCH_VERSION"):
        assert os_capabilities.release >= (2, 19), os_capabilities.version
    else:
        assert os_capabilities.version == opensearch_test_version()


def test_knn_recall_against_exact_inner_product(os_client: Any, index_name: str) -> None:
    """The library's knn clause (``dense_query``, no ef_search named) finds the exact top 10
    on every version: before k-NN 3.5 lucene searched only k candidates (recall 0.90 here
    on 2.19.1) unless the query carries ef_search."""
    rng = np.random.default_rng(7)
    n, dim, n_queries, k = 400, 32, 25, 10
    docs = rng.normal(size=(n, dim)).astype(np.float32)
    queries = rng.normal(size=(n_queries, dim)).astype(np.float32)
    adapter = OpenSearchAdapter(os_client)
    adapter.create_index(index_name, PlainBundle("b", _Config(dim)))
    lines: list[dict] = []
    for i, vec in enumerate(docs):
        lines += [{"index": {"_index": index_name, "_id": str(i)}}, {"lr_dense": vec.tolist()}]
    assert not os_client.bulk(body=lines, refresh=True)["errors"]
    exact = queries @ docs.T  # [n_queries, n]
    recalls = []
    for qi, query in enumerate(queries):
        resp = os_client.search(index=index_name, body={
            "size": k, "query": adapter.dense_query(query, knn_depth=k)})
        hits = resp["hits"]["hits"]
        truth = set(np.argsort(-exact[qi])[:k].tolist())
        recalls.append(len(truth & {int(h["_id"]) for h in hits}) / k)
        for hit in hits:  # the reported score is the transformed inner product
            ip = _ip_from_score(hit["_score"])
            assert ip == pytest.approx(float(exact[qi, int(hit["_id"])]), rel=1e-4, abs=1e-4)
    assert float(np.mean(recalls)) >= 0.95, recalls


def test_rank_feature_scores_are_the_sparse_dot_product(os_client: Any, index_name: str) -> None:
    rng = np.random.default_rng(11)
    vocab = [f"tok{i}" for i in range(60)]
    OpenSearchAdapter(os_client).create_index(index_name, PlainBundle("b"))
    docs: list[dict[str, float]] = []
    lines: list[dict] = []
    for i in range(80):
        terms = rng.choice(len(vocab), size=12, replace=False)
        weights = np.log1p(rng.gamma(2.0, 1.0, size=12)).astype(np.float32) + np.float32(1e-3)
        doc = {encode_key(vocab[t]): float(w) for t, w in zip(terms, weights, strict=True)}
        docs.append(doc)
        lines += [{"index": {"_index": index_name, "_id": str(i)}}, {"lr_sparse": doc}]
    assert not os_client.bulk(body=lines, refresh=True)["errors"]
    checked, worst = 0, 0.0
    for _ in range(10):
        q_terms = rng.choice(len(vocab), size=5, replace=False)
        query = {encode_key(vocab[t]): float(rng.integers(1, 4)) for t in q_terms}
        exact = {str(i): sum(c * d.get(key, 0.0) for key, c in query.items())
                 for i, d in enumerate(docs)}
        resp = os_client.search(index=index_name, body=_sparse_query(query, size=100))
        hits = resp["hits"]["hits"]
        assert {h["_id"] for h in hits} == {i for i, s in exact.items() if s > 0}
        for hit in hits:
            want = exact[hit["_id"]]
            eps = 1e-6 * want + 1e-6
            assert want * (1 - FEATURE_REL_ERROR) - eps <= hit["_score"] <= want + eps, \
                (hit["_id"], hit["_score"], want)
            worst = max(worst, (want - hit["_score"]) / want)
            checked += 1
    assert checked > 50
    # The truncation is real (scores are not float32-exact) and stays inside the bound.
    assert 1e-5 < worst <= FEATURE_REL_ERROR + 1e-6, worst


TRICKY_TOKENS = ["a.b", ".", "..", "_x", "_", "Ġthe", "âĢĻ", "Ċ", " ", "two words", "café",
                 "東京", "##ing", "-", "-2e", "▁hello", "🙂", "UPPER.case_", "x" * 200]


def test_tricky_sparse_keys_round_trip(os_client: Any, index_name: str) -> None:
    OpenSearchAdapter(os_client).create_index(index_name, PlainBundle("b"))
    lines: list[dict] = []
    for i, token in enumerate(TRICKY_TOKENS):
        doc = {"lr_sparse": {encode_key(token): 1.0 + i, encode_key("common"): 0.5},
               "text": f"doc {i}"}
        lines += [{"index": {"_index": index_name, "_id": str(i)}}, doc]
    resp = os_client.bulk(body=lines, refresh=True)
    assert not resp["errors"], [it for it in resp["items"] if "error" in it["index"]]
    for i, token in enumerate(TRICKY_TOKENS):
        key = encode_key(token)
        assert "." not in key and not key.startswith("_") and decode_key(key) == token
        hits = os_client.search(index=index_name, body=_sparse_query({key: 2.0}, 10))["hits"]["hits"]
        assert [h["_id"] for h in hits] == [str(i)], token
        expected = 2.0 * (1.0 + i)
        assert expected * (1 - FEATURE_REL_ERROR) <= hits[0]["_score"] <= expected * (1 + 1e-6)
        stored = hits[0]["_source"]["lr_sparse"]
        assert sorted(decode_key(k) for k in stored) == sorted([token, "common"])
    hits = os_client.search(index=index_name,
                            body=_sparse_query({encode_key("common"): 1.0}, 50))["hits"]["hits"]
    assert len(hits) == len(TRICKY_TOKENS)


def _index_hybrid_corpus(os_client: Any, index: str) -> np.ndarray:
    rng = np.random.default_rng(3)
    docs = rng.normal(size=(60, 8)).astype(np.float32)
    OpenSearchAdapter(os_client).create_index(index, PlainBundle("b"))
    lines: list[dict] = []
    for i, vec in enumerate(docs):
        sparse = {encode_key(f"t{j}"): float(1 + (i * j) % 5) for j in range(i % 4, i % 4 + 3)}
        lines += [{"index": {"_index": index, "_id": str(i)}},
                  {"lr_dense": vec.tolist(), "lr_sparse": sparse}]
    assert not os_client.bulk(body=lines, refresh=True)["errors"]
    return docs


def _hybrid_case(os_client: Any, index: str, docs: np.ndarray, body: dict[str, Any],
                 fuse_kw: dict[str, Any]) -> None:
    """Run one pipeline server-side and check it against lr_opensearch.search.fusion.fuse."""
    from lr_opensearch.search.fusion import fuse

    pipeline = f"{index}-pipeline"
    os_client.transport.perform_request("PUT", f"/_search/pipeline/{pipeline}", body=body)
    try:
        query_vec = docs[0] * 0.5 + docs[1] * 0.5
        dense = {"knn": {"lr_dense": {"vector": query_vec.tolist(), "k": 20}}}
        sparse = _sparse_query({encode_key("t1"): 1.0, encode_key("t2"): 2.0}, 20)["query"]
        hybrid = os_client.search(index=index, params={"search_pipeline": pipeline}, body={
            "size": 20, "query": {"hybrid": {"queries": [dense, sparse]}}})["hits"]["hits"]
        d_hits = os_client.search(index=index, body={"size": 20, "query": dense})["hits"]["hits"]
        s_hits = os_client.search(index=index, body={"size": 20, "query": sparse})["hits"]["hits"]
    finally:
        os_client.transport.perform_request("DELETE", f"/_search/pipeline/{pipeline}")
    d_ids, s_ids = {h["_id"] for h in d_hits}, {h["_id"] for h in s_hits}
    assert d_ids - s_ids and s_ids - d_ids  # the "missing from one sub-query" case occurs
    fused = fuse([(h["_id"], h["_score"]) for h in d_hits],
                 [(h["_id"], h["_score"]) for h in s_hits], semantics="opensearch", **fuse_kw)
    assert len(hybrid) == min(20, len(d_ids | s_ids))
    server = {h["_id"]: h["_score"] for h in hybrid}
    for hit in fused[: len(hybrid)]:
        assert server[hit.doc_id] == pytest.approx(hit.score, rel=1e-4, abs=1e-6), hit


def test_server_hybrid_pipeline(os_client: Any, os_capabilities: Any, index_name: str) -> None:
    """With neural-search: the server's hybrid scores equal lr_opensearch.search.fusion's
    ``opensearch`` semantics (min-max + weighted arithmetic mean, and RRF). Without it:
    capabilities say so, and the server indeed refuses the pipeline (detection is right)."""
    from opensearchpy import RequestError

    body = render_hybrid_pipeline(0.7, 0.3, technique="min_max", combination="arithmetic_mean")
    if not os_capabilities.neural_search:
        with pytest.raises(RequestError, match="normalization-processor"):
            os_client.transport.perform_request("PUT", f"/_search/pipeline/{index_name}-p",
                                                body=body)
        assert not os_capabilities.server_hybrid and os_capabilities.knn
        return
    docs = _index_hybrid_corpus(os_client, index_name)
    _hybrid_case(os_client, index_name, docs, body, {"weights": (0.7, 0.3)})
    rrf = render_hybrid_pipeline(0.6, 0.4, combination="rrf", rank_constant=60)
    if not os_capabilities.weighted_rrf:  # OpenSearch < 3.1: no weights, as detected
        with pytest.raises(RequestError, match="rank_constant"):
            os_client.transport.perform_request("PUT", f"/_search/pipeline/{index_name}-p",
                                                body=rrf)
        why = OpenSearchAdapter(os_client).server_fusion_blocker(
            fusion_config((0.6, 0.4), combination="rrf"))
        assert why is not None and "takes no weights" in why
        return
    _hybrid_case(os_client, index_name, docs, rrf,
                 {"weights": (0.6, 0.4), "combination": "rrf", "rank_constant": 60})
