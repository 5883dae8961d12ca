"""The corpus reader on inputs a careless or hostile user gives it (no node, no model):
a cut ``.gz``, a UTF-8 BOM, a field both at the top level and in ``metadata``, broken
lines whose id is still readable."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lr_opensearch.errors import CorpusError
from lr_opensearch.indexing import reader as rd


def jl(obj: object) -> bytes:
    return (json.dumps(obj) + "\n").encode("utf-8")


def items(path: Path, **kw: object) -> list[rd.Item]:
    return list(rd.CorpusReader(str(path), **kw))  # type: ignore[arg-type]


def cut_gzip(path: Path, n: int, keep: float) -> Path:
    """n documents gzipped, then only the first ``keep`` share of the compressed bytes."""
    data = gzip.compress(b"".join(jl({"_id": f"d{i}", "text": f"document {i} " * 20})
                                  for i in range(n)))
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def test_a_cut_gzip_gives_the_readable_lines_then_one_truncation(tmp_path: Path) -> None:
    path = cut_gzip(tmp_path / "c.jsonl.gz", 400, 0.6)
    got = items(path, report_truncation=True)
    records, last = got[:-1], got[-1]
    assert records and all(isinstance(x, rd.Record) for x in records)
    assert [x.line for x in records] == list(range(1, len(records) + 1))
    assert 100 < len(records) < 400
    assert isinstance(last, rd.Truncation)
    assert last.line == len(records) + 1 and last.end_offset == records[-1].end_offset
    assert 0 < last.file_position <= path.stat().st_size
    assert str(path) in last.message and f"line {last.line}" in last.message
    # resuming inside the readable part meets the same end, at the same place
    again = items(path, resume_line=10, resume_offset=records[9].end_offset,
                  report_truncation=True)
    assert isinstance(again[-1], rd.Truncation) and again[-1].line == last.line
    assert len(again) == len(got) - 10
    # a reader not asked for the Truncation item raises, after the same readable lines
    seen = []
    with pytest.raises(CorpusError, match="cut short"):
        seen.extend(rd.CorpusReader(str(path)))
    assert len(seen) == len(records)


def test_corrupt_gzip_data_is_a_truncation_too(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(b"".join(jl({"_id": f"d{i}", "text": "x " * 30})
                                            for i in range(300))))
    data[len(data) // 2: len(data) // 2 + 40] = b"\x00" * 40
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(bytes(data))
    last = items(path, report_truncation=True)[-1]
    assert isinstance(last, rd.Truncation) and str(path) in last.message


def test_a_utf8_bom_on_the_first_line_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    lines = [b"\xef\xbb\xbf" + jl({"_id": "a", "text": "alpha"}), jl({"_id": "b", "text": "beta"})]
    path.write_bytes(b"".join(lines))
    got = items(path)
    assert [type(x) for x in got] == [rd.Record, rd.Record]
    assert got[0].id == "a" and got[0].end_offset == len(lines[0])


def test_a_bom_later_in_the_file_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bom2.jsonl"
    path.write_bytes(jl({"_id": "a", "text": "alpha"}) + b"\xef\xbb\xbf" + jl({"_id": "b", "text": "b"}))
    got = items(path)
    assert isinstance(got[1], rd.Rejection) and got[1].reason == rd.MALFORMED_JSON


def test_a_field_both_top_level_and_in_metadata_is_refused_unless_equal(tmp_path: Path) -> None:
    path = tmp_path / "meta.jsonl"
    path.write_bytes(b"".join([
        jl({"_id": "clash", "text": "t", "year": 2000, "metadata": {"year": 1999}}),
        jl({"_id": "same", "text": "t", "year": 1999, "metadata": {"year": 1999}}),
        jl({"_id": "apart", "text": "t", "lang": "en", "metadata": {"year": 1999}}),
    ]))
    clash, same, apart = items(path)
    assert isinstance(clash, rd.Rejection) and clash.reason == rd.CONFLICTING_FIELD
    assert clash.id == "clash" and "'year'" in clash.message and "metadata" in clash.message
    assert isinstance(same, rd.Record) and same.metadata == {"year": 1999}
    assert isinstance(apart, rd.Record) and apart.metadata == {"year": 1999, "lang": "en"}


@pytest.mark.parametrize(("raw", "want"), [
    (b'{"_id": "b", "text": "unterminated\n', "b"),
    (b'{"_id": "e", "text": "caf\xe9"}\n', "e"),
    (b'{"title": "t", "id": 42, "text": \n', "42"),
    (b'{"_id": "esc\\"aped", "text": \n', 'esc"aped'),
    (b'{"text": "no id at all"\n', None),
])
def test_a_broken_line_keeps_its_id_when_it_is_readable(tmp_path: Path, raw: bytes,
                                                        want: str | None) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(raw)
    (item,) = items(path)
    assert isinstance(item, rd.Rejection) and item.id == want


def test_corrupt_gzip_gives_every_line_before_the_damage_and_names_where_it_starts(
        tmp_path: Path) -> None:
    # a small file (one read of the compressed stream): the damage must not take the lines
    # before it along, and the position named is where the damage is, not the end of file
    plain = b"".join(jl({"_id": f"d{i}", "text": f"document {i} about topic {i * 7}"})
                     for i in range(60))
    data = bytearray(gzip.compress(plain, mtime=0))
    at = len(data) * 2 // 3
    data[at: at + 24] = bytes(range(24, 48))
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(bytes(data))
    got = items(path, report_truncation=True)
    last = got[-1]
    assert isinstance(last, rd.Truncation)
    # deflate finds damage late (at worst at the member's checksum): the lines decoded just
    # before may be garbled, but every line before the damaged bytes comes through intact
    intact = [x.id for x in got[:20] if isinstance(x, rd.Record)]
    assert intact == [f"d{i}" for i in range(20)], got[:20]
    assert last.file_position <= at + 24 < len(data)
    assert f"byte {last.file_position}" in last.message


def test_a_lone_surrogate_escape_is_one_rejection_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_bytes(jl({"_id": "a", "text": "fine"})
                     + b'{"_id": "b", "text": "broken \\udc80 here"}\n'
                     + b'{"_id": "c\\ud800", "text": "bad id"}\n'
                     + b'{"_id": "d", "text": "ok", "metadata": {"k": "\\udfff"}}\n'
                     + b'{"_id": "e", "text": "a pair \\ud83d\\ude00 is fine"}\n')
    got = items(path)
    assert [type(x).__name__ for x in got] == ["Record", "Rejection", "Rejection", "Rejection",
                                               "Record"]
    for bad in got[1:4]:
        assert isinstance(bad, rd.Rejection) and bad.reason == rd.INVALID_TEXT
        assert "surrogate" in bad.message
    assert isinstance(got[4], rd.Record) and "\U0001f600" in got[4].text


def test_a_deeply_nested_line_is_one_rejection_and_the_next_line_is_read(
        tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    deep = b'{"_id": "deep", "text": "x", "m": ' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    path.write_bytes(deep + jl({"_id": "after", "text": "still read"}))
    got = items(path)
    assert isinstance(got[0], rd.Rejection) and got[0].reason == rd.MALFORMED_JSON
    assert "nested" in got[0].message and got[0].id == "deep"
    assert isinstance(got[1], rd.Record) and got[1].id == "after"


@pytest.mark.parametrize("compressed", [True, False])
def test_stdin_is_read_as_a_file_is_gzip_or_not(compressed: bool,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    plain = b"".join(jl({"_id": f"d{i}", "text": f"document {i}"}) for i in range(50))
    payload = gzip.compress(plain) if compressed else plain
    stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO(payload)))
    monkeypatch.setattr(sys, "stdin", stdin)
    got = items(Path("-"))
    assert [x.id for x in got if isinstance(x, rd.Record)] == [f"d{i}" for i in range(50)]
    assert len(got) == 50 and got[-1].end_offset == len(plain)
    assert not stdin.buffer.closed  # stdin is the process's, not the reader's to close


UNREADABLE = {rd.INVALID_UTF8, rd.MALFORMED_JSON, rd.NOT_AN_OBJECT, rd.INVALID_TEXT}


def _damaged(tmp_path: Path, lines: list[bytes], pick: str) -> tuple[Path, int]:
    """The lines gzipped, with one byte flipped from the middle on: the first flip whose
    damage zlib finds only at the member's checksum (``pick="checksum"``) or by a decoding
    error within 8 KB of it (``"early"``). Returns the file and the flipped byte."""
    import zlib

    data = gzip.compress(b"".join(lines), mtime=0)
    mid = len(data) // 2
    intact = zlib.decompressobj(wbits=31)
    intact.decompress(data[:mid])  # the part before every flip, decoded once
    for at in range(mid, mid + 4000, 7):
        bad = data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1:]
        if _failure(intact.copy(), bad, mid, at, to_end=pick == "checksum") == pick:
            path = tmp_path / f"{pick}.jsonl.gz"
            path.write_bytes(bad)
            return path, at
    raise AssertionError(f"no flip of a byte gave a {pick} failure")


def _failure(d: Any, data: bytes, fed: int, at: int, *, to_end: bool) -> str | None:
    """How zlib finds the damage at byte ``at`` of a one-member gzip (``d`` has decoded
    ``data[:fed]``): "early" (decoding stops within 8 KB of it), "checksum" (only the
    trailer's CRC32 / size disagree; looked for when ``to_end``), None (neither)."""
    import zlib

    try:
        d.decompress(data[fed:at + 8192])
    except zlib.error:
        return "early"
    if not to_end:
        return None
    try:
        d.decompress(data[at + 8192:-8])
    except zlib.error:
        return None
    try:
        d.decompress(data[-8:])
    except zlib.error:
        return "checksum"
    return None


def _first_wrong(got: list[rd.Item], lines: list[bytes]) -> int:
    for i, item in enumerate(got):
        if not (isinstance(item, rd.Record) and jl({"_id": item.id, "title": item.title,
                                                    "text": item.text}) == lines[i]):
            return i + 1
    return len(got) + 1  # every line read is intact


def _prose(n: int) -> list[bytes]:
    """n records of varied prose-like text (1-2 KB each, seeded): deflate codes them as
    it codes real text, unlike a repeated sentence."""
    import random

    rng = random.Random(7)
    vocab = ["".join(rng.choice("etaoinshrdlucmfwypvbgkqjxz") for _ in range(rng.randint(2, 11)))
             for _ in range(3000)]
    return [jl({"_id": f"d{i}", "title": " ".join(rng.choices(vocab, k=8)),
                "text": " ".join(rng.choices(vocab, k=rng.randint(150, 300)))})
            for i in range(n)]


def test_damage_found_at_the_checksum_names_where_it_shows_and_what_was_lost(
        tmp_path: Path) -> None:
    """Deflate decodes damaged data into wrong bytes and zlib says so only at the end: the
    message names the run of unreadable lines the damage made, the byte the damage must
    lie at or before (not the end of the file), and how many lines were lost."""
    import re

    lines = _prose(600)
    path, at = _damaged(tmp_path, lines, "checksum")
    got = items(path, report_truncation=True)
    last, read = got[-1], got[:-1]
    assert isinstance(last, rd.Truncation)
    message = last.message
    wrong = _first_wrong(read, lines)
    unreadable = [x for x in read if isinstance(x, rd.Rejection) and x.reason in UNREADABLE]
    first = unreadable[0].line
    assert wrong <= first <= wrong + 1, (wrong, first)
    assert "checksum" in message and f"{len(unreadable)} lines could not be read" in message
    assert f"from line {first}" in message and "the last few may be damaged" not in message
    (byte,) = map(int, re.findall(r"at or before byte (\d+)", message))
    assert at <= byte <= at + 4096, (at, byte)
    (about,) = map(int, re.findall(r"about (\d+) lines", message))
    lost = len(lines) - wrong + 1
    assert abs(about - lost) <= lost // 4, (about, lost)


def test_damage_that_stops_decoding_names_the_byte_and_the_lines_left_unread(
        tmp_path: Path) -> None:
    import re

    lines = _prose(600)
    path, at = _damaged(tmp_path, lines, "early")
    got = items(path, report_truncation=True)
    last, read = got[-1], got[:-1]
    assert isinstance(last, rd.Truncation)
    assert at <= last.file_position < path.stat().st_size
    assert f"byte {last.file_position}" in last.message
    wrong = _first_wrong(read, lines)
    assert wrong <= last.line
    (about,) = map(int, re.findall(r"about (\d+) lines", last.message))
    lost = len(lines) - len(read)
    assert abs(about - lost) <= lost // 4 + 2, (about, lost)
