"""Where a damaged ``.gz`` corpus breaks, and what was lost, as far as can be measured.

Deflate has no checksum per block, so damage is found in one of three ways:

- **cut short**: the file ends inside the compressed data; every line before the cut is
  intact, the rest is not in the file (how many lines: unknown);
- **a decoding error** (an invalid code): zlib stops at the damaged byte
  (``GzipStream.consumed``, exact); the bytes decoded just before it may already be wrong,
  which shows as lines that cannot be read right before the stop; the rest of the file is
  not decoded;
- **a checksum mismatch** at the end of a member: the damage decoded into wrong bytes
  without a decoding error, and zlib cannot say where. Wrong bytes rarely form JSON, so
  the damage shows as a run of lines that cannot be read (not UTF-8, not JSON): the
  longest such run is named, with the byte of the file at or before which the damage
  must lie (where the run's first line ends in the compressed data: ``position_of``).

How many lines were lost is estimated, and said to be: the gzip trailer records the
original's uncompressed size (mod 2**32, of the last member), and the lines before the
damage give the bytes per line.

``DamageTrail`` follows the unreadable runs while the reader reads; ``describe`` words it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

from .gzstream import CHUNK

FINE_STEP = 16  # compressed bytes per step when locating a decompressed offset
CHECKSUM_ERRORS = ("incorrect data check", "incorrect length check")
TRAILER = 8  # a gzip member ends with CRC32 and size: a stop within them leaves nothing


@dataclass
class Run:
    """Consecutive lines that could not be read: the first (number, end offset in the
    decompressed stream) and how many."""

    first: int
    first_start: int
    first_end: int
    lines: int = 1


class DamageTrail:
    """The runs of unreadable lines of a corpus, as the reader classifies each line
    (blank lines neither break nor extend a run)."""

    def __init__(self) -> None:
        self.current: Run | None = None
        self.longest: Run | None = None
        self.unreadable = 0
        self._end = 0  # where the line seen last ends

    def see(self, line: int, end: int, *, unreadable: bool, blank: bool = False) -> None:
        start, self._end = self._end, end
        if blank:
            return
        if not unreadable:
            self.current = None
            return
        self.unreadable += 1
        if self.current is None:
            self.current = Run(line, start, end, 0)
        self.current.lines += 1
        if self.longest is None or self.current.lines > self.longest.lines:
            self.longest = self.current


def position_of(path: str, offset: int) -> int | None:
    """The byte of the gzip file ``path`` by which its decompression has produced byte
    ``offset`` of the decompressed stream (to ``FINE_STEP`` bytes); None when the file
    cannot be decoded that far."""
    d, produced, fed = zlib.decompressobj(wbits=31), 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            before = (d.copy(), produced)
            try:
                d, produced = _feed(d, chunk, produced)
            except zlib.error:  # the damage is in this chunk: decode up to it finely
                produced = offset + 1
            if produced > offset:
                d, produced = before
                for i in range(0, len(chunk), FINE_STEP):
                    try:
                        d, produced = _feed(d, chunk[i:i + FINE_STEP], produced)
                    except zlib.error:
                        return None
                    if produced > offset:
                        return fed + min(i + FINE_STEP, len(chunk))
            fed += len(chunk)
    return None


def _feed(d: Any, data: bytes, produced: int) -> tuple[Any, int]:
    """Decompress ``data`` with ``d`` (a ``zlib.decompressobj``), on into the next gzip
    member where one ends; (the decompressor now, bytes produced in all)."""
    while data:
        produced += len(d.decompress(data))
        if not d.eof:
            break
        data = d.unused_data
        if not data.strip(b"\x00"):
            break
        d = zlib.decompressobj(wbits=31)
    return d, produced


def describe(path: str, line: int, offset: int, exc: BaseException, position: int | None,
             trail: DamageTrail, size: int | None) -> str:
    """The one message of a ``.gz`` corpus that cannot be read to its end (see the module
    docstring): where the damage is, which lines show it, what was lost, what to do."""
    fix = "get a complete, intact copy of the file to ingest the rest"
    if isinstance(exc, EOFError):
        return (f"{path} is cut short: it ends inside the compressed data at byte "
                f"{position}, so it cannot be read from line {line} on ({offset} bytes "
                f"uncompressed before). The {line - 1} lines before were read intact; the rest "
                f"of the corpus is not in the file; {fix}")
    checksum = any(e in str(exc) for e in CHECKSUM_ERRORS)
    head = (f"{path} is corrupt: its checksum (at byte {position} of the file) does not "
            "match, so some decompressed bytes are wrong, and zlib cannot say which" if checksum
            else f"{path} is corrupt at byte {position} of the file ({exc})")
    run = trail.longest if checksum else trail.current
    parts = [_shown(path, run, trail)] if run is not None else []
    if run is None and checksum:
        parts.append("every line read as a record, so the damage is in text that still "
                     "reads, and no line can be named")
    undecoded = size is not None and position is not None and size - position > TRAILER
    if undecoded:
        parts.append(_rest(line, position, size))  # type: ignore[arg-type]
    if (run is not None or undecoded) and path != "-" and offset < 2**32:
        first, start = (run.first, run.first_start) if run is not None else (line, offset)
        parts.append(_original_lines(path, first, start))
    wrong = " and may hold wrong text too" if checksum else ""
    return f"{head}: {'; '.join(parts)}. The other lines were read{wrong}; {fix}"


def _shown(path: str, run: Run, trail: DamageTrail) -> str:
    """Which lines show the damage, and the byte it must lie at or before."""
    at = position_of(path, run.first_end - 1) if path != "-" else None
    where = f"; the damage is at or before byte {at} of the file, where line {run.first} " \
            "ends" if at is not None else ""
    others = trail.unreadable - run.lines
    return (f"{trail.unreadable} lines could not be read (dead-lettered as not UTF-8 or not "
            f"JSON), {run.lines} of them in a row from line {run.first}"
            f"{f' and {others} elsewhere' if others else ''}{where}")


def _original_lines(path: str, first: int, start: int) -> str:
    """How many lines the original had from line ``first`` (at ``start`` in the
    decompressed stream) on: the uncompressed size the gzip trailer records (of the last
    member: the whole file when it is one member, as gzip writes it), at the density of the
    lines before."""
    with open(path, "rb") as f:
        f.seek(-4, 2)
        size = int.from_bytes(f.read(4), "little")
    if first < 2 or size <= start:
        return "how many lines the original had from there cannot be told"
    est = round((size - start) * (first - 1) / start)
    return (f"lost: about {est} lines from line {first} on (from the original's size that "
            f"the file's trailer records, {size} bytes, at the density of the lines before, "
            "if the file is one gzip member)")


def _rest(line: int, position: int, size: int) -> str:
    """The part of the file after the damage that was never decoded."""
    return (f"the rest of the file after line {line - 1} could not be decoded (bytes "
            f"{position}-{size}, {100 * (size - position) / size:.0f}% of the file)")
