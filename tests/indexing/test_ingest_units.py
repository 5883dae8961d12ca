"""Unit tests of the ingest worker's parts that need no node and no model: reader and
validation, worker split, watermark, checkpoint file, dead-letter file, retry policy."""

from __future__ import annotations

import gzip
import json
import random
import threading
from pathlib import Path

import pytest

from lr_opensearch.errors import ConfigError, IngestError
from lr_opensearch.indexing import gzstream
from lr_opensearch.indexing import reader as rd
from lr_opensearch.indexing.checkpoint import (
    FAILED,
    INDEXED,
    SKIPPED,
    CheckpointFile,
    CheckpointKey,
    CheckpointState,
    Counts,
    Watermark,
)
from lr_opensearch.indexing.config import IngestConfig, RetryPolicy
from lr_opensearch.indexing.report import DeadLetter
from lr_opensearch.indexing.writer import failure_reason, is_retryable

GOOD = [{"_id": f"d{i}", "title": f"T{i}", "text": f"text number {i}"} for i in range(6)]


def write_lines(path: Path, lines: list[bytes], gz: bool = False) -> Path:
    data = b"".join(lines)
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def jl(obj: object) -> bytes:
    return (json.dumps(obj) + "\n").encode("utf-8")


def items(path: Path, **kw: object) -> list[rd.Item]:
    return list(rd.CorpusReader(str(path), **kw))  # type: ignore[arg-type]


@pytest.mark.parametrize("gz", [False, True])
def test_reader_yields_records_with_line_numbers_and_offsets(tmp_path: Path, gz: bool) -> None:
    lines = [jl(d) for d in GOOD]
    path = write_lines(tmp_path / ("c.jsonl.gz" if gz else "c.jsonl"), lines, gz)
    got = items(path)
    assert [type(x) for x in got] == [rd.Record] * 6
    assert [x.line for x in got] == [1, 2, 3, 4, 5, 6]
    ends = [sum(len(x) for x in lines[: i + 1]) for i in range(6)]
    assert [x.end_offset for x in got] == ends
    assert got[2].id == "d2" and got[2].title == "T2" and got[2].text == "text number 2"
    assert got[2].encoder_text() == "T2 text number 2"


def test_reader_bad_input_each_reported_with_reason(tmp_path: Path) -> None:
    lines = [
        jl({"_id": "a", "title": "A", "text": "alpha"}),             # 1 ok
        b'{"_id": "b", "text": "unterminated\n',                     # 2 malformed
        jl({"title": "no id", "text": "x"}),                         # 3 missing id
        jl({"_id": "a", "title": "A again", "text": "dup"}),         # 4 duplicate
        jl({"_id": "c", "title": "", "text": ""}),                   # 5 empty
        jl({"_id": "d", "title": "Title only", "text": ""}),         # 6 title-only: ok
        b'{"_id": "e", "text": "caf\xe9"}\n',                        # 7 latin-1 byte
        b"\n",                                                       # 8 blank: ignored
        jl([1, 2]),                                                  # 9 not an object
        jl({"_id": {"x": 1}, "text": "t"}),                          # 10 invalid id
        jl({"_id": "f", "text": 5}),                                 # 11 invalid field
        jl({"id": 7, "text": "int id", "lang": "en", "metadata": {"year": 1999}}),  # 12 ok
    ]
    got = items(write_lines(tmp_path / "bad.jsonl", lines))
    by_line = {x.line: x for x in got}
    assert len(got) == 12
    expect = {2: rd.MALFORMED_JSON, 3: rd.MISSING_ID, 4: rd.DUPLICATE_ID, 5: rd.EMPTY_DOCUMENT,
              7: rd.INVALID_UTF8, 9: rd.NOT_AN_OBJECT, 10: rd.INVALID_ID, 11: rd.INVALID_FIELD}
    for line, reason in expect.items():
        item = by_line[line]
        assert isinstance(item, rd.Rejection), line
        assert item.reason == reason and item.message
    assert by_line[4].id == "a" and "already appeared" in by_line[4].message
    assert isinstance(by_line[8], rd.Foreign)
    title_only = by_line[6]
    assert isinstance(title_only, rd.Record) and title_only.title_only
    assert title_only.encoder_text() == "Title only"
    rec = by_line[12]
    assert isinstance(rec, rd.Record) and rec.id == "7"
    assert rec.metadata == {"year": 1999, "lang": "en"}


def test_first_valid_occurrence_wins_duplicates(tmp_path: Path) -> None:
    lines = [jl({"_id": "x", "text": ""}), jl({"_id": "x", "text": "real"}),
             jl({"_id": "x", "text": "third"})]
    got = items(write_lines(tmp_path / "c.jsonl", lines))
    assert [getattr(x, "reason", "ok") for x in got] == [rd.EMPTY_DOCUMENT, "ok", rd.DUPLICATE_ID]


def test_worker_split_partitions_every_line_exactly_once(tmp_path: Path) -> None:
    lines = [jl({"_id": f"id-{i}", "text": "t"}) for i in range(200)]
    lines[17] = b"garbage\n"
    lines[40] = jl({"_id": "id-3", "text": "duplicate of line 4"})
    path = write_lines(tmp_path / "c.jsonl", lines)
    owners: dict[int, int] = {}
    for k in range(3):
        for x in items(path, worker=(k, 3)):
            if not isinstance(x, rd.Foreign):
                assert x.line not in owners, "a line handled by two workers"
                owners[x.line] = k
    assert sorted(owners) == list(range(1, 201))
    # the duplicate is detected by the worker that owns the id, whatever the split
    dup_owner = rd.worker_of("id-3", 3)
    dup = [x for x in items(path, worker=(dup_owner, 3)) if x.line == 41]
    assert isinstance(dup[0], rd.Rejection) and dup[0].reason == rd.DUPLICATE_ID


def test_resume_skips_prefix_keeps_duplicate_memory_and_detects_changes(tmp_path: Path) -> None:
    lines = [jl(d) for d in GOOD] + [jl({"_id": "d1", "text": "dup of line 2"})]
    path = write_lines(tmp_path / "c.jsonl", lines)
    full = items(path)
    got = items(path, resume_line=3, resume_offset=full[2].end_offset)
    assert [x.line for x in got] == [4, 5, 6, 7]
    assert isinstance(got[-1], rd.Rejection) and got[-1].reason == rd.DUPLICATE_ID
    with pytest.raises(IngestError, match="corpus changed"):
        items(path, resume_line=3, resume_offset=full[2].end_offset + 1)
    with pytest.raises(IngestError, match="checkpoint is at line 99"):
        items(path, resume_line=99, resume_offset=5)


def test_count_lines_and_gzip_detection(tmp_path: Path) -> None:
    p = write_lines(tmp_path / "a.jsonl", [b"1\n", b"2\n", b"3"])
    assert gzstream.count_lines(str(p)) == 3 and not gzstream.is_gzip(str(p))
    g = write_lines(tmp_path / "named-plain.jsonl", [b"x\n"], gz=True)
    assert gzstream.is_gzip(str(g))
    assert gzstream.count_lines(str(write_lines(tmp_path / "e.jsonl", []))) == 0


def test_watermark_commits_only_the_settled_prefix() -> None:
    wm = Watermark()
    wm.register(1, 10)
    wm.register(2, 20, SKIPPED, reason=rd.MALFORMED_JSON)
    wm.passed(3, 30)                 # another worker's line
    wm.register(4, 40)
    wm.register(5, 50)
    wm.settle(4, INDEXED, truncated=True)
    assert not wm.advance() and (wm.line, wm.offset) == (0, 0)
    wm.settle(1, INDEXED)
    # 1 and 2 settled, 3 is another worker's, 4 settled, 5 pending: the prefix ends at 4
    assert wm.advance() and (wm.line, wm.offset) == (4, 40)
    wm.settle(5, FAILED, reason="mapper_parsing_exception")
    wm.passed(6, 60)
    assert wm.advance() and (wm.line, wm.offset) == (6, 60)
    line, offset, c = wm.snapshot()
    assert (c.read, c.indexed, c.failed, c.skipped, c.truncated) == (4, 2, 1, 1, 1)
    assert c.reasons == {rd.MALFORMED_JSON: 1, "mapper_parsing_exception": 1}


def test_watermark_random_out_of_order_acks_never_pass_a_pending_line() -> None:
    rng = random.Random(0)
    wm = Watermark()
    lines = list(range(1, 301))
    for n in lines:
        wm.register(n, n * 10)
    order = lines[:]
    rng.shuffle(order)
    settled: set[int] = set()
    for n in order:
        wm.settle(n, INDEXED)
        settled.add(n)
        wm.advance()
        assert all(m in settled for m in range(1, wm.line + 1))
        assert wm.line + 1 not in settled or wm.line == 300
    assert wm.line == 300 and wm.committed.indexed == 300 and wm.pending == 0


def test_watermark_is_thread_safe() -> None:
    wm = Watermark()
    n = 2000
    for i in range(1, n + 1):
        wm.register(i, i)

    def settle(part: int) -> None:
        for i in range(1 + part, n + 1, 4):
            wm.settle(i, INDEXED)
            wm.advance()

    threads = [threading.Thread(target=settle, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wm.advance()
    assert wm.line == n and wm.committed.indexed == n


def test_checkpoint_file_roundtrip_atomic_and_keyed(tmp_path: Path) -> None:
    corpus = write_lines(tmp_path / "c.jsonl", [jl(GOOD[0])])
    key = CheckpointKey.for_run(str(corpus), "idx", "bundle1", 0, 1)
    ck = CheckpointFile(tmp_path / "state" / f"{key.stem()}.json", key)
    assert ck.load() is None
    state = CheckpointState(key, line=5, offset=99, counts=Counts(5, 3, 1, 1, reasons={"x": 1}),
                            original_settings={"refresh_interval": None})
    ck.save(state)
    back = ck.load()
    assert back is not None and (back.line, back.offset) == (5, 99)
    assert back.counts == state.counts and back.original_settings == {"refresh_interval": None}
    assert [p.name for p in ck.path.parent.iterdir()] == [ck.path.name]  # no temp file left
    # another split, index or bundle is another file
    other = CheckpointKey.for_run(str(corpus), "idx", "bundle1", 1, 2)
    assert other.stem() != key.stem()
    wrong = CheckpointFile(ck.path, other)
    with pytest.raises(IngestError, match="another run"):
        wrong.load()
    ck.path.write_text("{torn")
    with pytest.raises(IngestError, match="unreadable"):
        ck.load()


def test_dead_letter_keeps_only_entries_up_to_the_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "dl.jsonl"
    dl = DeadLetter(path, corpus="c", index="i", keep_through_line=0)
    for line in (3, 9, 5):
        dl.add(line=line, doc_id=f"d{line}", kind=SKIPPED, reason="r", message="m")
    dl.close()
    with open(path, "a") as f:
        f.write('{"line": 4, "id"')  # torn last line of a killed run
    dl = DeadLetter(path, corpus="c", index="i", keep_through_line=5)
    dl.close()
    kept = [json.loads(x) for x in path.read_text().splitlines()]
    assert sorted(e["line"] for e in kept) == [3, 5]
    assert dl.entries == 2
    DeadLetter(path, corpus="c", index="i", keep_through_line=0).close()
    assert path.read_text() == ""


def test_retry_policy_and_classification() -> None:
    p = RetryPolicy(max_attempts=5, initial_backoff=0.5, max_backoff=3.0, jitter=0.5)
    assert p.delay(1, 0.0) == 0.5 and p.delay(2, 0.0) == 1.0 and p.delay(10, 0.0) == 3.0
    assert p.delay(2, 0.999) == pytest.approx(0.5005)
    assert is_retryable(429) and is_retryable(503) and is_retryable("N/A")
    assert not is_retryable(400) and not is_retryable(409)
    kind, msg = failure_reason({"status": 400, "error": {
        "type": "mapper_parsing_exception", "reason": "failed to parse",
        "caused_by": {"type": "illegal_argument_exception", "reason": "bad value"}}})
    assert kind == "mapper_parsing_exception" and "bad value" in msg
    with pytest.raises(ConfigError):
        RetryPolicy(max_attempts=0)


def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="worker_id"):
        IngestConfig(corpus="c", bundle="b", index="i", workers=2, worker_id=2)
    with pytest.raises(ConfigError, match="index name"):
        IngestConfig(corpus="c", bundle="b", index="Bad")
    with pytest.raises(ConfigError, match="sort_window"):
        IngestConfig(corpus="c", bundle="b", index="i", batch_size=64, sort_window=8)


def test_cli_arguments_become_a_config_and_lr_ingest_registers() -> None:
    import argparse

    from ingest import cli

    args = cli.parse_args(["c.jsonl", "--bundle", "b", "--index", "idx", "--workers", "3",
                           "--worker-id", "2", "--replicas", "1", "-q"])
    config = cli.config_from_args(args)
    assert config.split == (2, 3) and not config.progress
    # a worker of several does not touch the index settings unless asked to
    assert not config.bulk_settings.enabled and config.bulk_settings.replicas == 1
    single = cli.config_from_args(cli.parse_args(["c.jsonl", "--bundle", "b", "--index", "idx"]))
    assert single.bulk_settings.enabled and single.split == (0, 1)
    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    lr_args = parser.parse_args(["ingest", "c.jsonl", "--bundle", "b", "--index", "idx"])
    assert lr_args.func is not None and cli.config_from_args(lr_args).index == "idx"
    with pytest.raises(ConfigError):
        cli.config_from_args(cli.parse_args(["c", "--bundle", "b", "--index", "i",
                                             "--worker-id", "1"]))


def test_one_live_run_per_checkpoint(tmp_path: Path) -> None:
    corpus = write_lines(tmp_path / "c.jsonl", [jl(GOOD[0])])
    key = CheckpointKey.for_run(str(corpus), "idx", "b", 0, 1)
    ck = CheckpointFile(tmp_path / "state" / f"{key.stem()}.json", key)
    with ck.exclusive():
        with pytest.raises(IngestError, match="already running"):
            with CheckpointFile(ck.path, key).exclusive():
                pass
    with ck.exclusive():  # released after the first run
        pass


def test_file_position_counts_compressed_bytes_for_gzip(tmp_path: Path) -> None:
    lines = [jl({"_id": f"d{i}", "text": "word " * 50}) for i in range(200)]
    path = write_lines(tmp_path / "c.jsonl.gz", lines, gz=True)
    reader = rd.CorpusReader(str(path))
    positions = [reader.file_position() for _ in reader]
    size = path.stat().st_size
    assert positions == sorted(positions) and all(p <= size for p in positions)
    assert reader.file_position() == size  # after the end: the whole file, not decoded bytes
    assert reader.bytes_read == sum(len(x) for x in lines) > size
