"""Resumable progress: the acknowledged-prefix watermark and its atomic checkpoint file.

Documents are reordered by length before encoding, so acknowledgements arrive out of input
order. The checkpoint therefore records the highest input position P such that every line
up to P is settled (indexed, dead-lettered, skipped, or another worker's), together with
the counts of exactly those lines. A rerun re-reads the input, skips lines up to P and
processes the rest; a document acknowledged after P but before a crash is simply sent
again, which is harmless because its ``_id`` is fixed, and counted once because the counts
in the file cover only lines up to P.

The file is written to a temporary name, fsynced and renamed over the old one, so a kill
at any moment leaves either the old or the new checkpoint, never a torn one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lr_opensearch.errors import IngestError

logger = logging.getLogger(__name__)

FORMAT = "lr-ingest-checkpoint"
VERSION = 1

INDEXED, FAILED, SKIPPED = "indexed", "failed", "skipped"


@dataclass
class Counts:
    """Per-outcome counts. ``read == indexed + failed + skipped``; truncated and title_only
    are subsets of indexed; ``reasons`` counts failed and skipped lines by reason."""

    read: int = 0
    indexed: int = 0
    failed: int = 0
    skipped: int = 0
    truncated: int = 0
    title_only: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, outcome: str, *, reason: str | None = None, truncated: bool = False,
            title_only: bool = False) -> None:
        self.read += 1
        if outcome == INDEXED:
            self.indexed += 1
            self.truncated += truncated
            self.title_only += title_only
        elif outcome == FAILED:
            self.failed += 1
        elif outcome == SKIPPED:
            self.skipped += 1
        else:  # internal invariant, not user input
            raise AssertionError(f"unknown outcome {outcome!r}")
        if reason and outcome != INDEXED:
            self.reasons[reason] = self.reasons.get(reason, 0) + 1

    def merge(self, other: Counts) -> None:
        for name in ("read", "indexed", "failed", "skipped", "truncated", "title_only"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for reason, n in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Counts:
        return cls(**{**data, "reasons": dict(data.get("reasons", {}))})


@dataclass(frozen=True)
class CheckpointKey:
    """What a checkpoint belongs to: one corpus file version, index, bundle and worker split."""

    corpus: str
    size: int
    mtime_ns: int
    index: str
    bundle_id: str
    worker_id: int
    workers: int

    @classmethod
    def for_run(cls, corpus: str, index: str, bundle_id: str, worker_id: int,
                workers: int) -> CheckpointKey:
        path = Path(corpus).resolve()
        st = path.stat()
        return cls(str(path), st.st_size, st.st_mtime_ns, index, bundle_id, worker_id, workers)

    def digest(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode("utf-8")
        return hashlib.sha256(blob).hexdigest()[:16]

    def stem(self) -> str:
        """A readable, unique file stem: index, corpus name, split, hash of the key."""
        name = Path(self.corpus).name.replace(".", "_")
        return f"{self.index}-{name}-w{self.worker_id}of{self.workers}-{self.digest()}"


@dataclass
class CheckpointState:
    """The content of a checkpoint file."""

    key: CheckpointKey | None
    line: int = 0
    offset: int = 0
    counts: Counts = field(default_factory=Counts)
    complete: bool = False
    original_settings: dict[str, Any] | None = None
    dead_letter: str | None = None
    #: the ``index.uuid`` of the copy of the index this checkpoint filled (None: written
    #: before the field): a recreated index, or one of that name on another cluster, has
    #: another and is ingested again
    index_uuid: str | None = None

    def to_json(self) -> dict[str, Any]:
        key = asdict(self.key) if self.key is not None else None
        return {"format": FORMAT, "version": VERSION, "key": key, "line": self.line,
                "offset": self.offset, "counts": asdict(self.counts), "complete": self.complete,
                "original_settings": self.original_settings, "dead_letter": self.dead_letter,
                "index_uuid": self.index_uuid, "updated": time.time()}


class CheckpointFile:
    """Load and atomically save the checkpoint of one run."""

    def __init__(self, path: Path, key: CheckpointKey) -> None:
        self.path = path
        self.key = key

    def load(self) -> CheckpointState | None:
        """The saved state, or None if there is none for this key.

        Raises:
            IngestError: the file exists but is not a checkpoint of this version / key.
        """
        if not self.path.exists():
            return None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise IngestError(f"checkpoint {self.path} is unreadable ({exc}); delete it or rerun "
                              "with --restart") from exc
        if data.get("format") != FORMAT or data.get("version") != VERSION:
            raise IngestError(f"{self.path} is not a version-{VERSION} ingest checkpoint; delete "
                              "it or rerun with --restart")
        if data.get("key") != asdict(self.key):
            raise IngestError(f"checkpoint {self.path} belongs to another run ({data.get('key')}); "
                              "rerun with --restart")
        return CheckpointState(self.key, int(data["line"]), int(data["offset"]),
                               Counts.from_dict(data["counts"]), bool(data["complete"]),
                               data.get("original_settings"), data.get("dead_letter"),
                               data.get("index_uuid"))

    def save(self, state: CheckpointState) -> None:
        """Write ``state`` atomically: temporary file, fsync, rename."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state.to_json(), f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold an exclusive lock on this checkpoint for the duration of a run.

        The lock (``flock`` on a ``.lock`` file) dies with its process, so a killed run never
        blocks its rerun; two live runs of the same command cannot interleave.

        Raises:
            IngestError: another live process is running this ingest.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a+") as f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                raise IngestError(f"another ingest process is already running with checkpoint "
                                  f"{self.path} (same corpus, index, bundle and split); wait "
                                  "for it or stop it") from exc
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)


@dataclass
class _Entry:
    line: int
    end_offset: int
    outcome: str | None = None
    reason: str | None = None
    truncated: bool = False
    title_only: bool = False


class Watermark:
    """Tracks which input lines are settled and where the settled prefix ends. Thread-safe.

    The reader thread registers every line of this worker in input order (``register``) and
    moves past other lines (``passed``); the writer thread settles lines as the engine
    acknowledges them (``settle``). ``advance`` folds the settled prefix into ``committed``
    and returns whether the position moved.
    """

    def __init__(self, line: int = 0, offset: int = 0, counts: Counts | None = None) -> None:
        self._lock = threading.Lock()
        self._entries: deque[_Entry] = deque()
        self._by_line: dict[int, _Entry] = {}
        self._read = (line, offset)
        self.line, self.offset = line, offset
        self.committed = counts if counts is not None else Counts()

    def register(self, line: int, end_offset: int, outcome: str | None = None, *,
                 reason: str | None = None) -> None:
        """Add a line of this worker; ``outcome`` given = already settled (a rejection)."""
        entry = _Entry(line, end_offset, outcome, reason)
        with self._lock:
            self._entries.append(entry)
            if outcome is None:
                self._by_line[line] = entry
            self._read = (line, end_offset)

    def passed(self, line: int, end_offset: int) -> None:
        """Move past a line that is not this worker's (or blank)."""
        with self._lock:
            self._read = (line, end_offset)

    def settle(self, line: int, outcome: str, *, reason: str | None = None,
               truncated: bool = False, title_only: bool = False) -> None:
        """Record the outcome of a registered line (from any thread)."""
        with self._lock:
            entry = self._by_line.pop(line)
            entry.outcome, entry.reason = outcome, reason
            entry.truncated, entry.title_only = truncated, title_only

    def advance(self) -> bool:
        """Fold the settled prefix into ``committed``; True if the position moved."""
        with self._lock:
            before = (self.line, self.offset)
            while self._entries and self._entries[0].outcome is not None:
                e = self._entries.popleft()
                self.committed.add(e.outcome, reason=e.reason, truncated=e.truncated,  # type: ignore[arg-type]
                                   title_only=e.title_only)
                self.line, self.offset = e.line, e.end_offset
            if not self._entries:
                self.line, self.offset = self._read
            return (self.line, self.offset) != before

    @property
    def pending(self) -> int:
        """Lines registered but not yet folded into the committed prefix."""
        with self._lock:
            return len(self._entries)

    def snapshot(self) -> tuple[int, int, Counts]:
        """(line, offset, a copy of the committed counts), consistent with each other."""
        with self._lock:
            c = self.committed
            return self.line, self.offset, Counts(c.read, c.indexed, c.failed, c.skipped,
                                                  c.truncated, c.title_only, dict(c.reasons))
