"""When the index itself refuses, nothing is lost: a closed, write-blocked or deleted index
stops the run without dead-lettering documents or advancing the checkpoint; targets that
are not one index (aliases, lists, wildcards) and a default index name that already holds
another corpus are refused before anything is encoded or changed. Every case runs the real
command against a real node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ingest_support import (
    Here,
    build_tiny_bundle,
    checkpoint_indexed,
    data_dir,
    dead_letters,
    index_ids,
    ingest_config,
    read_corpus,
    write_jsonl,
)

from lr_opensearch.errors import IngestError

pytestmark = [pytest.mark.node, pytest.mark.matrix]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("refusals_bundle"))


@pytest.fixture(scope="module")
def adi() -> list[dict[str, Any]]:
    return read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=40)


def _args(corpus: Path, tiny: Path, index: str, url: str, tmp: Path) -> list[str]:
    return [str(corpus), "--bundle", str(tiny), "--index", index, "--url", url,
            "--state-dir", str(tmp / "state"), "--dead-letter", str(tmp / "dead.jsonl"),
            "--no-progress", "--chunk-size", "10"]


def _first_part(tiny: Path, docs: list[dict[str, Any]], index: str, url: str,
                tmp: Path) -> None:
    """The index made by a run over a few documents (another corpus file)."""
    from lr_opensearch.indexing.run import run

    tmp.mkdir(parents=True, exist_ok=True)
    seed = write_jsonl(tmp / "seed.jsonl", docs[:3])
    run(ingest_config(seed, tiny, index, url, tmp / "seed-state"))


@pytest.mark.parametrize("refusal", ["closed", "write_block", "read_only"])
def test_an_index_that_refuses_writes_stops_the_run_and_loses_nothing(
        refusal: str, tiny: Path, adi: list[dict[str, Any]], os_client: Any,
        opensearch_url: str, index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    _first_part(tiny, adi, index_name, opensearch_url, tmp_path)
    block = {"write_block": "index.blocks.write", "read_only": "index.blocks.read_only"}
    if refusal == "closed":
        os_client.indices.close(index=index_name)
    else:
        os_client.indices.put_settings(index=index_name, body={block[refusal]: True})
    corpus = write_jsonl(tmp_path / "c.jsonl", adi[3:30])
    args = _args(corpus, tiny, index_name, opensearch_url, tmp_path)
    code, (error,) = ingest_here(args)
    assert code == 1
    assert index_name in error
    assert ("closed" in error) if refusal == "closed" else ("block" in error or "read" in error)
    assert "--restart" not in error
    assert not [d for d in dead_letters(tmp_path / "dead.jsonl") if d["kind"] == "failed"]
    assert checkpoint_indexed(tmp_path / "state") <= 0
    # put right, the same command indexes every document
    if refusal == "closed":
        os_client.indices.open(index=index_name, wait_for_active_shards=1)
    else:
        os_client.indices.put_settings(index=index_name, body={block[refusal]: False})
    code, errors = ingest_here(args)
    assert code == 0, errors
    assert set(index_ids(os_client, index_name)) == {d["_id"] for d in adi[:30]}


def test_a_write_block_set_mid_run_stops_it_at_the_last_acknowledged_chunk(
        tiny: Path, adi: list[dict[str, Any]], os_client: Any, opensearch_url: str,
        index_name: str, tmp_path: Path) -> None:
    """The block arrives while documents are being encoded: the writer's next chunk meets it."""
    from lr_opensearch.indexing.run import run

    config, encoder = _changed_mid_run(tiny, adi, os_client, opensearch_url, index_name,
                                       tmp_path, settings={"index.blocks.write": True})
    with pytest.raises(IngestError, match="index.blocks.write|blocked") as info:
        run(config, encoder=encoder)
    assert index_name in str(info.value) and "--restart" not in str(info.value)
    before = checkpoint_indexed(tmp_path / "state")
    assert 0 <= before < 40
    os_client.indices.put_settings(index=index_name, body={"index.blocks.write": False})
    summary = run(config)
    assert summary.resumed_from_line == before
    assert summary.counts.indexed == 40 and summary.counts.failed == 0
    assert set(index_ids(os_client, index_name)) == {d["_id"] for d in adi[:40]}


def test_an_index_deleted_mid_run_stops_it_instead_of_filling_an_auto_created_one(
        tiny: Path, adi: list[dict[str, Any]], os_client: Any, opensearch_url: str,
        index_name: str, tmp_path: Path) -> None:
    from lr_opensearch.indexing.run import run

    config, encoder = _changed_mid_run(tiny, adi, os_client, opensearch_url, index_name,
                                       tmp_path, delete=True)
    with pytest.raises(IngestError, match="deleted") as info:
        run(config, encoder=encoder)
    assert index_name in str(info.value) and "--restart" in str(info.value)


def _changed_mid_run(tiny: Path, adi: list[dict[str, Any]], client: Any, url: str, index: str,
                     tmp: Path, **change: Any) -> tuple[Any, BlockingEncoder]:
    """A 40-document run in chunks of 5 and an encoder that changes the index after 3
    batches (``change``: BlockingEncoder's ``settings`` or ``delete``)."""
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.model import DocEncoder

    corpus = write_jsonl(tmp / "c.jsonl", adi[:40])
    config = ingest_config(corpus, tiny, index, url, tmp / "state", batch_size=5,
                           chunk_size=5, sort_window=5, queue_chunks=1)
    encoder = BlockingEncoder(DocEncoder.from_bundle(load_bundle(tiny)), client, index,
                              after_batches=3, **change)
    return config, encoder


class BlockingEncoder:
    """A real document encoder that, after ``after_batches`` batches, changes the index the
    way an operator would mid-run (a setting, or deleting it), then encodes on."""

    def __init__(self, inner: Any, client: Any, index: str, *, after_batches: int,
                 settings: dict[str, Any] | None = None, delete: bool = False) -> None:
        self.inner, self.client, self.index = inner, client, index
        self.after, self.settings, self.delete, self.calls = after_batches, settings, delete, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def encode(self, texts: list[str]) -> Any:
        self.calls += 1
        if self.calls == self.after:
            if self.delete:
                self.client.indices.delete(index=self.index)
            else:
                self.client.indices.put_settings(index=self.index, body=self.settings)
        return self.inner.encode(texts)


@pytest.mark.parametrize("target", ["alias", "list", "wildcard"])
def test_an_ingest_target_that_is_not_one_index_is_refused_before_anything_changes(
        target: str, tiny: Path, adi: list[dict[str, Any]], os_client: Any,
        opensearch_url: str, index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    other = f"{index_name}-b"
    _first_part(tiny, adi, index_name, opensearch_url, tmp_path)
    _first_part(tiny, adi, other, opensearch_url, tmp_path / "b")
    try:
        os_client.indices.put_settings(index=other, body={"index.refresh_interval": "7s",
                                                          "index.number_of_replicas": 0})
        os_client.indices.put_alias(index=f"{index_name},{other}", name=f"{index_name}-all")
        name = {"alias": f"{index_name}-all", "list": f"{index_name},{other}",
                "wildcard": f"{index_name}*"}[target]
        corpus = write_jsonl(tmp_path / "c.jsonl", adi[3:10])
        code, (error,) = ingest_here(_args(corpus, tiny, name, opensearch_url, tmp_path))
        assert code == 1
        assert name in error and "--index" in error
        settings = os_client.indices.get_settings(index=other)[other]["settings"]["index"]
        assert settings["refresh_interval"] == "7s" and settings["number_of_replicas"] == "0"
        assert len(index_ids(os_client, index_name)) == len(index_ids(os_client, other)) == 3
    finally:
        os_client.indices.delete(index=other, ignore_unavailable=True)


def test_a_default_index_name_never_takes_another_corpus(
        tiny: Path, adi: list[dict[str, Any]], os_client: Any, opensearch_url: str,
        index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    """``d1/x.jsonl`` then ``d2/x.jsonl`` without --index: the same default name, two corpora.
    The second is refused (nothing written); naming the index is how to ask for it."""
    first = write_jsonl((tmp_path / "d1").mkdir() or tmp_path / "d1" / f"{index_name}.jsonl",
                        adi[:5])
    clash = [{**d, "text": "another corpus entirely"} for d in adi[:5]]
    second = write_jsonl((tmp_path / "d2").mkdir() or tmp_path / "d2" / f"{index_name}.jsonl",
                         clash)
    env = {"LR_BUNDLE": str(tiny)}
    base = ["--url", opensearch_url, "--state-dir", str(tmp_path / "state"), "--no-progress"]
    code, errors = ingest_here([str(first), *base], env=env)
    assert code == 0, errors
    code, errors = ingest_here([str(first), *base, "--restart"])  # the same corpus: fine
    assert code == 0, errors
    code, (error,) = ingest_here([str(second), *base])
    assert code == 1
    assert str(first) in error and str(second) in error and "--index" in error
    os_client.indices.refresh(index=index_name)
    texts = {h["_source"]["text"] for h in os_client.search(
        index=index_name, body={"query": {"match_all": {}}, "size": 10})["hits"]["hits"]}
    assert "another corpus entirely" not in texts
    # asked for by name, the second corpus goes in
    code, errors = ingest_here([str(second), *base, "--index", index_name])
    assert code == 0, errors


def test_an_index_whose_meta_claims_lightretriever_without_vector_fields_is_refused(
        tiny: Path, adi: list[dict[str, Any]], os_client: Any, opensearch_url: str,
        index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    from lr_opensearch.bundle import load_bundle

    meta = {"lightretriever": {"bundle_id": load_bundle(tiny).bundle_id, "dense_dim": 32,
                               "key_encoding": load_bundle(tiny).config.key_encoding}}
    os_client.indices.create(index=index_name, body={"mappings": {
        "_meta": meta, "properties": {"text": {"type": "text"}}}})
    corpus = write_jsonl(tmp_path / "c.jsonl", adi[:5])
    code, (error,) = ingest_here(_args(corpus, tiny, index_name, opensearch_url, tmp_path))
    assert code == 1
    assert index_name in error and "lr_dense" in error
    assert os_client.count(index=index_name)["count"] == 0


@pytest.mark.parametrize("bad", [["--timeout", "0"], ["--timeout", "-1"],
                                 ["--state-dir", "/proc/nope"]])
def test_a_bad_option_is_one_line_and_creates_nothing(
        bad: list[str], tiny: Path, adi: list[dict[str, Any]], os_client: Any,
        opensearch_url: str, index_name: str, tmp_path: Path, ingest_here: Here,
        capsys: pytest.CaptureFixture[str]) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", adi[:3])
    args = [str(corpus), "--bundle", str(tiny), "--index", index_name, "--url",
            opensearch_url, "--no-progress",
            *(["--state-dir", str(tmp_path / "s")] if "--state-dir" not in bad else []), *bad]
    try:
        code, errors = ingest_here(args)
    except SystemExit as exc:  # argparse: usage and one error line on stderr
        code, errors = int(str(exc.code)), capsys.readouterr().err.strip().splitlines()[-1:]
    assert code in (1, 2)
    (error,) = errors
    assert bad[0] in error
    assert not os_client.indices.exists(index=index_name)


def test_an_empty_corpus_says_so(tiny: Path, os_client: Any, opensearch_url: str,
                                 index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    corpus = tmp_path / "empty.jsonl"
    corpus.write_bytes(b"\n\n")
    code, (error,) = ingest_here([str(corpus), "--bundle", str(tiny), "--index", index_name,
                                  "--url", opensearch_url, "--no-progress", "--state-dir",
                                  str(tmp_path / "s")])
    assert code == 1
    assert str(corpus) in error and "no documents" in error
    assert not os_client.indices.exists(index=index_name)
