"""The Elasticsearch adapter against a real Elasticsearch node.

Runs when ``LR_ELASTICSEARCH_URL`` points at a node (Elasticsearch 9.x from Maven Central's
integ-test-zip works: see docs or /tmp/brief/ES_NODE.md); skipped otherwise - the project
does not start Elasticsearch itself.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import numpy as np
import pytest
from tiny_artifacts import SENTENCES, tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.errors import BundleMismatchError, ConfigError
from lr_opensearch.es import ElasticsearchAdapter, create_es_index
from lr_opensearch.fusion import fuse
from lr_opensearch.keys import encode_key
from lr_opensearch.search import Retriever
from lr_opensearch.search_explain import LUCENE_FEATURE_REL_TOL

ES_URL = os.environ.get("LR_ELASTICSEARCH_URL")
pytestmark = pytest.mark.skipif(
    not ES_URL, reason="LR_ELASTICSEARCH_URL is not set (no Elasticsearch node)"
)
N_DOCS = 30


@pytest.fixture(scope="module")
def es_corpus(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from elasticsearch import Elasticsearch

    client = Elasticsearch(ES_URL, request_timeout=60)
    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(tmp_path_factory.mktemp("esb") / "bundle", tok, seed=5))
    vocab = sorted({t for s in SENTENCES for t in tok.encode(s, add_special_tokens=False).tokens})
    rng = np.random.default_rng(11)
    vectors = rng.standard_normal((N_DOCS, 16)).astype(np.float32)
    index = f"lr-test-es-{uuid.uuid4().hex[:8]}"
    create_es_index(client, index, bundle)
    sparse, ops = [], []
    for i in range(N_DOCS):
        sp = {
            encode_key(t): float(rng.uniform(0.1, 3.0)) for t in rng.choice(vocab, 8, replace=False)
        }
        sparse.append(sp)
        ops += [
            {"index": {"_index": index, "_id": f"d{i:02d}"}},
            {
                "lr_dense": vectors[i].tolist(),
                "lr_sparse": sp,
                "title": f"doc {i}",
                "metadata": {"group": "a" if i % 2 else "b"},
            },
        ]
    assert not client.bulk(operations=ops, refresh=True)["errors"]
    yield client, bundle, index, vectors, sparse
    client.indices.delete(index=index, ignore_unavailable=True)


def test_es_dense_sparse_hybrid(es_corpus: Any) -> None:
    client, bundle, index, vectors, sparse = es_corpus
    r = Retriever(bundle, client, index, candidates=50)
    assert isinstance(r.adapter, ElasticsearchAdapter) and r.adapter.sparse_type == "sparse_vector"
    text = "boundary layer heat transfer paris tower"
    q = r.encoder.encode(text)
    ip = vectors @ q.dense
    dots = np.array([sum(c * sp.get(k, 0.0) for k, c in q.sparse.items()) for sp in sparse])
    dense = r.search(text, k=10, mode="dense")
    assert [h.doc_id for h in dense] == [f"d{i:02d}" for i in np.argsort(-ip)[:10]]
    for h in dense:
        assert h.dense_score == pytest.approx(
            float(ip[int(h.doc_id[1:])]), abs=1e-5 * max(1.0, abs(h.dense_score)) ** 2
        )
    sp_hits = r.search(text, k=10, mode="sparse")
    for h in sp_hits:
        assert h.sparse_score == pytest.approx(dots[int(h.doc_id[1:])], rel=LUCENE_FEATURE_REL_TOL)
    # hybrid = fusion of the two sub-queries fetched independently
    d50 = r.search(text, k=50, mode="dense")
    s50 = r.search(text, k=50, mode="sparse")
    from lr_opensearch.search_explain import score_from_inner_product

    expected = fuse(
        [(h.doc_id, score_from_inner_product(h.dense_score)) for h in d50],
        [(h.doc_id, h.sparse_score) for h in s50],
        k=10,
    )
    hybrid = r.search(text, k=10, explain=True)
    assert [h.doc_id for h in hybrid] == [e.doc_id for e in expected]
    assert hybrid[0].explanation.top_tokens
    with pytest.raises(ConfigError, match="no neural-search"):
        r.search(text, k=5, fusion="server")
    flt = {"term": {"metadata.group": "a"}}
    assert all(int(h.doc_id[1:]) % 2 for h in r.search(text, k=10, filter=flt))


def test_es_bundle_mismatch(es_corpus: Any, tmp_path: Any) -> None:
    client, _, index, *_ = es_corpus
    other = load_bundle(tiny_bundle(tmp_path / "o", wordpiece_tokenizer(padding=False), seed=42))
    with pytest.raises(BundleMismatchError):
        Retriever(other, client, index)
