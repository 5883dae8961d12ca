"""The encoding side of a run: windows sorted by length, encoder batches, chunks to the writer.

Records are read ahead ``sort_window`` at a time and sorted by text length, so each
encoder batch holds documents of similar length (little padding). Encoded documents are
grouped into chunks of ``chunk_size`` and handed to the ``BulkWriter`` thread, which sends
one chunk while the next is being encoded. Input order is not preserved (``_id`` is set),
which is why progress is tracked by the ``Watermark`` and not by a counter.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from lr_opensearch.errors import LRError

from .checkpoint import FAILED, SKIPPED, Watermark
from .documents import SparseKeys, build_source
from .reader import Record
from .report import WARN_PER_REASON, DeadLetter
from .writer import BulkWriter, Doc

logger = logging.getLogger(__name__)

ENCODER_REFUSED = "encoder_refused"
NON_FINITE = "non_finite_vector"
# Texts longer than this many characters per allowed token are cut before tokenizing: the
# encoder would truncate them anyway, and a 10 MB document should not be tokenized whole.
CHARS_PER_TOKEN_CAP = 64


@dataclass(frozen=True)
class Batching:
    """How records become encoder batches and bulk chunks. No defaults here: an ingest's
    come from its ``IngestConfig`` (one definition), a Ray batch's from the batch itself.

    Attributes:
        batching: the batch, chunk and window sizes (:class:`Batching`).
    """

    max_length: int
    batch_size: int
    chunk_size: int
    sort_window: int


class EncodePipeline:
    """Feed records in input order; they come out encoded, in chunks, on the writer.

    Args:
        encoder: a ``DocEncoder`` (``encode(texts) -> DocBatch``).
        keys: the bundle's sparse key cache.
        writer: the started ``BulkWriter``.
        watermark / dead_letter: shared with the writer.
        batching: the batch, chunk and window sizes (:class:`Batching`).
        corpus: its name, for messages.
    """

    def __init__(self, encoder: Any, keys: SparseKeys, writer: BulkWriter, *,
                 watermark: Watermark, dead_letter: DeadLetter, batching: Batching,
                 corpus: str) -> None:
        self.encoder = encoder
        self.keys = keys
        self.writer = writer
        self.watermark = watermark
        self.dead_letter = dead_letter
        self.max_chars = max(4096, batching.max_length * CHARS_PER_TOKEN_CAP)
        self.batch_size = batching.batch_size
        self.chunk_size = batching.chunk_size
        self.sort_window = batching.sort_window
        self.corpus = corpus
        self._window: list[Record] = []
        self._chunk: list[Doc] = []
        self.encoded = 0
        self.encode_s = 0.0
        self.wait_s = 0.0
        self._truncations: dict[str, int] = {}

    def add(self, record: Record) -> None:
        self._window.append(record)
        if len(self._window) >= self.sort_window:
            self._flush_window()

    def finish(self) -> None:
        """Encode what is left and hand the last, partial chunk to the writer."""
        self._flush_window()
        if self._chunk:
            self.wait_s += self.writer.put(self._chunk)
            self._chunk = []

    def _flush_window(self) -> None:
        window = sorted(self._window, key=lambda r: len(r.title) + len(r.text), reverse=True)
        self._window = []
        for start in range(0, len(window), self.batch_size):
            self._encode_batch(window[start:start + self.batch_size])

    def _encode_batch(self, records: list[Record]) -> None:
        texts, cut = [], []
        for r in records:
            text = r.encoder_text()
            cut.append(len(text) > self.max_chars)
            texts.append(text[: self.max_chars])
        t0 = time.perf_counter()
        try:
            batch = self.encoder.encode(texts)
        except LRError:
            self.encode_s += time.perf_counter() - t0
            self._encode_one_by_one(records, texts, cut)
            return
        self.encode_s += time.perf_counter() - t0
        for i, record in enumerate(records):
            self._emit(record, batch.dense[i], batch.sparse[i], batch.truncated[i] or cut[i])

    def _encode_one_by_one(self, records: list[Record], texts: list[str], cut: list[bool]) -> None:
        """A batch the encoder refused: find the document(s) at fault, encode the others."""
        for record, text, was_cut in zip(records, texts, cut, strict=True):
            t0 = time.perf_counter()
            try:
                one = self.encoder.encode([text])
            except LRError as exc:
                self._fail(record, SKIPPED, ENCODER_REFUSED, str(exc))
                continue
            finally:
                self.encode_s += time.perf_counter() - t0
            self._emit(record, one.dense[0], one.sparse[0], one.truncated[0] or was_cut)

    def _emit(self, record: Record, dense: np.ndarray, sparse: dict[int, float],
              truncated: bool) -> None:
        if not np.isfinite(dense).all():
            self._fail(record, FAILED, NON_FINITE, "the doc encoder produced a non-finite "
                       "dense vector (NaN/inf); the model or its dtype is broken")
            return
        if truncated:
            self._warn_truncated(record)
        source = build_source(record, dense, sparse, self.keys)
        self._chunk.append(Doc(record.line, record.id, source, truncated, record.title_only))
        self.encoded += 1
        if len(self._chunk) >= self.chunk_size:
            self.wait_s += self.writer.put(self._chunk)
            self._chunk = []

    def _fail(self, record: Record, kind: str, reason: str, message: str) -> None:
        self.dead_letter.add(line=record.line, doc_id=record.id, kind=kind, reason=reason,
                             message=message)
        self.watermark.settle(record.line, kind, reason=reason)

    def _warn_truncated(self, record: Record) -> None:
        """Say so. Documents past the character cap (e.g. a 10 MB record) get a WARNING each
        (first 20); ordinary truncation, common with a 256-token encoder, an INFO line for the
        first 20. All are counted in the summary."""
        chars = len(record.title) + len(record.text)
        huge = chars > self.max_chars
        key = "huge" if huge else "long"
        n = self._truncations[key] = self._truncations.get(key, 0) + 1
        level = (logging.WARNING if huge else logging.INFO) if n <= WARN_PER_REASON else logging.DEBUG
        logger.log(level, "%s:%d (id %r): %s%d characters of title + text, truncated to the "
                   "encoder's max length (the stored text is complete)", self.corpus, record.line,
                   record.id, "very long document: " if huge else "", chars)
        if n == WARN_PER_REASON:
            logger.log(level, "further %s truncated documents are only counted in the summary",
                       "very long" if huge else "")
