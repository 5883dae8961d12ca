"""What an ingest writes never destroys what it did not write: an output path (dead letters,
checkpoint, state directory, summary) that is the corpus, or an existing file that is not
one of the project's own, is refused before anything is opened for writing or the index
is touched; dead letters are appended to, so runs that share a file keep each other's
entries. Every case runs the real command against a real node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ingest_support import (
    Here,
    build_tiny_bundle,
    data_dir,
    dead_letters,
    read_corpus,
    write_jsonl,
)

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("outputs_bundle"))


@pytest.fixture(scope="module")
def adi() -> list[dict[str, Any]]:
    return read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=12)


def _args(corpus: Path, tiny: Path, index: str, url: str, tmp: Path, *extra: str) -> list[str]:
    return [str(corpus), "--bundle", str(tiny), "--index", index, "--url", url,
            "--state-dir", str(tmp / "state"), "--no-progress", *extra]


@pytest.mark.parametrize("option", ["--dead-letter", "--summary-json", "--state-dir"])
def test_an_output_that_is_the_corpus_is_refused_and_the_corpus_kept(
        option: str, tiny: Path, adi: list[dict[str, Any]], os_client: Any,
        opensearch_url: str, index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", adi)
    before = corpus.read_bytes()
    # the corpus named through another spelling of its path
    alias = tmp_path / "sub" / ".." / "c.jsonl"
    (tmp_path / "sub").mkdir()
    args = _args(corpus, tiny, index_name, opensearch_url, tmp_path)
    if option == "--state-dir":
        args[args.index("--state-dir") + 1] = str(alias)
    else:
        args += [option, str(alias)]
    code, (error,) = ingest_here(args)
    assert code == 1
    assert option in error and "corpus" in error
    assert corpus.read_bytes() == before
    assert not os_client.indices.exists(index=index_name)


@pytest.mark.parametrize("option", ["--dead-letter", "--summary-json"])
def test_an_existing_file_that_is_not_ours_is_refused_and_kept(
        option: str, tiny: Path, adi: list[dict[str, Any]], os_client: Any,
        opensearch_url: str, index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [*adi, b"{broken\n"])
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes: do not lose\n")
    code, (error,) = ingest_here(_args(corpus, tiny, index_name, opensearch_url, tmp_path,
                                       option, str(notes)))
    assert code == 1
    assert option in error and str(notes) in error
    assert notes.read_text() == "my notes: do not lose\n"
    assert not os_client.indices.exists(index=index_name)


def test_a_foreign_file_where_the_checkpoint_goes_is_not_overwritten(
        tiny: Path, adi: list[dict[str, Any]], opensearch_url: str, index_name: str,
        tmp_path: Path, ingest_here: Here) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", adi)
    args = _args(corpus, tiny, index_name, opensearch_url, tmp_path)
    code, errors = ingest_here(args)
    assert code == 0, errors
    (checkpoint,) = (tmp_path / "state").glob("*.json")
    checkpoint.write_text("precious, not a checkpoint\n")
    code, (error,) = ingest_here([*args, "--restart"])
    assert code == 1 and str(checkpoint) in error
    assert checkpoint.read_text() == "precious, not a checkpoint\n"


def test_runs_sharing_a_dead_letter_file_keep_each_others_entries(
        tiny: Path, adi: list[dict[str, Any]], opensearch_url: str, index_name: str,
        tmp_path: Path, ingest_here: Here) -> None:
    dead = tmp_path / "shared-dead.jsonl"
    first = write_jsonl(tmp_path / "a.jsonl", [*adi[:6], b"{broken a\n"])
    second = write_jsonl(tmp_path / "b.jsonl", [*adi[6:], b"{broken b\n", b"[1]\n"])
    for corpus in (first, second):
        code, errors = ingest_here(_args(corpus, tiny, index_name, opensearch_url, tmp_path,
                                         "--dead-letter", str(dead)))
        assert code == 3, errors
    by_corpus = sorted((Path(e["corpus"]).name, e["line"]) for e in dead_letters(dead))
    assert by_corpus == [("a.jsonl", 7), ("b.jsonl", 7), ("b.jsonl", 8)]
    # the first again from the start: its own entries are replaced, the other run's stay
    code, errors = ingest_here(_args(first, tiny, index_name, opensearch_url, tmp_path,
                                     "--dead-letter", str(dead), "--restart"))
    assert code == 3, errors
    by_corpus = sorted((Path(e["corpus"]).name, e["line"]) for e in dead_letters(dead))
    assert by_corpus == [("a.jsonl", 7), ("b.jsonl", 7), ("b.jsonl", 8)]


@pytest.mark.parametrize("option", ["--dead-letter", "--summary-json"])
def test_a_directory_as_an_output_file_is_one_line_before_the_index_is_created(
        option: str, tiny: Path, adi: list[dict[str, Any]], os_client: Any,
        opensearch_url: str, index_name: str, tmp_path: Path, ingest_here: Here) -> None:
    corpus = write_jsonl(tmp_path / "c.jsonl", [*adi, b"{broken\n"])
    folder = tmp_path / "out"
    folder.mkdir()
    code, errors = ingest_here(_args(corpus, tiny, index_name, opensearch_url, tmp_path,
                                     option, str(folder)))
    assert code == 1 and len(errors) == 1, errors
    assert option in errors[0] and str(folder) in errors[0] and "directory" in errors[0]
    assert not os_client.indices.exists(index=index_name)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "out"]
    assert not any(folder.iterdir())
