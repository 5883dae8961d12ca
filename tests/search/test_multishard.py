"""Fusion on a multi-shard index, on the real node: the server's hybrid query collects each
sub-query's best hits per shard and normalises them together at the coordinator; client
fusion must see the same lists, so both paths rank alike (and ingest lands every id once)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from corpus_support import random_docs, tiny_vocab
from tiny_artifacts import tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs.scores import score_from_inner_product
from lr_opensearch.search import Retriever, fuse

pytestmark = [pytest.mark.node, pytest.mark.matrix]  # matrix: also run on OpenSearch 2.19

N_DOCS = 240
SHARDS = 3
QUERIES = ["paris tower", "boundary layer heat transfer flow",
           "doctors treat patients in hospitals", "wing flow"]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory, os_client: Any) -> Any:
    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(tmp_path_factory.mktemp("shards") / "b", tok, seed=4))
    index = f"lr-test-shards-{uuid.uuid4().hex[:8]}"
    assert OpenSearchAdapter(os_client).create_index(index, bundle, shards=SHARDS)
    ops: list[dict[str, Any]] = []
    for i, doc in enumerate(random_docs(3, N_DOCS, tiny_vocab(tok), tokens=6)):
        ops += [{"index": {"_index": index, "_id": f"d{i:03d}"}},
                {"lr_dense": doc.dense.tolist(), "lr_sparse": doc.sparse,
                 "title": " ".join(doc.tokens), "text": " ".join(doc.tokens)}]
    assert not os_client.bulk(body=ops, refresh=True)["errors"]
    counts = [os_client.count(index=index, preference=f"_shards:{s}")["count"]
              for s in range(SHARDS)]
    assert sum(counts) == N_DOCS and min(counts) > 0  # every shard holds documents
    yield bundle, index
    os_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.mark.parametrize("combination,weights", [
    ("arithmetic_mean", (0.6, 0.4)), ("arithmetic_mean", (0.4, 0.2, 0.4)),
    ("rrf", (0.5, 0.5)), ("geometric_mean", (0.7, 0.3))])
def test_server_and_client_fusion_agree_on_three_shards(
        sharded: Any, os_client: Any, os_capabilities: Any, combination: str,
        weights: tuple[float, ...]) -> None:
    if not os_capabilities.neural_search:
        pytest.fail("neural-search is missing from the node: server fusion untested")
    bundle, index = sharded
    if combination == "rrf" and not os_capabilities.weighted_rrf:
        # OpenSearch < 3.1: the server's RRF takes no weights; fusion="server" says so and
        # "auto" fuses client side, the same hits as fusion="client"
        server = Retriever(bundle, os_client, index, fusion="server", weights=weights,
                           combination=combination)
        with pytest.raises(ConfigError, match="takes no weights"):
            server.search(QUERIES[0], k=10)
        auto = Retriever(bundle, os_client, index, weights=weights, combination=combination)
        client = Retriever(bundle, os_client, index, fusion="client", weights=weights,
                           combination=combination)
        for text in QUERIES:
            a_hits, c_hits = auto.search(text, k=10), client.search(text, k=10)
            assert [(h.doc_id, h.score) for h in a_hits] == [(h.doc_id, h.score) for h in c_hits]
        return
    global_differs = 0  # how often fusing the global top lists would have ranked otherwise
    for candidates in (5, 20):  # few candidates: shards' lists differ from the global top
        kw = dict(candidates=candidates, weights=weights, combination=combination)
        server = Retriever(bundle, os_client, index, fusion="server", **kw)
        client = Retriever(bundle, os_client, index, fusion="client", **kw)
        assert client.shards == SHARDS
        for text in QUERIES:
            s_hits, c_hits = server.search(text, k=10), client.search(text, k=10)
            if combination == "rrf":
                # RRF ranks the merged shard lists; where two shards hold equal scores of a
                # sub-query (the 9-bit sparse features make such ties common) the server's
                # order of the two is not the client's and their RRF terms swap: a score
                # can move by one rank step of one leg, so compare loosely
                step = 0.5 * (1 / 61 - 1 / 62)
                overlap = {h.doc_id for h in c_hits} & {h.doc_id for h in s_hits}
                assert len(overlap) >= 8, (text, candidates)
                assert [h.score for h in c_hits] == pytest.approx(
                    [h.score for h in s_hits], abs=step), (text, candidates)
                continue
            assert [h.score for h in c_hits] == pytest.approx([h.score for h in s_hits],
                                                              rel=1e-5), (text, candidates)
            # the same documents at the same scores; within an exact tie the server's
            # order is Lucene's (shard, doc), the client's the id: compare tie groups
            # (the last group may be cut by k: left out)
            assert _tie_groups(c_hits)[:-1] == _tie_groups(s_hits)[:-1], (text, candidates)
            if len(weights) == 2:
                dense = [(h.doc_id, score_from_inner_product(h.scores.get("dense")))
                         for h in client.search(text, k=candidates, mode="dense")]
                sparse = [(h.doc_id, h.scores.get("sparse"))
                          for h in client.search(text, k=candidates, mode="sparse")]
                naive = fuse(dense, sparse, weights=weights, combination=combination, k=10)
                global_differs += [e.doc_id for e in naive] != [h.doc_id for h in s_hits]
    if len(weights) == 2 and combination != "rrf":
        assert global_differs > 0  # the per-shard search is what makes the two agree


def _tie_groups(hits: list[Any]) -> list[frozenset[str]]:
    groups: list[tuple[float, set[str]]] = []
    for h in hits:
        if groups and abs(groups[-1][0] - h.score) <= 1e-6 * max(1.0, abs(h.score)):
            groups[-1][1].add(h.doc_id)
        else:
            groups.append((h.score, {h.doc_id}))
    return [frozenset(ids) for _, ids in groups]
