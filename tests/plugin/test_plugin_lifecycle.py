"""The LightRetriever plugin over a cluster's life: two bundles for two indices, a new
bundle for the same index, aliases and multi-index targets, a sharded index, a node
restart (the model comes back from the models index, not from the node's disk)."""

from __future__ import annotations

from typing import Any

import pytest
from plugin_support import QUERIES, THREE_LEGS, assert_same, index_corpus, plugin_search
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




@pytest.fixture(scope="module")
def tok() -> Any:
    return wordpiece_tokenizer(padding=False)


@pytest.fixture
def cleanup(plugin_client: Any) -> Any:
    names: list[str] = []
    yield names
    for name in names:
        plugin_client.indices.delete(index=name, ignore_unavailable=True)


def make(root: Any, tok: Any, seed: int, **config: Any) -> Any:
    return load_bundle(tiny_bundle(root / f"bundle-{seed}", tok, seed=seed, **config))


def assert_equal(plugin_client: Any, bundle: Any, target: str, texts: list[str] = QUERIES) -> None:
    retriever = Retriever(bundle, plugin_client, target, fusion="client")
    for text in texts:
        expected = retriever.search(text)
        status, answer = plugin_search(plugin_client, target, {"text": text})
        assert status == 200, answer
        assert_same(expected, answer["hits"]["hits"])


def test_two_bundles_for_two_indices(plugin_client: Any, tok: Any, tmp_path: Any, cleanup: list[str]) -> None:
    first = make(tmp_path, tok, 21, weights=THREE_LEGS)
    second = make(tmp_path, tok, 22, dense_dim=8, weights={"dense": 0.6, "sparse": 0.4})
    a = index_corpus(plugin_client, first, tok, seed=1)
    b = index_corpus(plugin_client, second, tok, seed=2)
    cleanup += [a, b]
    load_plugin_model(plugin_client, first, a)
    load_plugin_model(plugin_client, second, b)
    for _ in range(2):  # interleaved: each index keeps its own model
        assert_equal(plugin_client, first, a)
        assert_equal(plugin_client, second, b)
    status, answer = plugin_search(plugin_client, b, {"text": "paris"})
    assert answer["lightretriever"]["legs"] == ["dense", "sparse"]


def test_new_bundle_for_the_same_index(plugin_client: Any, tok: Any, tmp_path: Any,
                                       cleanup: list[str]) -> None:
    old = make(tmp_path, tok, 31)
    new = make(tmp_path, tok, 32, weights={"dense": 0.5, "bm25": 0.5})
    index = index_corpus(plugin_client, old, tok, seed=3)
    cleanup.append(index)
    load_plugin_model(plugin_client, old, index)
    assert_equal(plugin_client, old, index, QUERIES[:2])
    plugin_client.indices.delete(index=index)
    index_corpus(plugin_client, new, tok, seed=4, index=index)
    status, answer = plugin_search(plugin_client, index, {"text": "paris"})
    assert status == 409 and "lr plugin load" in answer["error"]["reason"], answer
    load_plugin_model(plugin_client, new, index)
    assert_equal(plugin_client, new, index)


def test_alias_and_list_targets(plugin_client: Any, tok: Any, tmp_path: Any, cleanup: list[str]) -> None:
    bundle = make(tmp_path, tok, 41, weights=THREE_LEGS)
    a = index_corpus(plugin_client, bundle, tok, seed=5)
    b = index_corpus(plugin_client, bundle, tok, seed=6)
    other = index_corpus(plugin_client, make(tmp_path, tok, 42), tok, seed=7)
    cleanup += [a, b, other]
    alias = f"{a}-alias"
    plugin_client.indices.put_alias(index=[a, b], name=alias)
    load_plugin_model(plugin_client, bundle, alias)
    assert_equal(plugin_client, bundle, alias)
    assert_equal(plugin_client, bundle, f"{a},{b}")
    status, answer = plugin_search(plugin_client, f"{a},{other}", {"text": "paris"})
    assert status == 400 and "different bundles" in answer["error"]["reason"], answer


def test_sharded_index(plugin_client: Any, tok: Any, tmp_path: Any, cleanup: list[str]) -> None:
    """Each leg is searched per shard and the shards' lists merged, as lr search does for
    the opensearch semantics on a multi-shard index."""
    bundle = make(tmp_path, tok, 51, weights=THREE_LEGS)
    index = f"lr-test-plugin-sharded-{tmp_path.name[-6:].lower()}"
    OpenSearchAdapter(plugin_client).create_index(index, bundle, shards=3)
    cleanup.append(index)
    index_corpus(plugin_client, bundle, tok, seed=8, index=index)
    load_plugin_model(plugin_client, bundle, index)
    assert_equal(plugin_client, bundle, index)


def test_node_restart_keeps_working(plugin_node: Any, tok: Any, tmp_path: Any) -> None:
    plugin_client = plugin_node.client()
    bundle = make(tmp_path, tok, 61, weights=THREE_LEGS)
    index = index_corpus(plugin_client, bundle, tok, seed=9)
    try:
        load_plugin_model(plugin_client, bundle, index)
        assert_equal(plugin_client, bundle, index, QUERIES[:2])
        plugin_node.restart()
        plugin_client = plugin_node.client()
        held = plugin_client.transport.perform_request("GET", "/_plugins/lightretriever/models")
        assert held["models"] == []  # nothing survives in memory: it comes from the index
        assert_equal(plugin_client, bundle, index)
    finally:
        plugin_client.indices.delete(index=index, ignore_unavailable=True)


def test_chunks_at_the_limit() -> None:
    assert [len(c) for c in chunks(bytes(CHUNK_BYTES))] == [CHUNK_BYTES]
    assert [len(c) for c in chunks(bytes(CHUNK_BYTES + 1))] == [CHUNK_BYTES, 1]


@pytest.mark.parametrize("over", [0, 1])
def test_a_part_at_the_chunk_size_loads(plugin_client: Any, tok: Any, tmp_path: Any,
                                        cleanup: list[str], over: int) -> None:
    """The largest part exactly one chunk (``over`` 0) or one byte more (two chunks, the
    second of one byte): the node assembles it, checks it and searches with it."""
    bundle = make(tmp_path, tok, 71 + over, weights=THREE_LEGS)
    parts = plugin_parts(bundle)
    name, largest = max(parts.items(), key=lambda kv: len(kv[1]))
    digest = store_parts(plugin_client, bundle.bundle_id, parts, chunk_bytes=len(largest) - over)
    manifest = plugin_client.get(index=MODELS_INDEX, id=f"{bundle.bundle_id}/manifest")["_source"]
    assert manifest["parts"][name]["chunks"] == 1 + over
    node_load(plugin_client, bundle.bundle_id)
    index = index_corpus(plugin_client, bundle, tok, seed=10 + over)
    cleanup.append(index)
    write_record(plugin_client, index, bundle, digest)
    assert_equal(plugin_client, bundle, index, QUERIES[:2])
