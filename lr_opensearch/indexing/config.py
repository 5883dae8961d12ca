"""Settings of one ingest run, as small frozen dataclasses.

``IngestConfig`` is what ``lr_opensearch.indexing.run.run`` takes; the CLI only parses arguments into it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lr_opensearch.engine.clauses import HTTP_MAX_CONTENT_LENGTH
from lr_opensearch.engine.seismic import SeismicIndexParams
from lr_opensearch.errors import ConfigError
from lr_opensearch.options import (
    DEFAULT_ENCODE_PRECISION,
    DEFAULT_RUNTIME,
    ENCODE_PRECISIONS,
    ENGINE_CHOICES,
    RUNTIMES,
    SPARSE_LAYOUTS,
    choice,
)

# bytes per bulk request: half the engines' default limit on a request
DEFAULT_MAX_CHUNK_BYTES = HTTP_MAX_CONTENT_LENGTH // 2

STDIN = "-"
# what the engines accept as index.refresh_interval: -1, 0, or a number with a time unit
TIME_VALUE = re.compile(r"-1|0|\d+(nanos|micros|ms|s|m|h|d)")
# characters the engines refuse in an index name, or that make a name a list / pattern
# (an ingest target is one index)
INDEX_NAME_FORBIDDEN = set('\\/*?"<>| ,#:')


def default_state_dir() -> Path:
    """Where checkpoints (and default dead-letter files) live.

    ``$LR_INGEST_STATE_DIR`` if set, else ``~/.cache/lr-opensearch/ingest``. Not next to the
    corpus: corpora often sit on read-only storage.
    """
    env = os.environ.get("LR_INGEST_STATE_DIR")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "lr-opensearch" / "ingest"


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with jitter for 429 / 5xx / connection failures.

    Attempt ``a`` (1-based) waits ``min(max_backoff, initial_backoff * 2**(a-1))`` seconds
    scaled by a random factor in ``[1 - jitter, 1]``. After ``max_attempts`` failed attempts
    the run stops with an ``IngestError`` (nothing is lost: the checkpoint only covers
    acknowledged documents, so rerunning the command resumes).
    """

    max_attempts: int = 8
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"retry max_attempts must be >= 1, got {self.max_attempts}")
        if self.initial_backoff < 0 or self.max_backoff < self.initial_backoff:
            raise ConfigError("retry backoff must satisfy 0 <= initial_backoff <= max_backoff, got "
                              f"{self.initial_backoff} / {self.max_backoff}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ConfigError(f"retry jitter must be in [0, 1], got {self.jitter}")

    def delay(self, attempt: int, rand: float) -> float:
        """Seconds to sleep after failed attempt number ``attempt`` (1-based); rand in [0, 1)."""
        base = min(self.max_backoff, self.initial_backoff * 2 ** (attempt - 1))
        return base * (1.0 - self.jitter * rand)


@dataclass(frozen=True)
class ConnectionConfig:
    """How to reach the cluster; ``None`` fields fall back to the LR_OPENSEARCH_* environment."""

    url: str | None = None
    user: str | None = None
    password: str | None = None
    ca_certs: str | None = None
    verify_certs: bool = True
    timeout: int = 120
    engine: str = "auto"  # opensearch | elasticsearch | auto (ask the cluster)

    def __post_init__(self) -> None:
        choice("engine", self.engine, ENGINE_CHOICES)
        if self.timeout < 1:
            raise ConfigError(f"--timeout {self.timeout}: a request timeout must be at least 1 s")


@dataclass(frozen=True)
class BulkSettings:
    """Index settings handling around the load.

    enabled: set ``refresh_interval: -1`` and ``number_of_replicas: 0`` during the load and
        restore them afterwards. Off for a worker that is one of several (``--worker-id``)
        unless asked for, because workers would restore each other's load settings.
    refresh_interval / replicas: values to set after the load instead of the ones found
        before it (``None`` = restore what was there).
    """

    enabled: bool = True
    refresh_interval: str | None = None
    replicas: int | None = None

    def __post_init__(self) -> None:  # checked before the run changes anything
        if self.refresh_interval is not None and not TIME_VALUE.fullmatch(self.refresh_interval):
            raise ConfigError(f"--refresh-interval {self.refresh_interval!r} is not a time value: "
                              "use a number with a unit (500ms, 1s, 30s, 1m) or -1 for no "
                              "periodic refresh")
        if self.replicas is not None and self.replicas < 0:
            raise ConfigError(f"--replicas must be >= 0, got {self.replicas}")


@dataclass(frozen=True)
class IngestConfig:
    """Everything one ingest run needs.

    corpus: path of a JSONL / JSONL.gz file in BEIR corpus form, or ``"-"`` for stdin.
    bundle: path of the model bundle (its doc encoder encodes, its id goes into ``_meta``).
    index: target index; created from the template if absent.
    batch_size: documents per encoder forward.
    chunk_size: documents per bulk request (and per checkpoint).
    sort_window: records read ahead and sorted by length before batching (>= batch_size).
    queue_chunks: encoded chunks allowed to wait for the writer (bounds memory).
    workers / worker_id: this process handles the records whose id hashes to ``worker_id``
        modulo ``workers``; ``worker_id=None`` with ``workers > 1`` runs the local launcher.
    device: torch device for the doc encoder (``None`` = the encoder's default).
    encode_precision: one of ``options.ENCODE_PRECISIONS`` (``model.precision``).
    runtime: one of ``options.RUNTIMES`` (``model.runtime``: ONNX Runtime or torch).
    restart: ignore (and replace) an existing checkpoint.
    state_dir: where checkpoints live; dead_letter: JSONL of every record not indexed.
    progress: show a tqdm bar; summary_json: also write the summary there.
    sparse_layout / seismic: the sparse field's layout and SEISMIC parameters when the run
        creates the index (``lr_opensearch.engine.seismic``; None: ``rank_features``); an
        existing index keeps its own (a layout asked for must be that one).
    index_named: the user named the index (``--index``, ``LR_INDEX``); False when it was
        made from the corpus file name, and then an existing index of that name must hold
        this corpus (``indexing.provenance``).
    """

    corpus: str
    bundle: str
    index: str
    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    batch_size: int = 32
    chunk_size: int = 256
    sort_window: int = 1024
    queue_chunks: int = 2
    workers: int = 1
    worker_id: int | None = None
    device: str | None = None
    encode_precision: str = DEFAULT_ENCODE_PRECISION
    runtime: str = DEFAULT_RUNTIME
    restart: bool = False
    state_dir: Path = field(default_factory=default_state_dir)
    dead_letter: Path | None = None
    bulk_settings: BulkSettings = field(default_factory=BulkSettings)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    progress: bool = True
    summary_json: Path | None = None
    max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES
    sparse_layout: str | None = None
    seismic: SeismicIndexParams | None = None
    index_named: bool = True

    @property
    def create_opts(self) -> dict[str, Any]:
        """The index template's options when this run creates the index."""
        opts: dict[str, Any] = {}
        if self.sparse_layout is not None:
            opts["sparse_layout"] = self.sparse_layout
        if self.seismic is not None:
            opts["seismic"] = self.seismic
        return opts

    def __post_init__(self) -> None:
        for name in ("batch_size", "chunk_size", "sort_window", "queue_chunks", "workers"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        choice("--encode-precision", self.encode_precision, ENCODE_PRECISIONS)
        choice("--runtime", self.runtime, RUNTIMES)
        if self.sort_window < self.batch_size:
            raise ConfigError(f"sort_window ({self.sort_window}) must be >= batch_size "
                              f"({self.batch_size})")
        if self.worker_id is not None and not 0 <= self.worker_id < self.workers:
            raise ConfigError(f"worker_id must be in [0, {self.workers}), got {self.worker_id}; "
                              "pass --workers N together with --worker-id K")
        if self.sparse_layout is not None:
            choice("sparse layout", self.sparse_layout, SPARSE_LAYOUTS)
        if not self.index or self.index != self.index.lower() or self.index.startswith(("_", "-")):
            raise ConfigError(f"invalid index name {self.index!r}: use a lowercase name that does "
                              "not start with '_' or '-'")
        bad = sorted(INDEX_NAME_FORBIDDEN & set(self.index))
        if bad:
            raise ConfigError(f"invalid index name {self.index!r}: an ingest target is one index, "
                              f"and {' '.join(repr(c) for c in bad)} make(s) it a list, a pattern "
                              "or a name the engines refuse; name one index with --index NAME")

    @property
    def is_stdin(self) -> bool:
        return self.corpus == STDIN

    @property
    def split(self) -> tuple[int, int]:
        """(worker_id, workers) of this process; (0, 1) when not split."""
        return (self.worker_id or 0, self.workers)
