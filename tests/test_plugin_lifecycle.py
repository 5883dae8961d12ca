"""The LightRetriever plugin over a cluster's life: two bundles for two indices, a new
bundle for the same index, aliases and multi-index targets, a sharded index, a node
restart (the model comes back from the models index, not from the node's disk)."""

from __future__ import annotations

from typing import Any

import pytest
from plugin_support import QUERIES, THREE_LEGS, index_corpus, plugin_search
from tiny_artifacts import tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.plugin.artifact import plugin_parts
from lr_opensearch.plugin.load import (
    CHUNK_BYTES,
    MODELS_INDEX,
    chunks,
    load_plugin_model,
    node_load,
    store_parts,
    write_record,
)
from lr_opensearch.search import Retriever

pytestmark = [pytest.mark.node, pytest.mark.matrix]

TOL = 1e-5


@pytest.fixture(scope="module")
def client(plugin_client: Any) -> Any:
    return plugin_client


@pytest.fixture(scope="module")
def tok() -> Any:
    return wordpiece_tokenizer(padding=False)


@pytest.fixture
def cleanup(client: Any) -> Any:
    names: list[str] = []
    yield names
    for name in names:
        client.indices.delete(index=name, ignore_unavailable=True)


def make(root: Any, tok: Any, seed: int, **config: Any) -> Any:
    return load_bundle(tiny_bundle(root / f"bundle-{seed}", tok, seed=seed, **config))


def assert_equal(client: Any, bundle: Any, target: str, texts: list[str] = QUERIES) -> None:
    retriever = Retriever(bundle, client, target, fusion="client")
    for text in texts:
        expected = retriever.search(text)
        status, answer = plugin_search(client, target, {"text": text})
        assert status == 200, answer
        got = answer["hits"]["hits"]
        assert [(h["_index"], h["_id"]) for h in got] == [(h.index, h.doc_id) for h in expected]
        for e, g in zip(expected, got, strict=True):
            assert abs(g["_score"] - e.score) <= TOL


def test_two_bundles_for_two_indices(client: Any, tok: Any, tmp_path: Any, cleanup: list[str]) -> None:
    first = make(tmp_path, tok, 21, weights=THREE_LEGS)
    second = make(tmp_path, tok, 22, dense_dim=8, weights={"dense": 0.6, "sparse": 0.4})
    a = index_corpus(client, first, tok, seed=1)
    b = index_corpus(client, second, tok, seed=2)
    cleanup += [a, b]
    load_plugin_model(client, first, a)
    load_plugin_model(client, second, b)
    for _ in range(2):  # interleaved: each index keeps its own model
        assert_equal(client, first, a)
        assert_equal(client, second, b)
    status, answer = plugin_search(client, b, {"text": "paris"})
    assert answer["lightretriever"]["legs"] == ["dense", "sparse"]


def test_new_bundle_for_the_same_index(client: Any, tok: Any, tmp_path: Any,
                                       cleanup: list[str]) -> None:
    old = make(tmp_path, tok, 31)
    new = make(tmp_path, tok, 32, weights={"dense": 0.5, "bm25": 0.5})
    index = index_corpus(client, old, tok, seed=3)
    cleanup.append(index)
    load_plugin_model(client, old, index)
    assert_equal(client, old, index, QUERIES[:2])
    client.indices.delete(index=index)
    index_corpus(client, new, tok, seed=4, index=index)
    status, answer = plugin_search(client, index, {"text": "paris"})
    assert status == 409 and "lr plugin load" in answer["error"]["reason"], answer
    load_plugin_model(client, new, index)
    assert_equal(client, new, index)


def test_alias_and_list_targets(client: Any, tok: Any, tmp_path: Any, cleanup: list[str]) -> None:
    bundle = make(tmp_path, tok, 41, weights=THREE_LEGS)
    a = index_corpus(client, bundle, tok, seed=5)
    b = index_corpus(client, bundle, tok, seed=6)
    other = index_corpus(client, make(tmp_path, tok, 42), tok, seed=7)
    cleanup += [a, b, other]
    alias = f"{a}-alias"
    client.indices.put_alias(index=[a, b], name=alias)
    load_plugin_model(client, bundle, alias)
    assert_equal(client, bundle, alias)
    assert_equal(client, bundle, f"{a},{b}")
    status, answer = plugin_search(client, f"{a},{other}", {"text": "paris"})
    assert status == 400 and "different bundles" in answer["error"]["reason"], answer


def test_sharded_index(client: Any, tok: Any, tmp_path: Any, cleanup: list[str]) -> None:
    """Each leg is searched per shard and the shards' lists merged, as lr search does for
    the opensearch semantics on a multi-shard index."""
    bundle = make(tmp_path, tok, 51, weights=THREE_LEGS)
    index = f"lr-test-plugin-sharded-{tmp_path.name[-6:].lower()}"
    OpenSearchAdapter(client).create_index(index, bundle, shards=3)
    cleanup.append(index)
    index_corpus(client, bundle, tok, seed=8, index=index)
    load_plugin_model(client, bundle, index)
    assert_equal(client, bundle, index)


def test_node_restart_keeps_working(plugin_node: Any, tok: Any, tmp_path: Any) -> None:
    client = plugin_node.client()
    bundle = make(tmp_path, tok, 61, weights=THREE_LEGS)
    index = index_corpus(client, bundle, tok, seed=9)
    try:
        load_plugin_model(client, bundle, index)
        assert_equal(client, bundle, index, QUERIES[:2])
        plugin_node.restart()
        client = plugin_node.client()
        held = client.transport.perform_request("GET", "/_plugins/lightretriever/models")
        assert held["models"] == []  # nothing survives in memory: it comes from the index
        assert_equal(client, bundle, index)
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)


def test_chunks_at_the_limit() -> None:
    assert [len(c) for c in chunks(bytes(CHUNK_BYTES))] == [CHUNK_BYTES]
    assert [len(c) for c in chunks(bytes(CHUNK_BYTES + 1))] == [CHUNK_BYTES, 1]


@pytest.mark.parametrize("over", [0, 1])
def test_a_part_at_the_chunk_size_loads(client: Any, tok: Any, tmp_path: Any,
                                        cleanup: list[str], over: int) -> None:
    """The largest part exactly one chunk (``over`` 0) or one byte more (two chunks, the
    second of one byte): the node assembles it, checks it and searches with it."""
    bundle = make(tmp_path, tok, 71 + over, weights=THREE_LEGS)
    parts = plugin_parts(bundle)
    name, largest = max(parts.items(), key=lambda kv: len(kv[1]))
    digest = store_parts(client, bundle.bundle_id, parts, chunk_bytes=len(largest) - over)
    manifest = client.get(index=MODELS_INDEX, id=f"{bundle.bundle_id}/manifest")["_source"]
    assert manifest["parts"][name]["chunks"] == 1 + over
    node_load(client, bundle.bundle_id)
    index = index_corpus(client, bundle, tok, seed=10 + over)
    cleanup.append(index)
    write_record(client, index, bundle, digest)
    assert_equal(client, bundle, index, QUERIES[:2])
