"""Put a corpus into an index: ``run(IngestConfig) -> IngestSummary``.

The one indexing call of the project: ``python -m ingest.bulk`` / ``lr ingest`` (the app,
with its worker launcher), ``lr eval`` and ``lr demo`` all call it. One run:

1. loads the bundle, connects (OpenSearch or Elasticsearch: the engine adapter does the rest),
   creates the index from the engine's template (or checks that the
   existing index was built with this bundle: a mismatch stops here, nothing written);
2. loads the checkpoint of this corpus / index / bundle / worker split, if any;
3. switches the index to bulk-load settings (remembering the old ones in the checkpoint);
4. reads, validates, encodes (length-sorted batches) and bulk-writes (writer thread),
   checkpointing after every acknowledged chunk;
5. restores the settings, refreshes, marks the checkpoint complete and returns the summary.

Several local worker processes (``--workers N``) are the app's job: ``ingest.launcher``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.seismic import RANK_FEATURES
from lr_opensearch.errors import ConfigError, CorpusError, EngineError, IngestError, QueryError

from .checkpoint import SKIPPED, CheckpointFile, CheckpointState, Watermark
from .config import IngestConfig
from .documents import SparseKeys
from .index_setup import check_same_copy, ensure_index, index_layout
from .outputs import check_outputs
from .pipeline import Batching, EncodePipeline
from .progress import Progress
from .provenance import check_default_target, record_corpus
from .reader import (
    TRUNCATED,
    CorpusReader,
    Foreign,
    Rejection,
    Truncation,
    check_corpus,
    check_not_empty,
)
from .report import DeadLetter, IngestSummary
from .session import bulk_load, checkpoint_file, connect, dead_letter_path, end_load, load_state
from .writer import BulkWriter

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.engine.adapter import EngineAdapter

logger = logging.getLogger(__name__)


def run(config: IngestConfig, *, client: Any = None, encoder: Any = None) -> IngestSummary:
    """Ingest ``config.corpus`` into ``config.index``; see the module docstring.

    Args:
        config: the run's settings.
        client: an OpenSearch or Elasticsearch client to use instead of connecting (tests,
            benchmarks, ``lr eval``).
        encoder: a loaded ``DocEncoder`` of the same bundle to use instead of loading one.

    Raises:
        BundleMismatchError: the index exists with another bundle (nothing written).
        IngestError: the cluster kept refusing writes, the corpus changed under a
            checkpoint, ... (rerun the same command to resume).
    """
    if config.workers > 1 and config.worker_id is None:
        raise ConfigError(f"run() is one worker; {config.workers} workers need a worker_id each, "
                          "or the launcher: python -m ingest.bulk ... --workers N")
    started = time.perf_counter()
    check_corpus(config.corpus)
    check_not_empty(config.corpus)
    if config.device is not None and encoder is None:
        from lr_opensearch.model.device import check_device

        check_device(config.device)
    bundle = load_bundle(config.bundle)
    _fit_hint(bundle, config)
    from lr_opensearch.engine.factory import make_adapter

    check_outputs(config, checkpoint_file(config, bundle.bundle_id))
    prepare_state_dir(config)
    with resumable(config):
        adapter = make_adapter(client if client is not None else connect(config))
        check_default_target(adapter, config)
        created = ensure_index(adapter, config.index, bundle, **config.create_opts)
        record_corpus(adapter, config)
        # the documents are written for the layout the index records
        config = dataclasses.replace(config, sparse_layout=index_layout(
            adapter, config.index, config.sparse_layout))
        copy = IndexCopy(created, adapter.index_settings(config.index).get("uuid"))
        ck = checkpoint_file(config, bundle.bundle_id)
        with ck.exclusive() if ck is not None else contextlib.nullcontext():
            return _ingest(config, adapter, encoder, bundle, ck, started, copy)


def preflight(config: IngestConfig, *, client: Any = None) -> None:
    """The checks of ``run`` that need no bundle, for callers about to spend minutes on one
    (zero-config ingest fits it first): the corpus has documents, the state folder is
    writable, the target is one index that takes documents and, under a default name,
    holds this corpus; no output file is the corpus or a file not its own. Changes nothing.

    Raises:
        ConfigError, CorpusError, IndexRefusedError, IngestError: as ``run`` would.
    """
    from lr_opensearch.engine.factory import make_adapter

    from .index_setup import check_target, check_writable

    check_corpus(config.corpus)
    check_not_empty(config.corpus)
    check_outputs(config, None)
    prepare_state_dir(config)
    with resumable(config):
        adapter = make_adapter(client if client is not None else connect(config))
        check_target(adapter, config.index)
        check_default_target(adapter, config)
        if adapter.index_exists(config.index):
            check_writable(adapter, config.index)


def prepare_state_dir(config: IngestConfig) -> None:
    """Make the checkpoint folder (and the dead-letter file's) before the index is touched.

    Raises:
        ConfigError: a folder cannot be made or written, naming it and the option to change.
    """
    folders = [("--state-dir", Path(config.state_dir))]
    if config.dead_letter is not None:
        folders.append(("--dead-letter", Path(config.dead_letter).parent))
    for option, folder in folders:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = folder / f".lr-write-test-{os.getpid()}"
            probe.touch()
            probe.unlink()
        except OSError as exc:
            raise ConfigError(f"{option}: cannot write to {folder} ({exc.strerror or exc}); "
                              f"give {option} a writable folder (nothing was changed)") from None


@contextlib.contextmanager
def resumable(config: IngestConfig) -> Iterator[None]:
    """The cluster stopped answering (or refused an administrative call) mid-run: say that
    nothing acknowledged is lost and that the same command resumes."""
    try:
        yield
    except EngineError as exc:
        raise IngestError(f"{exc}. Nothing acknowledged is lost: once the cluster answers, "
                          f"rerun the same command to resume (index {config.index!r})") from exc


def _fit_hint(bundle: Bundle, config: IngestConfig) -> None:
    """One hint when the bundle's query tables were fitted to other corpora than this one."""
    from lr_opensearch.fit.pseudo import fitted_on

    corpus = config.corpus
    if bundle.fit and not config.is_stdin and Path(corpus).is_file() and not fitted_on(bundle.fit, corpus):
        logger.info("hint: bundle %s was fitted to %s, not to %s; queries over this corpus are "
                    "best served by a bundle fitted to it (lr bundle build --fit-corpus %s)",
                    bundle.path, [c["name"] for c in bundle.fit["corpora"]], config.corpus,
                    config.corpus)


@dataclass(frozen=True)
class IndexCopy:
    """Which copy of the index this run writes to: created by this run, and its uuid."""

    created: bool
    uuid: str | None


def _own_state(config: IngestConfig, ck: CheckpointFile | None,
               copy: IndexCopy) -> CheckpointState:
    """The checkpoint's state if it belongs to this copy of the index, else a fresh one: a
    checkpoint that says "done up to line N" for an index this run just created, or one of
    another uuid (deleted and recreated, or the same name on another cluster), describes
    documents that are not there."""
    state = load_state(config, ck)
    progressed = state.line > 0 or state.complete
    other = state.index_uuid is not None and copy.uuid is not None and state.index_uuid != copy.uuid
    if progressed and (copy.created or other):
        logger.warning("the checkpoint %s describes another copy of index %s (%s); this one "
                       "is ingested from the start", ck.path if ck else "", config.index,
                       "created by this run" if copy.created else f"uuid {state.index_uuid}, "
                       f"now {copy.uuid}")
        state = CheckpointState(key=state.key)
    state.index_uuid = copy.uuid
    return state


def _ingest(config: IngestConfig, adapter: EngineAdapter, encoder: Any, bundle: Bundle,
            ck: CheckpointFile | None, started: float, copy: IndexCopy) -> IngestSummary:
    """``run`` once the index is checked and the checkpoint locked."""
    state = _own_state(config, ck, copy)
    summary = IngestSummary(index=config.index, corpus=config.corpus, workers=config.workers,
                            resumed_from_line=state.line, checkpoint=str(ck.path) if ck else None)
    if state.complete:
        logger.info("%s is already fully ingested into %s (checkpoint %s); use --restart to "
                    "ingest it again", config.corpus, config.index, ck.path if ck else "")
        summary.counts, summary.complete = state.counts, True
        summary.dead_letter = state.dead_letter
        return summary
    dl = DeadLetter(dead_letter_path(config, ck), corpus=config.corpus, index=config.index,
                    keep_through_line=state.line)
    state.dead_letter = summary.dead_letter = str(dl.path)
    try:
        with bulk_load(adapter, config, ck, state):
            if encoder is None:
                from lr_opensearch.model.runtime import open_doc_encoder

                encoder = open_doc_encoder(bundle, runtime=config.runtime, device=config.device,
                                           batch_size=config.batch_size,
                                           precision=config.encode_precision)
            _load(_Load(config, adapter, bundle, ck, state, dl, summary,
                         Watermark(state.line, state.offset, state.counts)), encoder)
    finally:
        dl.close()
    end_load(adapter, config, ck, state)
    summary.counts, summary.complete = state.counts, True
    _calibrate(adapter, config, bundle)
    summary.extra["wall_s"] = time.perf_counter() - started  # with model loading, settings
    return summary


def _calibrate(adapter: EngineAdapter, config: IngestConfig, bundle: Bundle) -> None:
    """Measure the legs' score scales on the loaded index (``fusion="calibrated"``); with
    several workers each is one of many writers, so none calibrates (it is said once)."""
    from lr_opensearch.search.calibration import calibrate

    if config.workers > 1:
        logger.info("%d workers: calibrate the index once all are done: lr index calibrate "
                    "--index %s", config.workers, config.index)
        return
    try:
        calibrate(adapter, config.index, bundle)
    except (EngineError, ConfigError, QueryError) as exc:
        logger.warning("the index is loaded but not calibrated (%s); fusion='calibrated' needs "
                       "`lr index calibrate --index %s`", exc, config.index)


@dataclass
class _Load:
    """What one run's load works with, passed as one object (they went down two levels as
    eight arguments), and the one checkpoint save."""

    config: IngestConfig
    adapter: EngineAdapter
    bundle: Bundle
    ck: CheckpointFile | None
    state: CheckpointState
    dl: DeadLetter
    summary: IngestSummary
    wm: Watermark

    def record(self, *, final: bool = False) -> None:
        """Move the watermark up to the lines whose every outcome is known and, when it
        moved (or at the end), sync the dead letters and save the checkpoint: a saved line
        never runs ahead of its dead letters."""
        moved = self.wm.advance()
        if not final and (not moved or self.ck is None):
            return
        self.dl.sync()
        self.state.line, self.state.offset, self.state.counts = self.wm.snapshot()
        if self.ck is not None:
            self.ck.save(self.state)

    def chunk_done(self) -> None:
        """After each acknowledged chunk: the chunk was acknowledged by this copy of the
        index, not by one the engine created from the writes after the index was deleted;
        then the checkpoint."""
        check_same_copy(self.adapter, self.config.index, self.state.index_uuid)
        self.record()


def _load(run: _Load, encoder: Any) -> None:
    """Read, encode and write everything after the checkpoint; updates the run's state and
    summary."""
    config, adapter, bundle, state, dl, wm = (run.config, run.adapter, run.bundle, run.state,
                                              run.dl, run.wm)
    writer = BulkWriter(adapter, config.index, watermark=wm, dead_letter=dl,
                        on_chunk_done=run.chunk_done, retry=config.retry,
                        queue_chunks=config.queue_chunks,
                        max_chunk_bytes=config.max_chunk_bytes).start()
    keys = SparseKeys(bundle.tokenizer, config.sparse_layout or RANK_FEATURES)
    batching = Batching(bundle.config.max_length, config.batch_size, config.chunk_size,
                        config.sort_window)
    pipeline = EncodePipeline(encoder, keys, writer, watermark=wm, dead_letter=dl,
                              batching=batching, corpus=config.corpus)
    reader = CorpusReader(config.corpus, worker=config.split, resume_line=state.line,
                          resume_offset=state.offset, report_truncation=True)
    cut: Truncation | None = None
    t0 = time.perf_counter()
    try:
        with Progress(config, reader, initial_line=state.line) as progress:
            for item in reader:
                if isinstance(item, Truncation):
                    cut = item
                    dl.add(line=item.line, doc_id=None, kind=SKIPPED, reason=TRUNCATED,
                           message=item.message)
                elif isinstance(item, Foreign):
                    wm.passed(item.line, item.end_offset)
                elif isinstance(item, Rejection):
                    wm.register(item.line, item.end_offset, SKIPPED, reason=item.reason)
                    dl.add(line=item.line, doc_id=item.id, kind=SKIPPED, reason=item.reason,
                           message=item.message, excerpt=item.excerpt)
                else:
                    wm.register(item.line, item.end_offset)
                    pipeline.add(item)
                progress.update(pipeline.encoded)
            pipeline.finish()
            writer.close()
            progress.update(pipeline.encoded, force=True)
    except BaseException:
        writer.abort()  # no writes after run() has failed
        raise
    run.record(final=True)
    summary = run.summary
    summary.elapsed_s = time.perf_counter() - t0
    summary.docs_this_run = pipeline.encoded
    summary.encode_s, summary.wait_s = pipeline.encode_s, pipeline.wait_s
    summary.write_s, summary.retries = writer.write_s, writer.retries
    if wm.pending:  # internal invariant: every registered line got an outcome
        raise AssertionError(f"{wm.pending} lines still pending after the writer finished")
    if cut is not None:  # everything readable is in; the run cannot be complete
        raise CorpusError(f"{cut.message}. The {state.counts.indexed} documents read before it "
                          f"are indexed; dead letters: {dl.path}")


def exit_code(summary: IngestSummary) -> int:
    """0: every record indexed; 3: complete, but some lines were skipped or failed."""
    c = summary.counts
    return 0 if c.failed == 0 and c.skipped == 0 else 3
