"""``python -m ingest.bulk CORPUS --bundle B --index I``: put a corpus into an index.

The library entry is ``run(IngestConfig) -> IngestSummary``; ``main`` only parses arguments
(``ingest.cli``) and prints the summary. One run:

1. loads the bundle, connects, creates the index from the template (or checks that the
   existing index was built with this bundle: a mismatch stops here, nothing written);
2. loads the checkpoint of this corpus / index / bundle / worker split, if any;
3. switches the index to bulk-load settings (remembering the old ones in the checkpoint);
4. reads, validates, encodes (length-sorted batches) and bulk-writes (writer thread),
   checkpointing after every acknowledged chunk;
5. restores the settings, refreshes, marks the checkpoint complete and returns the summary.

``--workers N`` without ``--worker-id`` runs ``ingest.launcher``: N local processes.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from pathlib import Path
from typing import Any

from lr_opensearch.bundle import load_bundle
from lr_opensearch.errors import LRError

from .checkpoint import SKIPPED, CheckpointFile, CheckpointKey, CheckpointState, Watermark
from .config import IngestConfig
from .documents import SparseKeys
from .index_setup import (
    apply_load_settings,
    current_settings,
    ensure_index,
    final_refresh,
    restore_settings,
)
from .pipeline import EncodePipeline
from .progress import Progress
from .reader import CorpusReader, Foreign, Rejection
from .report import DeadLetter, IngestSummary
from .writer import BulkWriter

logger = logging.getLogger("ingest.bulk")  # also when run as __main__


def connect(config: IngestConfig) -> Any:
    """An OpenSearch client for ``config.connection`` (env LR_OPENSEARCH_* as defaults)."""
    from lr_opensearch.client import make_client

    c = config.connection
    kwargs: dict[str, Any] = {"user": c.user, "password": c.password, "ca_certs": c.ca_certs,
                              "verify_certs": c.verify_certs, "timeout": c.timeout}
    return make_client(c.url, **kwargs) if c.url else make_client(**kwargs)


def checkpoint_file(config: IngestConfig, bundle_id: str) -> CheckpointFile | None:
    """The checkpoint of this run, or None when reading stdin (which cannot be resumed)."""
    if config.is_stdin:
        return None
    worker_id, workers = config.split
    key = CheckpointKey.for_run(config.corpus, config.index, bundle_id, worker_id, workers)
    return CheckpointFile(Path(config.state_dir) / f"{key.stem()}.json", key)


def dead_letter_path(config: IngestConfig, ck: CheckpointFile | None) -> Path:
    worker_id, workers = config.split
    if config.dead_letter is not None:
        p = Path(config.dead_letter)
        return p if workers == 1 else p.with_name(f"{p.name}.w{worker_id}of{workers}")
    if ck is not None:
        return ck.path.with_name(ck.path.stem + ".dead-letter.jsonl")
    return Path(config.state_dir) / f"{config.index}-stdin.dead-letter.jsonl"


def load_state(config: IngestConfig, ck: CheckpointFile | None) -> CheckpointState:
    """The state to start from: the saved checkpoint, or a fresh one (``--restart``)."""
    if ck is None:
        logger.info("reading stdin: no checkpoint is kept; a rerun starts over (documents sent "
                    "again simply overwrite themselves)")
        return CheckpointState(key=None)
    saved = None
    try:
        saved = ck.load()
    except LRError:
        if not config.restart:
            raise
    if saved is not None and not config.restart:
        if saved.line:
            logger.info("resuming %s after line %d (%d documents already indexed)",
                        config.corpus, saved.line, saved.counts.indexed)
        return saved
    fresh = CheckpointState(key=ck.key)
    if saved is not None:
        logger.info("--restart: ignoring the checkpoint at line %d of %s", saved.line, config.corpus)
        if not saved.complete:  # the load settings of the killed run are still on the index
            fresh.original_settings = saved.original_settings
        ck.save(fresh)  # before the dead-letter file is emptied: the two must agree
    _warn_stale_checkpoints(ck)
    return fresh


def _warn_stale_checkpoints(ck: CheckpointFile) -> None:
    prefix = ck.path.name.rsplit("-", 1)[0]
    for other in ck.path.parent.glob(f"{prefix}-*.json"):
        if other != ck.path:
            logger.warning("ignoring checkpoint %s: it was written for another version of the "
                           "corpus (size or modification time differ), so this run starts over",
                           other)


def run(config: IngestConfig, *, client: Any = None, encoder: Any = None) -> IngestSummary:
    """Ingest ``config.corpus`` into ``config.index``; see the module docstring.

    Args:
        config: the run's settings.
        client: an OpenSearch client to use instead of connecting (tests, benchmarks).
        encoder: a loaded ``DocEncoder`` of the same bundle to use instead of loading one.

    Raises:
        BundleMismatchError: the index exists with another bundle (nothing written).
        IngestError: the cluster kept refusing writes, the corpus changed under a
            checkpoint, ... (rerun the same command to resume).
    """
    if config.workers > 1 and config.worker_id is None:
        from .launcher import launch

        return launch(config)
    started = time.perf_counter()
    bundle = load_bundle(config.bundle)
    client = client if client is not None else connect(config)
    ensure_index(client, config.index, bundle)
    ck = checkpoint_file(config, bundle.bundle_id)
    with ck.exclusive() if ck is not None else contextlib.nullcontext():
        return _ingest(config, client, encoder, bundle, ck, started)


def _ingest(config: IngestConfig, client: Any, encoder: Any, bundle: Any,
            ck: CheckpointFile | None, started: float) -> IngestSummary:
    """``run`` once the index is checked and the checkpoint locked."""
    state = load_state(config, ck)
    summary = IngestSummary(index=config.index, corpus=config.corpus, workers=config.workers,
                            resumed_from_line=state.line, checkpoint=str(ck.path) if ck else None)
    if state.complete:
        logger.info("%s is already fully ingested into %s (checkpoint %s); use --restart to "
                    "ingest it again", config.corpus, config.index, ck.path if ck else "")
        summary.counts, summary.complete = state.counts, True
        summary.dead_letter = state.dead_letter
        return summary
    if config.bulk_settings.enabled:
        _begin_load(client, config, ck, state)
    if encoder is None:
        from lr_opensearch.model import DocEncoder

        encoder = DocEncoder.from_bundle(bundle, device=config.device, batch_size=config.batch_size)
    dl = DeadLetter(dead_letter_path(config, ck), corpus=config.corpus, index=config.index,
                    keep_through_line=state.line)
    state.dead_letter = summary.dead_letter = str(dl.path)
    try:
        _load(config, client, encoder, bundle, ck, state, dl, summary)
    finally:
        dl.close()
    _end_load(client, config, ck, state)
    summary.counts, summary.complete = state.counts, True
    summary.extra["wall_s"] = time.perf_counter() - started  # with model loading, settings
    return summary


def _begin_load(client: Any, config: IngestConfig, ck: CheckpointFile | None,
                state: CheckpointState) -> None:
    if state.original_settings is None:
        state.original_settings = current_settings(client, config.index)
        if ck is not None:  # saved before changing anything, so a crash cannot lose them
            ck.save(state)
    apply_load_settings(client, config.index)


def _end_load(client: Any, config: IngestConfig, ck: CheckpointFile | None,
              state: CheckpointState) -> None:
    wanted = config.bulk_settings
    if wanted.enabled:
        restore_settings(client, config.index, state.original_settings, wanted)
    elif wanted.refresh_interval is not None or wanted.replicas is not None:
        restore_settings(client, config.index, current_settings(client, config.index), wanted)
    final_refresh(client, config.index)
    state.complete = True
    if ck is not None:
        ck.save(state)


def _load(config: IngestConfig, client: Any, encoder: Any, bundle: Any, ck: CheckpointFile | None,
          state: CheckpointState, dl: DeadLetter, summary: IngestSummary) -> None:
    """Read, encode and write everything after the checkpoint; updates ``state``/``summary``."""
    wm = Watermark(state.line, state.offset, state.counts)

    def save_checkpoint() -> None:
        if wm.advance() and ck is not None:
            dl.sync()
            state.line, state.offset, state.counts = wm.snapshot()
            ck.save(state)

    writer = BulkWriter(client, config.index, watermark=wm, dead_letter=dl,
                        on_chunk_done=save_checkpoint, retry=config.retry,
                        queue_chunks=config.queue_chunks,
                        max_chunk_bytes=config.max_chunk_bytes).start()
    pipeline = EncodePipeline(encoder, SparseKeys(bundle.tokenizer), writer, watermark=wm,
                              dead_letter=dl, max_length=bundle.config.max_length,
                              batch_size=config.batch_size, chunk_size=config.chunk_size,
                              sort_window=config.sort_window, corpus=config.corpus)
    reader = CorpusReader(config.corpus, worker=config.split, resume_line=state.line,
                          resume_offset=state.offset)
    t0 = time.perf_counter()
    try:
        with Progress(config, reader, initial_line=state.line) as progress:
            for item in reader:
                if isinstance(item, Foreign):
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
    wm.advance()
    dl.sync()
    state.line, state.offset, state.counts = wm.snapshot()
    if ck is not None:
        ck.save(state)
    summary.elapsed_s = time.perf_counter() - t0
    summary.docs_this_run = pipeline.encoded
    summary.encode_s, summary.wait_s = pipeline.encode_s, pipeline.wait_s
    summary.write_s, summary.retries = writer.write_s, writer.retries
    if wm.pending:  # internal invariant: every registered line got an outcome
        raise AssertionError(f"{wm.pending} lines still pending after the writer finished")


def exit_code(summary: IngestSummary) -> int:
    """0: every record indexed; 3: complete, but some lines were skipped or failed."""
    c = summary.counts
    return 0 if c.failed == 0 and c.skipped == 0 else 3


def main(argv: list[str] | None = None) -> int:
    from .cli import config_from_args, configure_logging, parse_args, write_summary

    args = parse_args(argv)
    configure_logging(args)
    try:
        config = config_from_args(args)
        summary = run(config)
    except LRError as exc:
        logging.getLogger("ingest").error("%s", exc)
        return 1
    except KeyboardInterrupt:
        logging.getLogger("ingest").error("interrupted; rerun the same command to resume")
        return 130
    write_summary(summary, config, quiet=args.quiet)
    return exit_code(summary)


if __name__ == "__main__":
    sys.exit(main())
