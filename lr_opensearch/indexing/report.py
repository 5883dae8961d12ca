"""What a run tells its user: the dead-letter file, per-line warnings and the final summary.

The dead-letter file is JSONL, one entry per input line that did not end up in the index:

``{"line": 17, "id": "d3", "kind": "skipped"|"failed", "reason": "...", "message": "...",
"excerpt": "...", "corpus": "...", "index": "..."}``

``skipped`` lines were refused by validation (the reason is a ``lr_opensearch.indexing.reader`` constant);
``failed`` lines were refused by the engine (``reason`` is the engine's error type, and
``message`` its reason). Entries are appended: runs of other corpora or indices may share
the file, and their entries are never removed. When a run resumes (or restarts), its own
entries (same ``corpus`` and ``index``) past the checkpoint are dropped (they will be
produced again), so the file never lists a line twice. A run refuses a file that is not a
dead-letter file (``indexing.outputs``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

from .checkpoint import Counts

logger = logging.getLogger(__name__)

WARN_PER_REASON = 20  # individual log lines per reason before only counting


class DeadLetter:
    """Thread-safe appender of dead-letter entries, consistent with a checkpoint line."""

    def __init__(self, path: Path, *, corpus: str, index: str, keep_through_line: int) -> None:
        self.path = path
        self.corpus = corpus
        self.index = index
        self._lock = threading.Lock()
        self._warned: dict[str, int] = {}
        self._dirty = False
        self.entries = _rewrite_prefix(path, keep_through_line, corpus, index)
        self._f: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

    def add(self, *, line: int, doc_id: str | None, kind: str, reason: str, message: str,
            excerpt: str = "") -> None:
        """Append one entry and log it (the first few per reason at WARNING, then DEBUG)."""
        entry = {"line": line, "id": doc_id, "kind": kind, "reason": reason, "message": message,
                 "excerpt": excerpt, "corpus": self.corpus, "index": self.index}
        with self._lock:
            self._f.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._dirty = True
            self.entries += 1
            n = self._warned[reason] = self._warned.get(reason, 0) + 1
        what = f"id {doc_id!r}" if doc_id is not None else "no id"
        level = logging.WARNING if n <= WARN_PER_REASON else logging.DEBUG
        logger.log(level, "%s:%d (%s): %s %s: %s", self.corpus, line, what, kind, reason, message)
        if n == WARN_PER_REASON:
            logger.warning("further %r lines are only counted and written to %s", reason, self.path)

    def sync(self) -> None:
        """Flush and fsync, so a checkpoint written next never refers to lost entries."""
        with self._lock:
            if self._dirty:
                self._f.flush()
                os.fsync(self._f.fileno())
                self._dirty = False

    def close(self) -> None:
        self.sync()
        with self._lock:
            self._f.close()


def _rewrite_prefix(path: Path, keep_through_line: int, corpus: str, index: str) -> int:
    """Drop this run's entries (same corpus and index) past ``keep_through_line`` and a
    killed run's torn last line; every other run's entry stays. The file is rewritten
    (temporary file, fsync, rename) only when something must go; returns how many of this
    run's entries remain."""
    path.parent.mkdir(parents=True, exist_ok=True)
    kept: list[str] = []
    own = dropped = 0
    if path.exists():
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            for raw in f:
                try:
                    entry = json.loads(raw)
                    line = int(entry["line"])
                except (ValueError, KeyError, TypeError):
                    dropped += 1  # a torn last line from a killed run
                    continue
                mine = entry.get("corpus") == corpus and entry.get("index") == index
                if mine and line > keep_through_line:
                    dropped += 1
                    continue
                own += mine
                kept.append(raw if raw.endswith("\n") else raw + "\n")
    if dropped:
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.writelines(kept)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    return own


@dataclass
class IngestSummary:
    """The outcome of one run (or the sum over the workers of a launcher run).

    counts: outcomes of every input line this run is responsible for (including lines
        settled by an earlier, interrupted run of the same checkpoint).
    elapsed_s / docs_per_s: wall time of this invocation and indexed documents per second
        over the documents this invocation encoded (resumed lines excluded).
    encode_s: time spent in the doc encoder; write_s: time the writer spent in bulk calls;
    wait_s: time encoding stalled because the writer queue was full (I/O not hidden).
    retries: bulk attempts repeated after 429 / 5xx / connection failures.
    """

    index: str
    corpus: str
    counts: Counts = field(default_factory=Counts)
    resumed_from_line: int = 0
    docs_this_run: int = 0
    elapsed_s: float = 0.0
    encode_s: float = 0.0
    write_s: float = 0.0
    wait_s: float = 0.0
    retries: int = 0
    complete: bool = False
    dead_letter: str | None = None
    checkpoint: str | None = None
    workers: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def docs_per_s(self) -> float:
        return self.docs_this_run / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["docs_per_s"] = self.docs_per_s
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IngestSummary:
        data = dict(data)
        data.pop("docs_per_s", None)
        data["counts"] = Counts.from_dict(data["counts"])
        return cls(**data)

    def format_text(self) -> str:
        c = self.counts
        lines = [
            f"index {self.index} <- {self.corpus}" + (f" ({self.workers} workers)"
                                                      if self.workers > 1 else ""),
            f"  read {c.read}  indexed {c.indexed}  failed {c.failed}  skipped {c.skipped}",
            f"  truncated to the encoder's max length: {c.truncated}   title only: {c.title_only}",
        ]
        if c.reasons:
            lines.append("  not indexed, by reason: " + ", ".join(
                f"{k} {v}" for k, v in sorted(c.reasons.items())))
        if self.resumed_from_line:
            lines.append(f"  resumed after line {self.resumed_from_line}")
        lines.append(f"  {self.docs_this_run} docs encoded in {self.elapsed_s:.1f} s: "
                     f"{self.docs_per_s:.1f} docs/s (encoder {self.encode_s:.1f} s, bulk "
                     f"{self.write_s:.1f} s, stalled on writer {self.wait_s:.1f} s, "
                     f"retries {self.retries})")
        if self.dead_letter and (c.failed or c.skipped):
            lines.append(f"  dead letters: {self.dead_letter}")
        if not self.complete:
            lines.append("  INCOMPLETE: rerun the same command to resume")
        return "\n".join(lines)
