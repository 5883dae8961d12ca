"""Retriever against a real OpenSearch node: exact scores, fusion, explain, filters, paging.

A tiny bundle (random tables, a WordPiece tokenizer trained in the test) and 40 documents
with random dense vectors and sparse maps are indexed directly through the bulk API, so
every expected score is computed independently here with numpy.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import numpy as np
import pytest
from corpus_support import random_docs, tiny_vocab
from tiny_artifacts import tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import BundleMismatchError, ConfigError
from lr_opensearch.legs.scores import inner_product_from_score, score_from_inner_product
from lr_opensearch.search import Retriever
from lr_opensearch.search.explain import LUCENE_FEATURE_REL_TOL
from lr_opensearch.search.fusion import fuse

pytestmark = [pytest.mark.node, pytest.mark.matrix]  # matrix: also run on OpenSearch 2.19

N_DOCS = 40
QUERIES = [
    "paris tower",
    "boundary layer heat transfer flow",
    "doctors treat patients in hospitals",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory, os_client: Any) -> Any:
    """(bundle, index, vectors [N, 16], sparse maps, groups) on the node; deleted afterwards."""
    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(tmp_path_factory.mktemp("b") / "bundle", tok, seed=3))
    docs = random_docs(7, N_DOCS, tiny_vocab(tok), vectors_first=True)
    vectors = np.stack([d.dense for d in docs])
    sparse, groups, ops = [], [], []
    index = f"lr-test-search-{uuid.uuid4().hex[:8]}"
    OpenSearchAdapter(os_client).create_index(index, bundle)
    for i, doc in enumerate(docs):
        tokens, sp = doc.tokens, doc.sparse
        group = "a" if i % 3 else "b"
        sparse.append(sp)
        groups.append(group)
        ops += [
            {"index": {"_index": index, "_id": f"d{i:02d}"}},
            {
                "lr_dense": vectors[i].tolist(),
                "lr_sparse": sp,
                "title": f"doc {i} {' '.join(tokens)}",
                "text": " ".join(tokens),
                "metadata": {"group": group},
            },
        ]
    assert not os_client.bulk(body=ops, refresh=True)["errors"]
    yield bundle, index, vectors, sparse, groups
    os_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.fixture(scope="module")
def retriever(corpus: Any, os_client: Any) -> Retriever:
    bundle, index, *_ = corpus
    return Retriever(bundle, os_client, index, fusion="client", candidates=100)


def exact(
    corpus: Any, retriever: Retriever, text: str
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """numpy inner products [N] and exact sparse dot products [N] of one query."""
    _, _, vectors, sparse, _ = corpus
    q = retriever.encoder.encode(text)
    ip = vectors @ q.dense
    dots = np.array([sum(c * sp.get(k, 0.0) for k, c in q.sparse.items()) for sp in sparse])
    return ip, dots, q.sparse


def raw_subqueries(
    os_client: Any, index: str, retriever: Retriever, text: str
) -> tuple[list, list]:
    """The two sub-queries written out by hand (not through the adapter) and run as-is."""
    q = retriever.encoder.encode(text)
    dense = {"size": 100, "query": {"knn": {"lr_dense": {"vector": q.dense.tolist(), "k": 100}}}}
    sparse = {
        "size": 100,
        "query": {
            "bool": {
                "should": [
                    {"rank_feature": {"field": f"lr_sparse.{k}", "boost": c, "linear": {}}}
                    for k, c in q.sparse.items()
                ]
            }
        },
    }
    out = []
    for body in (dense, sparse):
        hits = os_client.search(index=index, body=body)["hits"]["hits"]
        out.append([(h["_id"], h["_score"]) for h in hits])
    return out[0], out[1]


def test_dense_mode_returns_exact_inner_products(corpus: Any, retriever: Retriever) -> None:
    ip, _, _ = exact(corpus, retriever, QUERIES[0])
    hits = retriever.search(QUERIES[0], k=10, mode="dense")
    assert [h.doc_id for h in hits] == [f"d{i:02d}" for i in np.argsort(-ip)[:10]]
    for h in hits:
        want = float(ip[int(h.doc_id[1:])])
        assert h.scores.get("dense") == pytest.approx(want, abs=2e-6 * max(1.0, abs(want)) ** 2)
        assert h.score == h.scores.get("dense") and h.scores.get("sparse") is None


def test_sparse_mode_scores_are_dot_products(corpus: Any, retriever: Retriever) -> None:
    _, dots, q_sparse = exact(corpus, retriever, QUERIES[1])
    hits = retriever.search(QUERIES[1], k=10, mode="sparse")
    assert hits and all(h.scores.get("dense") is None for h in hits)
    for h in hits:
        want = dots[int(h.doc_id[1:])]
        assert h.scores.get("sparse") == pytest.approx(want, rel=LUCENE_FEATURE_REL_TOL)
    returned = {h.doc_id for h in hits}
    worst = min(dots[int(d[1:])] for d in returned)
    missing = [dots[i] for i in range(N_DOCS) if f"d{i:02d}" not in returned]
    assert all(m <= worst * (1 + 2 * LUCENE_FEATURE_REL_TOL) for m in missing)


@pytest.mark.parametrize("semantics", ["opensearch", "linear"])
def test_hybrid_client_fusion_matches_independent_fusion(
    corpus: Any, retriever: Retriever, os_client: Any, semantics: str
) -> None:
    _, index, *_ = corpus
    for text in QUERIES:
        dense, sparse = raw_subqueries(os_client, index, retriever, text)
        if semantics == "linear":
            dense = [(d, inner_product_from_score(s)) for d, s in dense]
        expected = fuse(dense, sparse, weights=(0.7, 0.3), semantics=semantics, k=10)
        hits = retriever.search(text, k=10, semantics=semantics)
        assert [h.doc_id for h in hits] == [e.doc_id for e in expected]
        assert [h.score for h in hits] == pytest.approx([e.score for e in expected], rel=1e-6)


def test_explain_fields(corpus: Any, retriever: Retriever) -> None:
    _, _, _, sparse, _ = corpus
    ip, dots, q_sparse = exact(corpus, retriever, QUERIES[1])
    hits = retriever.search(QUERIES[1], k=8, explain=True)
    assert all("lr_sparse" not in (h.source or {}) for h in hits)  # stripped after use
    for h in hits:
        e, i = h.explanation, int(h.doc_id[1:])
        assert e is not None and e.fused == h.score
        assert e.leg("dense").score == pytest.approx(
            float(ip[i]), abs=2e-6 * max(1.0, abs(float(ip[i]))) ** 2
        )
        assert e.sparse_from_tokens == pytest.approx(dots[i], rel=1e-9)
        if e.leg("sparse").engine_score is not None:
            assert e.leg("sparse").engine_score == pytest.approx(dots[i], rel=LUCENE_FEATURE_REL_TOL)
            assert e.leg("sparse").rank is not None and 0 < e.leg("sparse").norm <= 1
        contrib = sorted(
            ((q_sparse[k] * sparse[i][k], k) for k in q_sparse if k in sparse[i]), reverse=True
        )
        got = [(t.contribution, t.key) for t in e.top_tokens]
        assert [c for c, _ in got] == pytest.approx([c for c, _ in contrib[:5]])
        assert all(encode_key(t.token) == t.key for t in e.top_tokens)


def test_filter_applies_to_both_sides(corpus: Any, retriever: Retriever) -> None:
    _, _, _, _, groups = corpus
    flt = {"term": {"metadata.group": "b"}}
    n_b = groups.count("b")
    for mode in ("dense", "sparse", "hybrid"):
        hits = retriever.search(QUERIES[2], k=n_b, mode=mode, filter=flt)
        assert hits and all(groups[int(h.doc_id[1:])] == "b" for h in hits)
    # efficient filtering: knn still finds k documents inside the filter
    assert len(retriever.search(QUERIES[2], k=n_b, mode="dense", filter=flt)) == n_b


def test_pagination_batch_and_source(corpus: Any, retriever: Retriever) -> None:
    full = retriever.search(QUERIES[0], k=8)
    page = retriever.search(QUERIES[0], k=4, from_=4)
    assert [(h.doc_id, h.rank) for h in page] == [(h.doc_id, h.rank) for h in full[4:]]
    batch = retriever.search_batch(QUERIES, k=5)
    assert [[h.doc_id for h in hits] for hits in batch] == [
        [h.doc_id for h in retriever.search(q, k=5)] for q in QUERIES
    ]
    only_title = retriever.search(QUERIES[0], k=3, source=["title"])
    assert all(set(h.source) == {"title"} for h in only_title)


class _Recording:
    """The real client, with its ``msearch`` bodies and ``mget`` calls recorded."""

    def __init__(self, client: Any):
        self._client = client
        self.bodies: list[Any] = []
        self.mgets: list[Any] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def msearch(self, body: Any, **kw: Any) -> Any:
        self.bodies += body[1::2]
        return self._client.msearch(body=body, **kw)

    def mget(self, **kw: Any) -> Any:
        self.mgets.append(kw)
        return self._client.mget(**kw)


@pytest.mark.parametrize("path", ["client", "server"])
def test_hybrid_fetches_sources_of_the_page_only(
    corpus: Any, os_client: Any, os_capabilities: Any, path: str
) -> None:
    """100 candidates per leg (client) or per sub-query (server: pagination_depth, only the
    k hits returned) travel without _source; the k hits' sources come after in one _mget."""
    if path == "server" and not os_capabilities.neural_search:
        pytest.fail("neural-search is missing from the node: server fusion untested")
    bundle, index, *_ = corpus
    spy = _Recording(os_client)
    retriever = Retriever(bundle, spy, index, fusion=path, candidates=100)
    hits = retriever.search_batch(QUERIES[:2], k=3)
    assert spy.bodies and all(b["_source"] is False for b in spy.bodies)
    assert len(spy.mgets) == 1 and len(spy.mgets[0]["body"]["docs"]) <= 6
    if path == "server":  # the page only, from 100 collected per sub-query
        assert len(spy.bodies) == 2
        assert all(b["size"] == 3 and b["query"]["hybrid"]["pagination_depth"] == 100
                   for b in spy.bodies)
    for h in (h for per in hits for h in per):
        stored = os_client.get(index=index, id=h.doc_id)["_source"]
        assert h.source == {k: v for k, v in stored.items() if k not in ("lr_dense", "lr_sparse")}
    spy.bodies.clear()
    spy.mgets.clear()
    assert all(h.source is None for h in retriever.search(QUERIES[0], k=3, source=False))
    assert not spy.mgets


def test_bundle_mismatch_is_refused(corpus: Any, os_client: Any, tmp_path: Any) -> None:
    _, index, *_ = corpus
    other = load_bundle(
        tiny_bundle(tmp_path / "other", wordpiece_tokenizer(padding=False), seed=99)
    )
    with pytest.raises(BundleMismatchError, match=index):
        Retriever(other, os_client, index)


def test_fusion_path_choice(corpus: Any, os_client: Any, os_capabilities: Any) -> None:
    bundle, index, *_ = corpus
    auto = Retriever(bundle, os_client, index)
    client = Retriever(bundle, os_client, index, fusion="client")
    assert len(auto.search(QUERIES[0], k=5, semantics="linear")) == 5  # linear: client only
    with pytest.raises(ConfigError, match="only client side"):
        auto.search(QUERIES[0], k=5, semantics="linear", fusion="server")
    if not os_capabilities.neural_search:
        with pytest.raises(ConfigError, match="no neural-search"):
            auto.search(QUERIES[0], k=5, fusion="server")
    assert [h.doc_id for h in auto.search(QUERIES[0], k=5)] == [
        h.doc_id for h in client.search(QUERIES[0], k=5)
    ]


def test_auto_fusion_goes_client_side_on_large_indexes(
    corpus: Any, os_client: Any, os_capabilities: Any, monkeypatch: Any, caplog: Any
) -> None:
    """From CLIENT_FUSION_MIN_DOCS documents, on an OpenSearch whose hybrid query cannot
    skip, ``fusion="auto"`` fuses on the client (said once); below it, on the server;
    ``fusion="server"`` is obeyed at any size. Same hits either way."""
    import lr_opensearch.engine.opensearch as os_engine

    bundle, index, *_ = corpus
    if not os_capabilities.neural_search:
        pytest.fail("neural-search is missing from the node: server fusion untested")
    small = Retriever(bundle, os_client, index)
    assert small.documents() == N_DOCS
    assert small._resolve_path("auto", small.defaults) == "server"
    monkeypatch.setattr(os_engine, "CLIENT_FUSION_MIN_DOCS", N_DOCS)
    large = Retriever(bundle, os_client, index)
    skips = os_capabilities.release >= os_engine.HYBRID_SKIPS_FROM
    with caplog.at_level("INFO", logger="lr_opensearch.search.retriever"):
        hits = [large.search(q, k=5) for q in QUERIES]
    assert large._resolve_path("auto", large.defaults) == ("server" if skips else "client")
    if not skips:
        told = [r.getMessage() for r in caplog.records if "fuses client side" in r.getMessage()]
        assert len(told) == 1 and f"{N_DOCS} documents" in told[0]
    assert large._resolve_path("server", large.defaults) == "server"
    server = Retriever(bundle, os_client, index, fusion="server")
    for q, got in zip(QUERIES, hits, strict=True):
        assert [h.doc_id for h in got] == [h.doc_id for h in server.search(q, k=5)]


def test_server_and_client_opensearch_semantics_agree(
    corpus: Any, os_client: Any, os_capabilities: Any
) -> None:
    if not os_capabilities.neural_search:  # the project's own node always has it
        pytest.fail("neural-search is missing from the node: server fusion untested")
    bundle, index, *_ = corpus
    # candidates=8: each sub-query misses documents the other found (the server's 0.0 case)
    for candidates in (100, 8):
        server = Retriever(bundle, os_client, index, fusion="server", candidates=candidates)
        client = Retriever(bundle, os_client, index, fusion="client", candidates=candidates)
        for text in QUERIES:
            s_hits, c_hits = server.search(text, k=8), client.search(text, k=8)
            assert [h.doc_id for h in s_hits] == [h.doc_id for h in c_hits]
            assert [h.score for h in s_hits] == pytest.approx([h.score for h in c_hits], rel=1e-5)
            if candidates == 8:
                found = [
                    (h.explanation.leg("dense").rank, h.explanation.leg("sparse").rank)
                    for h in server.search(text, k=8, explain=True)
                ]
                assert any(d is None or s is None for d, s in found)
        batch = server.search_batch(QUERIES, k=8)  # one _msearch, the pipeline inline
        assert [[h.doc_id for h in hits] for hits in batch] == [
            [h.doc_id for h in client.search(q, k=8)] for q in QUERIES
        ]


def test_lr_search_cli(corpus: Any, retriever: Retriever, opensearch_url: str, capsys: Any) -> None:
    from lr_opensearch.cli import main

    bundle, index, *_ = corpus
    common = ["search", "--bundle", str(bundle.path), "--index", index, "--url", opensearch_url,
              "--fusion", "client"]
    assert main([*common, "--k", "4", "--json", QUERIES[0]]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [h["doc_id"] for h in out[0]["hits"]] == [
        h.doc_id for h in retriever.search(QUERIES[0], k=4)
    ]
    assert main([*common, "--k", "3", "--explain", QUERIES[1]]) == 0
    text = capsys.readouterr().out
    assert "top tokens:" in text and "dense ip" in text


BM25_WEIGHTS = {"dense": 0.3, "sparse": 0.2, "bm25": 0.5}


def test_bm25_leg_server_equals_client_and_hand_fusion(
    corpus: Any, os_client: Any, os_capabilities: Any
) -> None:
    """Three legs (dense, sparse, BM25): the server's hybrid query + pipeline, client
    fusion, and fuse() over the three sub-queries run by hand give the same ranking and
    scores; the BM25 leg's scores are OpenSearch's own multi_match scores."""
    if not os_capabilities.neural_search:
        pytest.fail("neural-search is missing from the node: server fusion untested")
    bundle, index, *_ = corpus
    for candidates in (100, 8):
        server = Retriever(bundle, os_client, index, fusion="server", candidates=candidates,
                           weights=BM25_WEIGHTS)
        client = Retriever(bundle, os_client, index, fusion="client", candidates=candidates,
                           weights=BM25_WEIGHTS)
        assert server.defaults.legs == ("dense", "sparse", "bm25")
        for text in QUERIES:
            s_hits = server.search(text, k=8, explain=True)
            c_hits = client.search(text, k=8, explain=True)
            assert [h.doc_id for h in s_hits] == [h.doc_id for h in c_hits]
            assert [h.score for h in s_hits] == pytest.approx([h.score for h in c_hits], rel=1e-5)
            # by hand: the three sub-queries as single-leg searches, fused by fuse()
            d = [(h.doc_id, score_from_inner_product(h.score))
                 for h in client.search(text, k=candidates, mode="dense")]
            s = [(h.doc_id, h.score) for h in client.search(text, k=candidates, mode="sparse")]
            body = {"size": candidates, "query": {"multi_match": {"query": text,
                                                                  "fields": ["title", "text"]}}}
            b = [(h["_id"], h["_score"])
                 for h in os_client.search(index=index, body=body)["hits"]["hits"]]
            want = fuse(d, s, bm25_hits=b, weights=BM25_WEIGHTS, k=8)
            assert [h.doc_id for h in c_hits] == [h.doc_id for h in want]
            assert [h.score for h in c_hits] == pytest.approx([h.score for h in want], rel=1e-5)
            bm25 = dict(b)
            for h in c_hits:
                assert h.scores.get("bm25") == (pytest.approx(bm25[h.doc_id]) if h.doc_id in bm25
                                        else None)
                assert h.explanation is not None and h.explanation.leg("bm25").rank == (
                    [doc for doc, _ in b].index(h.doc_id) + 1 if h.doc_id in bm25 else None)
    two = Retriever(bundle, os_client, index, fusion="client")
    assert two.search(QUERIES[0], k=5, weights={"dense": 0.5, "bm25": 0.5})[0].scores.get("sparse") is None
    body = {"size": 5, "query": {"multi_match": {"query": QUERIES[0], "fields": ["title", "text"]}}}
    want_bm25 = [(h["_id"], h["_score"])
                 for h in os_client.search(index=index, body=body)["hits"]["hits"]]
    only = two.search(QUERIES[0], k=5, mode="bm25")
    assert [(h.doc_id, h.score) for h in only] == want_bm25 and len(only) == 5


def _console_requests(text: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, body) of every request in Dev Tools console text."""
    out, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith(("GET ", "POST ")):
            method, path = lines[i].split(" ", 1)
            j = i + 1
            while lines[j] != "}":
                j += 1
            out.append((method, path, json.loads("\n".join(lines[i + 1 : j + 1]))))
            i = j
        i += 1
    return out


@pytest.mark.parametrize("path", ["server", "client"])
def test_dsl_sent_as_printed_gives_the_search_results(
    corpus: Any, os_client: Any, os_capabilities: Any, opensearch_url: str, capsys: Any,
    path: str
) -> None:
    """``lr search --dsl`` prints requests that, pasted into the engine as they are, give
    the hits ``lr search`` returns (server: the engine fuses; client: fuse the legs)."""
    from lr_opensearch.cli import main

    if path == "server" and not os_capabilities.neural_search:
        pytest.fail("neural-search is missing from the node: server fusion untested")
    bundle, index, *_ = corpus
    weights = {"dense": 0.4, "sparse": 0.2, "bm25": 0.4}
    retriever = Retriever(bundle, os_client, index, fusion=path, candidates=12, weights=weights)
    expected = [h.doc_id for h in retriever.search(QUERIES[1], k=5)]
    args = ["search", "--bundle", str(bundle.path), "--index", index, "--url", opensearch_url,
            "--fusion", path, "--candidates", "12", "--weights", "dense=0.4,sparse=0.2,bm25=0.4",
            "--k", "5", "--dsl", QUERIES[1]]
    assert main(args) == 0
    requests = _console_requests(capsys.readouterr().out)
    if path == "server":
        assert len(requests) == 1 and "hybrid" in requests[0][2]["query"]
        assert "search_pipeline" in requests[0][2]  # the normalization travels along
        hits = os_client.search(index=index, body=requests[0][2])["hits"]["hits"]
        assert [h["_id"] for h in hits] == expected
    else:
        assert len(requests) == 3  # one per leg (one shard)
        lists = [[(h["_id"], h["_score"]) for h in
                  os_client.search(index=index, body=body)["hits"]["hits"]]
                 for _, _, body in requests]
        fused = fuse(lists[0], lists[1], bm25_hits=lists[2], weights=weights, k=5)
        assert [f.doc_id for f in fused] == expected
    assert main([*args, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)[0]
    assert plan["path"] == path and plan["fusion"]["weights"] == [0.4, 0.2, 0.4]
    assert [r["body"] for r in plan["requests"]] == [body for _, _, body in requests]
