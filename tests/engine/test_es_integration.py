"""The Elasticsearch adapter against a real Elasticsearch node.

The node is the ``es_client`` session fixture (tests/conftest.py): ``LR_TEST_ELASTICSEARCH_URL``
or a throwaway Elasticsearch 9.1 node from Maven Central (``lr node ... --engine
elasticsearch``). Never skipped: no node is a failure.
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest
from corpus_support import random_docs, tiny_vocab
from tiny_artifacts import tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.elasticsearch import ElasticsearchAdapter
from lr_opensearch.errors import BundleMismatchError, ConfigError
from lr_opensearch.search import Retriever
from lr_opensearch.search.explain import LUCENE_FEATURE_REL_TOL
from lr_opensearch.search.fusion import fuse

pytestmark = pytest.mark.node
N_DOCS = 30


@pytest.fixture(scope="module")
def es_corpus(es_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    client = es_client
    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(tmp_path_factory.mktemp("esb") / "bundle", tok, seed=5))
    docs = random_docs(11, N_DOCS, tiny_vocab(tok), vectors_first=True)
    vectors = np.stack([d.dense for d in docs])
    index = f"lr-test-es-{uuid.uuid4().hex[:8]}"
    assert ElasticsearchAdapter(client).create_index(index, bundle)
    sparse, ops = [], []
    for i, doc in enumerate(docs):
        sp = doc.sparse
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
        assert h.scores.get("dense") == pytest.approx(
            float(ip[int(h.doc_id[1:])]), abs=1e-5 * max(1.0, abs(h.scores.get("dense"))) ** 2
        )
    sp_hits = r.search(text, k=10, mode="sparse")
    for h in sp_hits:
        assert h.scores.get("sparse") == pytest.approx(dots[int(h.doc_id[1:])], rel=LUCENE_FEATURE_REL_TOL)
    # hybrid = fusion of the two sub-queries fetched independently
    d50 = r.search(text, k=50, mode="dense")
    s50 = r.search(text, k=50, mode="sparse")
    from lr_opensearch.legs.scores import score_from_inner_product

    expected = fuse(
        [(h.doc_id, score_from_inner_product(h.scores.get("dense"))) for h in d50],
        [(h.doc_id, h.scores.get("sparse")) for h in s50],
        weights=r.options.weights,  # the bundle's, as the retriever fuses
        k=10,
    )
    hybrid = r.search(text, k=10, explain=True)
    assert [h.doc_id for h in hybrid] == [e.doc_id for e in expected]
    # Explain: every hit the sparse side found names its query tokens. (Token ids, so the
    # dense ranking, vary between processes: the WordPiece trainer's tie order is not fixed,
    # so hybrid[0] may be a dense-only hit.)
    assert all(h.explanation.top_tokens for h in hybrid if h.scores.get("sparse") is not None)
    top_sparse = r.search(text, k=1, mode="sparse", explain=True)[0].explanation.top_tokens
    assert top_sparse and {t.key for t in top_sparse} <= set(q.sparse)
    with pytest.raises(ConfigError, match="semantics 'opensearch' has no Elasticsearch"):
        r.search(text, k=5, fusion="server")
    with pytest.raises(ConfigError, match="rank-rrf module"):  # this distribution lacks it
        r.search(text, k=5, fusion="server", semantics="linear")
    flt = {"term": {"metadata.group": "a"}}
    assert all(int(h.doc_id[1:]) % 2 for h in r.search(text, k=10, filter=flt))


def test_es_bundle_mismatch(es_corpus: Any, tmp_path: Any) -> None:
    client, _, index, *_ = es_corpus
    other = load_bundle(tiny_bundle(tmp_path / "o", wordpiece_tokenizer(padding=False), seed=42))
    with pytest.raises(BundleMismatchError):
        Retriever(other, client, index)


def test_lr_index_create_on_elasticsearch(es_url: str, es_client: Any,
                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    """``lr index create --engine elasticsearch`` makes the index the adapter searches."""
    from lr_opensearch.cli import main

    bundle_dir = tiny_bundle(tmp_path_factory.mktemp("escli") / "bundle",
                             wordpiece_tokenizer(padding=False), seed=6)
    index = f"lr-test-es-cli-{uuid.uuid4().hex[:8]}"
    args = ["index", "create", "--engine", "elasticsearch", "--url", es_url,
            "--bundle", str(bundle_dir), "--index", index]
    try:
        assert main(args) == 0
        mapping = es_client.indices.get_mapping(index=index)[index]["mappings"]
        assert mapping["properties"]["lr_sparse"]["type"] == "sparse_vector"
        assert mapping["properties"]["lr_dense"]["similarity"] == "max_inner_product"
        assert mapping["_meta"]["lightretriever"]["bundle_id"] == load_bundle(bundle_dir).bundle_id
        assert main(args) == 1  # exists: refused without --exist-ok
        assert main([*args, "--exist-ok"]) == 0
    finally:
        es_client.indices.delete(index=index, ignore_unavailable=True)


def test_es_dsl_sent_as_printed_gives_the_search_results(es_corpus: Any) -> None:
    """``Retriever.dsl`` on Elasticsearch: the legs' requests, sent as they are and fused
    client side, give the hits of ``search``."""
    client, bundle, index, *_ = es_corpus
    r = Retriever(bundle, client, index, candidates=20)
    text = "boundary layer heat transfer paris tower"
    plan = r.dsl([text], k=5)[0]
    assert plan["engine"] == "elasticsearch" and plan["path"] == "client"
    lists = [[(h["_id"], h["_score"]) for h in client.search(index=index, body=req["body"])["hits"]["hits"]]
             for req in plan["requests"]]
    fused = fuse(lists[0], lists[1], weights=plan["fusion"]["weights"], k=5)
    assert [f.doc_id for f in fused] == [h.doc_id for h in r.search(text, k=5)]
