"""Streaming corpus reader: JSONL, JSONL.gz or stdin in BEIR corpus form, with validation.

Every non-blank input line becomes exactly one item, in input order:

- ``Record``: a valid document for this worker;
- ``Rejection``: a line this worker must report and skip (malformed JSON, missing or
  invalid id, duplicate id, no text and no title, bytes that are not UTF-8, ...);
- ``Foreign``: a line that belongs to another worker of a split run (or is blank);
- ``Truncation`` (last, if asked for): the file cannot be read past this line (a cut or
  corrupt ``.gz``); otherwise that is a ``CorpusError`` after the lines before it.

Lines are numbered from 1; ``end_offset`` is the byte offset (of the decompressed stream)
just after the line, which the checkpoint records. Splitting is by a stable hash of the
record id (CRC32, the same on every machine), so duplicates of an id always meet in the
same worker; lines without a usable id are assigned by line number.

A UTF-8 byte order mark at the start of the file is accepted (and not part of line 1).

Empty documents: a record whose ``text`` is empty or missing but which has a ``title`` is
indexed title-only (counted as ``title_only``); with neither it is skipped.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from lr_opensearch.errors import CorpusError, IngestError
from lr_opensearch.instructions import document_text  # noqa: F401 - re-exported

from .config import STDIN
from .gzdamage import DamageTrail, describe
from .gzstream import MAGIC, GzipStream, Prefixed, damage_at

MAX_ID_BYTES = 512  # OpenSearch rejects longer _id values
EXCERPT_CHARS = 200  # how much of a bad line goes into the dead-letter file
BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark: accepted at the start of the file only

# Rejection reasons (stable strings: they appear in reports and dead-letter files).
MALFORMED_JSON = "malformed_json"
NOT_AN_OBJECT = "not_an_object"
INVALID_UTF8 = "invalid_utf8"
MISSING_ID = "missing_id"
INVALID_ID = "invalid_id"
DUPLICATE_ID = "duplicate_id"
INVALID_FIELD = "invalid_field"
EMPTY_DOCUMENT = "empty_document"
CONFLICTING_FIELD = "conflicting_field"
INVALID_TEXT = "invalid_text"  # valid JSON whose strings are not text (a lone surrogate)
TRUNCATED = "truncated_corpus"  # the file cannot be read past this line (cut or corrupt .gz)


@dataclass(frozen=True)
class Record:
    """A valid corpus document.

    line: 1-based input line; end_offset: byte offset after it; metadata: every other key.
    """

    line: int
    end_offset: int
    id: str
    title: str
    text: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def title_only(self) -> bool:
        return not self.text.strip()

    def encoder_text(self) -> str:
        """The string the doc encoder sees: title and text joined by one space."""
        return document_text(self.title, self.text)


@dataclass(frozen=True)
class Rejection:
    """A line that is reported and skipped; ``reason`` is one of the constants above."""

    line: int
    end_offset: int
    reason: str
    message: str
    id: str | None = None
    excerpt: str = ""


@dataclass(frozen=True)
class Foreign:
    """A line another worker handles, or a blank line: nothing to do but move past it."""

    line: int
    end_offset: int


@dataclass(frozen=True)
class Truncation:
    """The corpus cannot be read past this point (a cut or corrupt ``.gz``): the last item.

    line: the first line that could not be read; end_offset: decompressed bytes read intact
    (the end of the line before); file_position: bytes of the file on disk consumed.
    """

    line: int
    end_offset: int
    file_position: int
    message: str


Item = Record | Rejection | Foreign | Truncation


def worker_of(key: str, workers: int) -> int:
    """The worker (0..workers-1) that owns a record id: CRC32 of its UTF-8 bytes, mod N."""
    return zlib.crc32(key.encode("utf-8")) % workers


def open_corpus(path: str) -> tuple[IO[bytes], IO[bytes]]:
    """Open a corpus as (decoded binary stream, underlying raw file).

    gzip is recognised by its magic bytes, not the name, on stdin as in a file; ``-`` is
    stdin (``raw`` is then ``sys.stdin.buffer``, which the caller leaves open).
    ``raw.tell()`` is the position in the file on disk (compressed bytes for gzip).

    Raises:
        CorpusError: the file does not exist or is not readable.
    """
    if path == STDIN:
        stdin = sys.stdin.buffer
        head = stdin.read(len(MAGIC))
        if head != MAGIC:
            return io.BufferedReader(Prefixed(head, stdin)), stdin
        return io.BufferedReader(GzipStream(Prefixed(head, stdin)), buffer_size=1 << 20), stdin
    check_corpus(path)
    raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    if raw.peek(2)[:2] == MAGIC:
        return io.BufferedReader(GzipStream(raw), buffer_size=1 << 20), raw
    return raw, raw


def check_corpus(path: str) -> None:
    """Raise ``CorpusError`` unless ``path`` is ``-`` (stdin) or a readable file."""
    if path == STDIN:
        return
    p = Path(path)
    if not p.is_file():
        what = "is a directory, not a file" if p.is_dir() else "does not exist"
        raise CorpusError(f"corpus file {path} {what}; give the path of a JSONL or JSONL.gz "
                          "corpus, or '-' for stdin")
    if not os.access(p, os.R_OK):
        raise CorpusError(f"corpus file {path} is not readable (permissions)")


def check_not_empty(path: str) -> None:
    """Raise ``CorpusError`` if a corpus file holds no line but blank ones (stdin is not
    read ahead: its emptiness shows in the summary).

    Reads only up to the first non-blank line."""
    if path == STDIN:
        return
    stream, raw = open_corpus(path)
    try:
        for line in stream:
            if line.strip():
                return
    except (EOFError, OSError, zlib.error):  # the first line is damaged: the run reports it
        return
    finally:
        stream.close()
        raw.close()
    raise CorpusError(f"corpus file {path} holds no documents (it is empty or blank); give "
                      "a JSONL file with one JSON object per line")


class CorpusReader:
    """Iterate a corpus as ``Record`` / ``Rejection`` / ``Foreign`` items for one worker.

    Args:
        path: corpus path or ``"-"``.
        worker: (worker_id, workers) of this process.
        resume_line / resume_offset: a checkpoint position. Lines up to ``resume_line`` are
            read again but not yielded; the ids they contain re-enter the duplicate check, and
            the byte offset after ``resume_line`` must equal ``resume_offset`` (else the corpus
            changed since the checkpoint and resuming would lose or double documents).
        report_truncation: when the file cannot be read to its end (a cut or corrupt
            ``.gz``), end with a ``Truncation`` item instead of raising ``CorpusError``
            (either way only after every line before it).
    """

    def __init__(self, path: str, *, worker: tuple[int, int] = (0, 1),
                 resume_line: int = 0, resume_offset: int = 0,
                 report_truncation: bool = False) -> None:
        self.path = path
        self.report_truncation = report_truncation
        self.worker_id, self.workers = worker
        self.resume_line = resume_line
        self.resume_offset = resume_offset
        self._seen: set[str] = set()
        self._trail = DamageTrail()  # where a damaged .gz shows
        self._raw: IO[bytes] | None = None
        self._file_pos = 0
        self.bytes_read = 0

    def __iter__(self) -> Iterator[Item]:
        stream, self._raw = open_corpus(self.path)
        try:
            yield from self._items(stream)
        finally:
            self._file_pos = self.file_position()
            if self._raw is not sys.stdin.buffer:  # stdin stays open: it is the process's
                stream.close()
                self._raw.close()
            self._raw = None

    def file_position(self) -> int:
        """Bytes of the file on disk consumed so far (compressed bytes for gzip)."""
        raw = self._raw
        if raw is None:
            return self._file_pos
        if raw is sys.stdin.buffer:
            return self.bytes_read
        try:
            return raw.tell()
        except (OSError, ValueError):
            return self._file_pos

    def _items(self, stream: IO[bytes]) -> Iterator[Item]:
        offset = 0
        line_no = 0
        lines = iter(stream)
        while True:
            try:
                raw = next(lines)
            except StopIteration:
                break
            except (EOFError, OSError, zlib.error) as exc:  # gzip: cut short, or bad data
                cut = self._truncation(line_no + 1, offset, exc, damage_at(stream))
                if not self.report_truncation:
                    raise CorpusError(cut.message) from exc
                yield cut
                return
            line_no += 1
            offset += len(raw)
            self.bytes_read = offset
            item = self._classify(raw, line_no, offset)
            if line_no <= self.resume_line:
                if line_no == self.resume_line and offset != self.resume_offset:
                    raise IngestError(
                        f"{self.path}: line {line_no} ends at byte {offset}, but the checkpoint "
                        f"says {self.resume_offset}: the corpus changed since the last run. "
                        "Rerun with --restart to ingest it from the beginning.")
                continue
            yield item
        if line_no < self.resume_line:
            raise IngestError(f"{self.path} has {line_no} lines but the checkpoint is at line "
                              f"{self.resume_line}: the corpus changed; rerun with --restart.")

    def _truncation(self, line_no: int, offset: int, exc: BaseException,
                    position: int | None) -> Truncation:
        if line_no <= self.resume_line:
            raise IngestError(f"{self.path} cannot be read past line {line_no - 1} ({exc}) but "
                              f"the checkpoint is at line {self.resume_line}: the corpus "
                              "changed; rerun with --restart.")
        if position is None:
            position = self.file_position()
        size = None if self.path == STDIN else os.path.getsize(self.path)
        return Truncation(line_no, offset, position,
                          describe(self.path, line_no, offset, exc, position, self._trail, size))

    def _classify(self, raw: bytes, line_no: int, end: int) -> Item:
        if not raw.strip():
            self._trail.see(line_no, end, unreadable=False, blank=True)
            return Foreign(line_no, end)
        if line_no == 1 and raw.startswith(BOM):  # editors on Windows write one
            raw = raw[len(BOM):]
        parsed = _parse_line(raw, line_no, end)
        self._trail.see(line_no, end, unreadable=isinstance(parsed, Rejection))
        if isinstance(parsed, Rejection):
            return parsed if self._mine_by_line(line_no) else Foreign(line_no, end)
        obj = parsed
        doc_id, problem = _extract_id(obj)
        if doc_id is None:
            if not self._mine_by_line(line_no):
                return Foreign(line_no, end)
            reason = MISSING_ID if problem is None else INVALID_ID
            msg = problem or "record has neither '_id' nor 'id' (or it is empty)"
            return Rejection(line_no, end, reason, msg, excerpt=_excerpt(raw))
        if self.workers > 1 and worker_of(doc_id, self.workers) != self.worker_id:
            return Foreign(line_no, end)
        return self._validate(obj, doc_id, raw, line_no, end)

    def _validate(self, obj: dict[str, Any], doc_id: str, raw: bytes, line_no: int,
                  end: int) -> Record | Rejection:
        fields = {}
        for name in ("title", "text"):
            value = obj.get(name)
            if value is None:
                value = ""
            if not isinstance(value, str):
                return Rejection(line_no, end, INVALID_FIELD,
                                 f"field {name!r} must be a string, got {type(value).__name__}",
                                 id=doc_id, excerpt=_excerpt(raw))
            fields[name] = value
        if not fields["title"].strip() and not fields["text"].strip():
            return Rejection(line_no, end, EMPTY_DOCUMENT,
                             "both 'text' and 'title' are empty or missing", id=doc_id,
                             excerpt=_excerpt(raw))
        if doc_id in self._seen:
            return Rejection(line_no, end, DUPLICATE_ID,
                             f"id {doc_id!r} already appeared earlier in the corpus; "
                             "this later occurrence is skipped", id=doc_id, excerpt=_excerpt(raw))
        meta = _metadata(obj)
        if isinstance(meta, str):
            return Rejection(line_no, end, CONFLICTING_FIELD, meta, id=doc_id, excerpt=_excerpt(raw))
        self._seen.add(doc_id)
        return Record(line_no, end, doc_id, fields["title"], fields["text"], meta)

    def _mine_by_line(self, line_no: int) -> bool:
        return line_no % self.workers == self.worker_id


# a JSON escape of a UTF-16 surrogate (U+D800-U+DFFF): valid JSON, but text only in pairs
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _lone_surrogate(obj: Any) -> str | None:
    """Where ``obj`` holds a string that cannot be UTF-8 (a lone surrogate), else None."""
    try:
        json.dumps(obj, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"a lone UTF-16 surrogate ({exc.object[exc.start:exc.end]!a}) is not text"
    return None


def _parse_line(raw: bytes, line_no: int, end: int) -> dict[str, Any] | Rejection:
    try:
        decoded = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Rejection(line_no, end, INVALID_UTF8,
                         f"byte {exc.start} of the line is not valid UTF-8 ({raw[exc.start:exc.start + 1]!r})",
                         id=readable_id(raw), excerpt=_excerpt(raw))
    try:
        obj = json.loads(decoded)
    except json.JSONDecodeError as exc:
        return Rejection(line_no, end, MALFORMED_JSON, f"invalid JSON: {exc.msg} at column {exc.colno}",
                         id=readable_id(raw), excerpt=_excerpt(raw))
    except RecursionError:
        return Rejection(line_no, end, MALFORMED_JSON, "the JSON is nested too deeply to read "
                         "(thousands of levels); a corpus record is a flat object",
                         id=readable_id(raw), excerpt=_excerpt(raw))
    if not isinstance(obj, dict):
        return Rejection(line_no, end, NOT_AN_OBJECT,
                         f"a corpus line must be a JSON object, got {type(obj).__name__}",
                         excerpt=_excerpt(raw))
    if _SURROGATE_ESCAPE.search(raw) and (problem := _lone_surrogate(obj)) is not None:
        return Rejection(line_no, end, INVALID_TEXT, f"{problem}; write the character "
                         "itself, or both halves of its pair", id=readable_id(raw),
                         excerpt=_excerpt(raw))
    return obj


# "_id" (or "id") followed by a JSON string or integer, wherever it stands in the line
_ID_PATTERN = re.compile(rb'"(_id|id)"\s*:\s*("(?:[^"\\\x00-\x1f]|\\.)*"|-?\d+)')


def readable_id(raw: bytes) -> str | None:
    """The id of a line that is not valid JSON (or not UTF-8), when it can still be read:
    for the dead-letter file, so a broken line can be found by its id. ``_id`` wins over
    ``id``, as for valid lines; None when neither is readable."""
    found: dict[bytes, str] = {}
    for m in _ID_PATTERN.finditer(raw):
        try:
            value = json.loads(m.group(2).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        found.setdefault(m.group(1), str(value))
    doc_id = found.get(b"_id", found.get(b"id"))
    if not doc_id:
        return None
    try:
        return doc_id if len(doc_id.encode("utf-8")) <= MAX_ID_BYTES else None
    except UnicodeEncodeError:  # a lone surrogate: no id to name
        return None


def _extract_id(obj: dict[str, Any]) -> tuple[str | None, str | None]:
    """(id, None) when usable; (None, None) when absent; (None, problem) when invalid."""
    value = obj.get("_id", obj.get("id"))
    if value is None or value == "":
        return None, None
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        return None, f"the id must be a string or an integer, got {type(value).__name__}"
    doc_id = str(value)
    if len(doc_id.encode("utf-8")) > MAX_ID_BYTES:
        return None, f"the id is longer than {MAX_ID_BYTES} bytes"
    return doc_id, None


def _metadata(obj: dict[str, Any]) -> dict[str, Any] | str:
    """Every key but the id (the one used), title and text; a nested 'metadata' dict is merged.

    A name given both at the top level and inside 'metadata' with different values is not
    guessed at: the returned string says which (the line is refused); equal values are one.
    """
    id_key = "_id" if "_id" in obj else "id"
    meta: dict[str, Any] = {}
    nested = obj.get("metadata")
    if isinstance(nested, dict):
        meta.update(nested)
    for key, value in obj.items():
        if key in (id_key, "title", "text") or (key == "metadata" and isinstance(nested, dict)):
            continue
        if key in meta and meta[key] != value:
            return (f"field {key!r} is given both at the top level ({_short(value)}) and inside "
                    f"'metadata' ({_short(meta[key])}); keep one of them")
        meta[key] = value
    return meta


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:40] + "..."


def _excerpt(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS] + "..."
