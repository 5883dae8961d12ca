"""``python -m ingest.bulk CORPUS`` with no other flag: the bundle from the local store
(built once, fitted on the corpus), the index named after the file, the search command
printed; explicit flags and LR_BUNDLE / LR_INDEX win; a bundle is found again by its id."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from ingest_support import build_tiny_bundle, data_dir, ingest_cli, read_corpus, write_jsonl
from model_fixtures import save_model_dir, tiny_bert

from lr_opensearch.bundle import load_bundle
from lr_opensearch.bundle.store import find_bundle, store_dir
from lr_opensearch.errors import ConfigError
from lr_opensearch.indexing.defaults import default_index_name


@pytest.mark.parametrize(("corpus", "index"), [
    ("data/scifact/corpus.jsonl.gz", "scifact-corpus"),
    ("My Docs.JSONL", "my-docs"),
    ("_private+notes.json", "private-notes"),
    ("...jsonl", "corpus"),
])
def test_the_default_index_name_is_a_valid_name_from_the_file(corpus: str, index: str) -> None:
    assert default_index_name(corpus) == index
    with pytest.raises(ConfigError, match="--index"):
        default_index_name("-")


def test_find_bundle_by_id_in_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = build_tiny_bundle(tmp_path, seed=0), build_tiny_bundle(tmp_path, seed=1)
    (tmp_path / "not-a-bundle").mkdir()
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "lightretriever.json").write_text("{not json")
    monkeypatch.setenv("LR_BUNDLE_STORE", str(tmp_path))
    assert store_dir() == tmp_path
    assert find_bundle(load_bundle(a).bundle_id) == a
    assert find_bundle(load_bundle(b).bundle_id, store=tmp_path) == b
    assert find_bundle("0" * 32) is None
    assert find_bundle(load_bundle(a).bundle_id, store=tmp_path / "absent") is None


@pytest.mark.node
def test_zero_config_ingest_builds_once_names_the_index_and_says_how_to_search(
        os_client: Any, opensearch_url: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model, tok = tiny_bert(seed=3, pooling="mean")
    model_dir = save_model_dir(model, tok, tmp_path / "model")
    store = tmp_path / "store"
    corpus = write_jsonl(tmp_path / "My Corpus.jsonl",
                         read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=30))
    env = {"LR_DEFAULT_MODEL": str(model_dir), "LR_BUNDLE_STORE": str(store),
           "LR_OPENSEARCH_URL": opensearch_url, "LR_INGEST_STATE_DIR": str(tmp_path / "state")}
    for name in ("LR_BUNDLE", "LR_INDEX"):
        monkeypatch.delenv(name, raising=False)
    try:
        first = ingest_cli([str(corpus)], env=env)
        assert first.returncode == 0, first.stderr.decode()[-3000:]
        (bundle,) = [p for p in store.iterdir() if (p / "lightretriever.json").is_file()]
        assert load_bundle(bundle).fit  # fitted on this corpus
        assert b"building bundle" in first.stderr
        line = [x for x in first.stdout.decode().splitlines() if "lr search" in x][-1]
        assert f"lr search --index my-corpus --bundle {bundle}" in line
        os_client.indices.refresh(index="my-corpus")
        assert os_client.count(index="my-corpus")["count"] == 30
        meta = os_client.indices.get_mapping(index="my-corpus")["my-corpus"]["mappings"]["_meta"]
        assert find_bundle(meta["lightretriever"]["bundle_id"], store=store) == bundle
        # the environment names the index; the bundle is reused, not built again
        second = ingest_cli([str(corpus)], env={**env, "LR_INDEX": "lr-zero-env"})
        assert second.returncode == 0, second.stderr.decode()[-3000:]
        assert b"reusing bundle" in second.stderr and b"building bundle" not in second.stderr
        assert len([p for p in store.iterdir() if p.is_dir()]) == 1
        # an explicit flag wins over the environment
        third = ingest_cli([str(corpus), "--index", "lr-zero-flag", "--bundle", str(bundle)],
                           env={**env, "LR_INDEX": "lr-zero-env", "LR_BUNDLE": "/nonexistent"})
        assert third.returncode == 0, third.stderr.decode()[-3000:]
        for index in ("lr-zero-env", "lr-zero-flag"):
            os_client.indices.refresh(index=index)
            assert os_client.count(index=index)["count"] == 30
        summary = json.dumps(os_client.indices.get_mapping(index="lr-zero-flag"))
        assert "lightretriever" in summary
    finally:
        for index in ("my-corpus", "lr-zero-env", "lr-zero-flag"):
            os_client.indices.delete(index=index, ignore_unavailable=True)


@pytest.mark.slow
@pytest.mark.node
def test_zero_config_with_the_packaged_minilm(os_client: Any, opensearch_url: str,
                                              tmp_path: Path) -> None:
    """The real default: the packaged MiniLM fitted on a small corpus (minutes on a CPU)."""
    corpus = write_jsonl(tmp_path / "adi-small.jsonl",
                         read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=40))
    env = {"LR_BUNDLE_STORE": str(tmp_path / "store"), "LR_OPENSEARCH_URL": opensearch_url,
           "LR_INGEST_STATE_DIR": str(tmp_path / "state"), "LR_DEFAULT_MODEL": ""}
    try:
        proc = ingest_cli([str(corpus)], env=env, timeout=1800)
        assert proc.returncode == 0, proc.stderr.decode()[-3000:]
        assert b"lr search --index adi-small --bundle" in proc.stdout
        (bundle,) = list((tmp_path / "store").iterdir())
        assert "all-MiniLM-L6-v2" in load_bundle(bundle).config.backbone_name
        os_client.indices.refresh(index="adi-small")
        assert os_client.count(index="adi-small")["count"] == 40
    finally:
        os_client.indices.delete(index="adi-small", ignore_unavailable=True)
