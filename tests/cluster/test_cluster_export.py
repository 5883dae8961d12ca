"""The in-cluster model export and text-only requests, without a node (the node tests:
tests/cluster/test_incluster.py). The ONNX graph runs here in onnx's reference evaluator."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from tiny_artifacts import tiny_bundle, wordpiece_tokenizer
from tokenizers import Tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.cluster import export_dense, export_sparse, text_hybrid_body, text_sub_queries
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import LegContext
from lr_opensearch.query import QueryEncoder

TEXTS = ["The capital of France is Paris.", "naïve café über don't", "flow flow flow",
         "[CLS] boundary layer [SEP] tower"]
RECORD = {"models": {"dense": "D", "sparse": "S"}, "dense_model_id": "D",
          "sparse_model_id": "S", "dense_field": "lr_dense",
          "sparse_field": "lr_sparse", "legs": ["dense", "sparse", "bm25"], "weights": [0.4, 0.2, 0.4]}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("b") / "bundle"
    return load_bundle(tiny_bundle(path, wordpiece_tokenizer(padding=True), remove_stopwords=True))


def test_export_is_deterministic(bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert export_dense(bundle).data == export_dense(bundle).data
    assert export_sparse(bundle).data == export_sparse(bundle).data
    other = load_bundle(tiny_bundle(tmp_path / "c", wordpiece_tokenizer(padding=False), seed=1))
    assert export_dense(other).name != export_dense(bundle).name
    with pytest.raises(ConfigError, match="at most 512 tokens including the 2 special"):
        export_dense(bundle, max_tokens=511)


def test_dense_graph_is_the_encoders_mean(bundle) -> None:  # type: ignore[no-untyped-def]
    from onnx import load_from_string
    from onnx.reference import ReferenceEvaluator

    files = zipfile.ZipFile(io.BytesIO(export_dense(bundle).data))
    graph = ReferenceEvaluator(load_from_string(files.read("model.onnx")))
    tok = Tokenizer.from_str(files.read("tokenizer.json").decode())
    assert tok.padding is None and tok.truncation["max_length"] == 512
    enc = QueryEncoder(bundle, max_tokens=510)
    for text in TEXTS:
        e = tok.encode(text)
        ids = np.array([e.ids])
        out = graph.run(None, {"input_ids": ids, "attention_mask": np.array([e.attention_mask]),
                               "token_type_ids": np.zeros_like(ids)})[0]
        assert out.shape == (1, 1, bundle.config.served_dim)
        np.testing.assert_allclose(out[0, 0], enc.encode(text).dense, rtol=1e-6, atol=1e-7)


def test_sparse_decoder_gives_the_encoders_keys(bundle) -> None:  # type: ignore[no-untyped-def]
    """Stopwords, punctuation and special tokens decode to "" (ml-commons skips them); the
    rest to their lrk1 keys."""
    files = zipfile.ZipFile(io.BytesIO(export_sparse(bundle).data))
    tok = Tokenizer.from_str(files.read("tokenizer.json").decode())
    enc = QueryEncoder(bundle, max_tokens=510)
    for text in TEXTS:
        keys = {tok.decode([i], skip_special_tokens=True) for i in tok.encode(text).ids} - {""}
        assert keys == set(enc.encode(text).sparse), text
    assert files.read("idf.json") == b"{}"  # a count bundle: every token weighs 1


def test_text_sub_queries() -> None:
    ctx = LegContext(knn_depth=100, filter={"term": {"metadata.lang": "en"}}, ef_search=64)
    subs = text_sub_queries(RECORD, "tides", ["dense", "sparse", "bm25"], ctx)
    assert subs[0] == {"neural": {"lr_dense": {
        "query_text": "tides", "k": 100, "model_id": "D",
        "filter": {"term": {"metadata.lang": "en"}}, "method_parameters": {"ef_search": 64}}}}
    assert subs[1] == {"bool": {"must": [{"neural_sparse": {"lr_sparse": {
        "query_text": "tides", "model_id": "S"}}}], "filter": [{"term": {"metadata.lang": "en"}}]}}
    assert subs[2]["bool"]["must"] == [{"multi_match": {"query": "tides",
                                                        "fields": ["title", "text"]}}]
    body = text_hybrid_body(RECORD, 'say "hi"', size=10, candidates=100)
    assert "model_id" not in str(body) and body["query"]["hybrid"]["pagination_depth"] == 100
    assert body["query"]["hybrid"]["queries"][0]["neural"]["lr_dense"]["query_text"] == 'say "hi"'
    with pytest.raises(ConfigError, match="non-empty string"):
        text_sub_queries(RECORD, "  ", ["dense"], LegContext(knn_depth=10))
