"""Bad input to the LightRetriever plugin (issue 45, item 6): each a 4xx JSON error that
names the cause and the fix, never a 500 or a Java stack trace, and the node keeps serving;
a model larger than the node's memory bound is refused at load time; a load while searching
never serves a half-loaded model."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from plugin_support import index_corpus, loaded_corpus, plugin_search
from tiny_artifacts import tiny_bundle

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import ConfigError
from lr_opensearch.plugin.artifact import TABLE
from lr_opensearch.plugin.load import (
    MODELS_INDEX,
    delete_stored,
    load_plugin_model,
    node_load,
    write_record,
)

pytestmark = [pytest.mark.node, pytest.mark.matrix]

MAX_BYTES = "lightretriever.model_cache.max_bytes"



@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, plugin_client: Any) -> Any:
    """(bundle, index loaded for it, tokenizer, temporary directory)."""
    root = tmp_path_factory.mktemp("errors")
    bundle, index, tok = loaded_corpus(plugin_client, root, seed=11, doc_seed=5)
    yield bundle, index, tok, root
    plugin_client.indices.delete(index=index, ignore_unavailable=True)


def refused(plugin_client: Any, index: str, body: Any, status: int, *words: str,
            method: str = "POST") -> dict[str, Any]:
    """The plugin's answer to ``body``: HTTP ``status``, the engine's error shape, a reason
    holding ``words``, no stack trace; then a good search still answers."""
    got, answer = plugin_search(plugin_client, index, body, method)
    assert got == status, answer
    assert isinstance(answer, dict) and answer["status"] == status, answer
    error = answer["error"]
    assert error["type"] and error["reason"], answer
    for word in words:
        assert word in error["reason"], (word, error["reason"])
    assert "stack_trace" not in str(answer) and "\tat " not in str(answer)
    return error


def still_serves(plugin_client: Any, index: str) -> None:
    status, answer = plugin_search(plugin_client, index, {"text": "paris tower"})
    assert status == 200 and answer["hits"]["hits"], answer


def test_unknown_index(plugin_client: Any, setup: Any) -> None:
    refused(plugin_client, "no-such-index-xyz", {"text": "paris"}, 404, "does not exist",
            "lr index create")
    still_serves(plugin_client, setup[1])


def test_index_without_lightretriever_meta(plugin_client: Any, setup: Any, index_name_plain: str) -> None:
    refused(plugin_client, index_name_plain, {"text": "paris"}, 400, "_meta.lightretriever",
            "lr index create")


@pytest.fixture
def index_name_plain(plugin_client: Any) -> Any:
    name = "lr-test-plugin-plain"
    plugin_client.indices.create(index=name, body={"mappings": {"properties": {"text": {"type": "text"}}}})
    yield name
    plugin_client.indices.delete(index=name, ignore_unavailable=True)


def test_index_without_plugin_record(plugin_client: Any, setup: Any) -> None:
    bundle, _, tok, _ = setup
    index = index_corpus(plugin_client, bundle, tok, seed=1)
    try:
        refused(plugin_client, index, {"text": "paris"}, 409, "lr plugin load", index)
    finally:
        plugin_client.indices.delete(index=index)


def test_bundle_not_loaded(plugin_client: Any, setup: Any) -> None:
    _, _, tok, root = setup
    other = load_bundle(tiny_bundle(root / "other", tok, seed=12))
    index = index_corpus(plugin_client, other, tok, seed=2)
    try:
        write_record(plugin_client, index, other, "0" * 64)  # a record, but no model in the store
        delete_stored(plugin_client, str(other.bundle_id))
        refused(plugin_client, index, {"text": "paris"}, 409, other.bundle_id, "not loaded",
                "lr plugin load")
    finally:
        plugin_client.indices.delete(index=index)
    still_serves(plugin_client, setup[1])


def test_record_of_another_bundle(plugin_client: Any, setup: Any) -> None:
    bundle, _, tok, _ = setup
    index = index_corpus(plugin_client, bundle, tok, seed=3)
    try:
        write_record(plugin_client, index, bundle, "0" * 64)
        adapter = OpenSearchAdapter(plugin_client)
        meta = adapter.index_mapping(index)["_meta"]
        meta["lightretriever"]["plugin"]["bundle_id"] = "another-bundle"
        adapter.put_index_meta(index, meta)
        refused(plugin_client, index, {"text": "paris"}, 409, "another-bundle", bundle.bundle_id,
                "lr plugin load")
    finally:
        plugin_client.indices.delete(index=index)


def test_a_record_whose_digest_the_store_does_not_hold(plugin_client: Any, setup: Any) -> None:
    """The index's record names a model digest other than the stored one (a load of another
    version in progress): 409 stale load, naming both digests and the command; a load again
    serves."""
    _, _, tok, root = setup
    other = load_bundle(tiny_bundle(root / "stale", tok, seed=13))
    index = index_corpus(plugin_client, other, tok, seed=4)
    try:
        stored = load_plugin_model(plugin_client, other, index)["digest"]
        write_record(plugin_client, index, other, "f" * 64)
        refused(plugin_client, index, {"text": "paris"}, 409, "f" * 64, stored,
                "lr plugin load --bundle B --index I")
        load_plugin_model(plugin_client, other, index)
        still_serves(plugin_client, index)
    finally:
        plugin_client.indices.delete(index=index)
        delete_stored(plugin_client, str(other.bundle_id))


def test_a_damaged_part_is_refused_and_the_held_model_keeps_serving(plugin_client: Any,
                                                                     setup: Any) -> None:
    """A chunk of the stored model changed after the load: the node's reload refuses it (409,
    the part and both checksums named) and searches keep the whole model it held."""
    bundle, index, _, _ = setup
    chunk = f"{bundle.bundle_id}/{TABLE}/0"
    original = plugin_client.get(index=MODELS_INDEX, id=chunk)["_source"]
    data = original["data"]
    flipped = ("B" if data[0] == "A" else "A") + data[1:]  # the first 6 bits of the part
    plugin_client.update(index=MODELS_INDEX, id=chunk, body={"doc": {"data": flipped}},
                         refresh=True)
    try:
        with pytest.raises(ConfigError, match="lightretriever_damaged_load|sha256") as caught:
            node_load(plugin_client, str(bundle.bundle_id))
        assert TABLE in str(caught.value) and "lr plugin load" in str(caught.value)
        still_serves(plugin_client, index)
    finally:
        plugin_client.index(index=MODELS_INDEX, id=chunk, body=original, refresh=True)
    node_load(plugin_client, str(bundle.bundle_id))
    still_serves(plugin_client, index)


@pytest.mark.parametrize(("body", "words"), [
    ({"text": ""}, ["empty"]),
    ({"text": "   "}, ["empty"]),
    ({"text": "word " * 20_000}, ["100000 characters", "shorter"]),
    ({"text": "\u200b\u200b"}, ["no tokens", "send words"]),
    ({"size": 3}, ["needs \"text\""]),
    ({"text": 42}, ["string"]),
    ({"text": "paris", "weights": {"dense": 0.9, "sparse": 0.9}}, ["sum to 1"]),
    ({"text": "paris", "weights": {"dense": 1.5}}, ["[0, 1]"]),
    ({"text": "paris", "weights": {"dense": -0.5, "bm25": 1.5}}, [">= 0"]),
    ({"text": "paris", "weights": {"colbert": 1.0}}, ["unknown leg", "dense, sparse, bm25"]),
    ({"text": "paris", "weights": {"dense": "high"}}, ["number"]),
    ({"text": "paris", "weights": [0.5, 0.5]}, ["object"]),
    ({"text": "paris", "mode": "semantic"}, ["valid modes: hybrid, dense, sparse, bm25"]),
    ({"text": "paris", "mode": "dense", "weights": {"dense": 1.0}}, ["one leg alone"]),
    ({"text": "paris", "size": 0}, ["size", ">= 1"]),
    ({"text": "paris", "size": "ten"}, ["size"]),
    ({"text": "paris", "from": -1}, ["from"]),
    ({"text": "paris", "size": 9000, "from": 2000}, ["10000"]),
    ({"text": "paris", "candidates": 20_000}, ["10000"]),
    ({"text": "paris", "explain": "yes"}, ["true or false"]),
    ({"text": "paris", "_source": ["title"]}, ["_source", "true", "false"]),
    ({"text": "paris", "normalization": "zscore"}, ["valid: min_max, l2"]),
    ({"text": "paris", "combination": "max"}, ["arithmetic_mean, geometric_mean"]),
    ({"text": "paris", "semantics": "linear", "combination": "geometric_mean"}, ["weighted sum"]),
    ({"text": "paris", "rank_constant": 0}, ["rank_constant"]),
    ({"text": "paris", "filter": "group:a"}, ["query clause"]),
    ({"text": "paris", "filter": {"no_such_query": {}}}, ["filter"]),
    ({"text": "paris", "filter": {"term": {"lr_dense": 1}}}, ["all shards failed"]),
    ({"text": "paris", "query": {"match_all": {}}}, ["unknown field", "valid fields"]),
])
def test_bad_body(plugin_client: Any, setup: Any, body: Any, words: list[str]) -> None:
    refused(plugin_client, setup[1], body, 400, *words)
    still_serves(plugin_client, setup[1])


@pytest.mark.parametrize("raw", ["not json", "[1, 2]", "{\"text\": \"paris\""])
def test_malformed_body(plugin_client: Any, setup: Any, raw: str) -> None:
    refused(plugin_client, setup[1], raw, 400, "JSON object")


def test_get_with_a_body(plugin_client: Any, setup: Any) -> None:
    status, answer = plugin_search(plugin_client, setup[1], {"text": "paris tower"}, method="GET")
    assert status == 200 and answer["hits"]["hits"]


def test_model_over_the_memory_bound_is_refused_at_load(plugin_client: Any, setup: Any) -> None:
    bundle, index, _, _ = setup
    plugin_client.cluster.put_settings(body={"transient": {MAX_BYTES: 1000}})
    try:
        with pytest.raises(ConfigError, match=MAX_BYTES) as caught:
            load_plugin_model(plugin_client, bundle, index)
        assert "raise it" in str(caught.value)
        assert not plugin_client.exists(index=MODELS_INDEX, id=f"{bundle.bundle_id}/manifest")
    finally:
        plugin_client.cluster.put_settings(body={"transient": {MAX_BYTES: None}})
    load_plugin_model(plugin_client, bundle, index)
    still_serves(plugin_client, index)


def test_load_while_searching_serves_whole_models(plugin_client: Any, setup: Any) -> None:
    bundle, index, _, _ = setup
    body = {"text": "boundary layer heat transfer", "explain": True}
    status, first = plugin_search(plugin_client, index, body)
    assert status == 200
    answers: list[Any] = []
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set():
            answers.append(plugin_search(plugin_client, index, body))

    threads = [threading.Thread(target=search) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            load_plugin_model(plugin_client, bundle, index)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert len(answers) > 3
    for status, answer in answers:
        assert status == 200, answer
        assert answer["hits"]["hits"] == first["hits"]["hits"]
