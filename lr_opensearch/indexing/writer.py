"""The bulk writer: a thread that sends encoded chunks while the encoder works on the next.

Chunks go through a bounded queue (so memory stays bounded and a slow cluster slows the
encoder down instead of filling RAM). Each chunk is sent with the engine client's own bulk
helper (``opensearchpy.helpers.streaming_bulk`` or ``elasticsearch.helpers.streaming_bulk``,
through :meth:`EngineAdapter.bulk <lr_opensearch.engine.adapter.EngineAdapter.bulk>`); per item:

- acknowledged (2xx): settled as indexed;
- 429, 5xx or no answer (connection error, timeout): retried, only the failed items, with
  exponential backoff and jitter (``RetryPolicy``). If they still fail after the last
  attempt the run stops with ``IngestError``; nothing is lost, since the checkpoint only
  covers acknowledged lines, and rerunning the same command resumes;
- a refusal that concerns the index, not the document (closed, write-blocked, missing:
  ``INDEX_REFUSALS``): the run stops with ``IndexRefusedError`` before the chunk is
  settled, so nothing is dead-lettered and the checkpoint stays at the last acknowledged
  chunk; the same command resumes once the index takes documents again;
- the whole request refused with a status not worth retrying (401, 403, 404, a proxy's
  page, ...: ``refusals.request_refusal``): the run stops the same way with
  ``RequestRefusedError``, saying what the cluster answered and what to do; an answer that
  is not JSON at all stops it too (the adapter's ``EngineError``);
- any other refusal (e.g. 400 mapper_parsing_exception): a permanent, per-document
  failure, written to the dead-letter file with the engine's reason and settled as failed;
- 413 (the request is over the cluster's ``http.max_content_length``): the documents are
  sent again one per request and later requests are made smaller; a document refused
  alone is dead-lettered as ``document_too_large``, with the limit to raise, unless it is
  smaller than ``SMALL_DOCUMENT_BYTES``: no limit is that low in practice, so that refusal
  is about the path to the cluster (a proxy), and the run stops with ``RequestRefusedError``.

After every chunk the ``on_chunk_done`` callback runs (it advances the watermark and saves
the checkpoint), in the writer thread, after all the chunk's items are settled.
"""

from __future__ import annotations

import json
import logging
import queue
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lr_opensearch.errors import EngineError, IndexRefusedError, IngestError, RequestRefusedError

from .checkpoint import FAILED, INDEXED, Watermark
from .config import DEFAULT_MAX_CHUNK_BYTES, RetryPolicy
from .refusals import (
    INDEX_REFUSALS,
    failure_reason,
    is_request_refusal,
    is_retryable,
    request_refusal,
)
from .report import DeadLetter

if TYPE_CHECKING:
    from lr_opensearch.engine.adapter import EngineAdapter

logger = logging.getLogger(__name__)

_STOP = object()
TOO_LARGE = "document_too_large"  # dead-letter reason of a document refused alone with 413
MIN_CHUNK_BYTES = 64 * 1024  # bulk requests are not made smaller than this after a 413
# a document this small refused alone with 413 is not too large: the path to the cluster
# refuses (no body limit is set that low in practice: the engines' default is 100 MB, nginx's 1 MB)
SMALL_DOCUMENT_BYTES = 32 * 1024


@dataclass(frozen=True)
class Doc:
    """One encoded document ready to send: its input line, id and ``_source``."""

    line: int
    id: str
    source: dict[str, Any]
    truncated: bool = False
    title_only: bool = False


class BulkWriter:
    """Send chunks of ``Doc`` to one index from a background thread.

    Args:
        adapter: the engine adapter of the cluster's client (``make_adapter(client)``).
        index: target index.
        watermark: settled here as the engine answers.
        dead_letter: receives permanent per-document failures.
        on_chunk_done: called in the writer thread after each chunk is settled.
        retry: backoff policy for 429 / 5xx / connection failures.
        queue_chunks: how many encoded chunks may wait for the writer.
        max_chunk_bytes: passed to the bulk helper (a chunk larger than this is split).
    """

    def __init__(self, adapter: EngineAdapter, index: str, *, watermark: Watermark, dead_letter: DeadLetter,
                 on_chunk_done: Callable[[], None], retry: RetryPolicy | None = None,
                 queue_chunks: int = 2, max_chunk_bytes: int = DEFAULT_MAX_CHUNK_BYTES) -> None:
        self.adapter = adapter
        self.index = index
        self.watermark = watermark
        self.dead_letter = dead_letter
        self.on_chunk_done = on_chunk_done
        self.retry = retry or RetryPolicy()
        self.max_chunk_bytes = max_chunk_bytes
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=queue_chunks)
        self._rng = random.Random()  # the retry jitter
        self._thread = threading.Thread(target=self._loop, name="lr-bulk-writer", daemon=True)
        self.error: BaseException | None = None
        self._aborted = False
        self.write_s = 0.0
        self.retries = 0
        self.sent = 0

    def start(self) -> BulkWriter:
        self._thread.start()
        return self

    def put(self, chunk: list[Doc]) -> float:
        """Queue a chunk (blocks while the queue is full); returns the seconds spent blocked.

        Raises:
            IngestError: the writer thread has failed (its error is chained).
        """
        t0 = time.perf_counter()
        while True:
            self._raise_if_failed()
            try:
                self._queue.put(chunk, timeout=0.2)
                return time.perf_counter() - t0
            except queue.Full:
                continue

    def close(self) -> None:
        """Send what is queued, stop the thread, and raise its error if it failed."""
        while self._thread.is_alive():
            self._raise_if_failed()
            try:
                self._queue.put(_STOP, timeout=0.2)
                break
            except queue.Full:
                continue
        self._thread.join()
        self._raise_if_failed()

    def abort(self, timeout: float = 30.0) -> None:
        """Stop without sending what is still queued (the run failed elsewhere); the
        checkpoint stays at the last acknowledged chunk, so nothing is lost on resume."""
        self._aborted = True
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        try:
            self._queue.put_nowait(_STOP)
        except queue.Full:
            pass
        self._thread.join(timeout)

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            if isinstance(self.error, IngestError):
                raise self.error
            if isinstance(self.error, EngineError):  # no answer after a chunk (its checks)
                raise IngestError(f"{self.error}. Nothing acknowledged is lost: once the cluster "
                                  "answers, rerun the same command to resume (index "
                                  f"{self.index!r})") from self.error
            raise IngestError(f"the bulk writer for index {self.index!r} failed: "
                              f"{type(self.error).__name__}: {self.error}") from self.error

    def _loop(self) -> None:
        try:
            while (chunk := self._queue.get()) is not _STOP and not self._aborted:
                self.write_chunk(chunk)
                if not self._aborted:
                    self.on_chunk_done()
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.error = exc
            logger.debug("bulk writer failed", exc_info=True)

    def write_chunk(self, chunk: list[Doc]) -> None:
        """Send one chunk until every document is acknowledged or permanently refused."""
        pending = chunk
        for attempt in range(1, self.retry.max_attempts + 1):
            retry: list[tuple[Doc, Any, str]] = []
            results = self._send(pending)
            self._stop_on_refusal(results)
            too_large = [(doc, info) for doc, ok, info in results
                         if not ok and info.get("status") == 413]
            if too_large:
                alone = {id(doc) for doc, _ in too_large}
                results = [r for r in results if id(r[0]) not in alone]
                results += self._send_alone(too_large, len(pending))
            for doc, ok, info in results:
                if ok:
                    self.watermark.settle(doc.line, INDEXED, truncated=doc.truncated,
                                          title_only=doc.title_only)
                    continue
                status = info.get("status")
                kind, message = failure_reason(info)
                if is_retryable(status):
                    retry.append((doc, status, f"{kind}: {message}"))
                else:
                    self._refuse(doc, kind, f"HTTP {status}: {message}")
            if not retry:
                return
            if attempt == self.retry.max_attempts:
                status, why = retry[0][1], retry[0][2]
                raise IngestError(
                    f"index {self.index!r}: {len(retry)} document(s) still refused after "
                    f"{attempt} attempts (last: HTTP {status} {why}). The cluster (or a proxy "
                    "in front of it) is overloaded, failing or unreachable: see its health and "
                    "logs; nothing was lost - rerun the same command to resume.")
            delay = self.retry.delay(attempt, self._rng.random())
            logger.info("index %s: %d of %d document(s) refused (HTTP %s); retry %d in %.2f s",
                        self.index, len(retry), len(pending), retry[0][1], attempt, delay)
            self.retries += 1
            time.sleep(delay)
            pending = [doc for doc, _, _ in retry]

    def _stop_on_refusal(self, results: list[tuple[Doc, bool, dict[str, Any]]]) -> None:
        """Raise before anything of the chunk is settled when the index itself refuses, or
        the cluster refused the whole request with a status not worth retrying (413 is
        the caller's: smaller requests may pass)."""
        for _, ok, info in results:
            if ok:
                continue
            kind, message = failure_reason(info)
            if kind in INDEX_REFUSALS:
                todo = INDEX_REFUSALS[kind].format(index=self.index)
                resume = "" if "--restart" in todo else ", then rerun the same command"
                raise IndexRefusedError(
                    f"index {self.index!r} refuses documents (HTTP {info.get('status')} {kind}: "
                    f"{message}); nothing was lost: the checkpoint stays at the last "
                    f"acknowledged document. {todo[0].upper()}{todo[1:]}{resume}")
            status = info.get("status")
            if is_request_refusal(info) and status != 413 and not is_retryable(status):
                raise RequestRefusedError(request_refusal(info, self.index))

    def _refuse(self, doc: Doc, reason: str, message: str) -> None:
        self.dead_letter.add(line=doc.line, doc_id=doc.id, kind=FAILED, reason=reason,
                             message=message)
        self.watermark.settle(doc.line, FAILED, reason=reason)

    def _send_alone(self, refused: list[tuple[Doc, dict[str, Any]]],
                    sent_with: int) -> list[tuple[Doc, bool, dict[str, Any]]]:
        """HTTP 413: the request was larger than the cluster's ``http.max_content_length``.
        Later chunks go in smaller requests; these documents are sent one per request, and
        one refused alone is too large by itself: dead-lettered with the limit to raise
        (unless it is smaller than any limit: then the path refuses, and the run stops)."""
        if sent_with > 1:
            self.max_chunk_bytes = max(MIN_CHUNK_BYTES, self.max_chunk_bytes // 2)
            logger.warning("index %s: the cluster refused a bulk request of %d documents as too "
                           "large (HTTP 413, over its http.max_content_length); sending them "
                           "one by one, and at most %.1f MB per request from now on", self.index,
                           sent_with, self.max_chunk_bytes / 1e6)
            results = self._send([doc for doc, _ in refused], max_chunk_bytes=1)  # each alone
        else:
            results = [(doc, False, info) for doc, info in refused]
        sizes = {id(doc): len(json.dumps(doc.source, ensure_ascii=False).encode("utf-8"))
                 for doc, ok, info in results if not ok and info.get("status") == 413}
        for doc, _, info in results:
            if sizes.get(id(doc), SMALL_DOCUMENT_BYTES) < SMALL_DOCUMENT_BYTES:
                raise RequestRefusedError(request_refusal(info, self.index))
        out = []
        for doc, ok, info in results:
            if id(doc) in sizes:
                self._refuse(doc, TOO_LARGE, (
                    f"HTTP 413: the document is too large for the cluster: "
                    f"{sizes[id(doc)] / 1e6:.1f} MB of JSON alone exceed its "
                    "http.max_content_length (100mb unless set in opensearch.yml / "
                    "elasticsearch.yml). Shorten or split the document, or raise "
                    "http.max_content_length on every node and rerun with --restart"))
            else:
                out.append((doc, ok, info))
        return out

    def _send(self, docs: list[Doc], *,
              max_chunk_bytes: int | None = None) -> list[tuple[Doc, bool, dict[str, Any]]]:
        """One pass of the bulk helper over ``docs``; results in the same order as ``docs``."""
        actions = [{"_op_type": "index", "_index": self.index, "_id": d.id, "_source": d.source}
                   for d in docs]
        t0 = time.perf_counter()
        results = self.adapter.bulk(actions, max_chunk_bytes=max_chunk_bytes or self.max_chunk_bytes)
        self.write_s += time.perf_counter() - t0
        if len(results) != len(docs):  # internal invariant of the helper
            raise IngestError(f"bulk helper answered {len(results)} items for {len(docs)} documents")
        self.sent += len(docs)
        for d, (_, info) in zip(docs, results, strict=True):
            if info.get("_id", d.id) != d.id:  # internal invariant: answers follow the request
                raise IngestError(f"bulk answer for {info.get('_id')!r} where {d.id!r} was sent")
        return [(d, ok, info) for d, (ok, info) in zip(docs, results, strict=True)]
