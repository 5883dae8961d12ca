"""One ingest session's state around the pipeline: connection, checkpoint, dead letters,
bulk-load settings (held through the index's shared record, ``load_lease``). Shared by ``run`` (one worker) and the app's multi-worker launcher."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch.errors import LRError

from .checkpoint import CheckpointFile, CheckpointKey, CheckpointState
from .config import IngestConfig
from .index_setup import current_settings, final_refresh, restore_settings
from .load_lease import join_load, leave_load

if TYPE_CHECKING:
    from lr_opensearch.engine.adapter import EngineAdapter

logger = logging.getLogger(__name__)


def connect(config: IngestConfig) -> Any:
    """The client for ``config.connection`` (env LR_OPENSEARCH_* as defaults): OpenSearch or
    Elasticsearch, as ``connection.engine`` says or the cluster answers."""
    from lr_opensearch.engine.client import connect as connect_cluster

    c = config.connection
    return connect_cluster(c.url, engine=c.engine, user=c.user, password=c.password,
                           ca_certs=c.ca_certs, verify_certs=c.verify_certs, timeout=c.timeout)


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


def run_id(ck: CheckpointFile | None) -> str:
    """This run in the index's shared load record: its checkpoint (so a rerun after a crash
    takes the crashed run's place), or a one-off id when reading stdin."""
    return ck.path.stem if ck is not None else f"stdin-{socket.gethostname()}-{os.getpid()}"


@contextlib.contextmanager
def bulk_load(adapter: EngineAdapter, config: IngestConfig, ck: CheckpointFile | None,
              state: CheckpointState) -> Iterator[None]:
    """Load settings on the index for the body (``load_lease``). If the body fails or is
    interrupted, this run leaves the shared record before the error goes on, so the
    settings come back unless another run is still loading; a failure to restore them is
    logged and never hides the original error. On success the caller calls ``end_load``.
    """
    enabled = config.bulk_settings.enabled
    rid = run_id(ck)
    if enabled:
        state.original_settings = join_load(adapter, config.index, rid, Path(config.state_dir),
                                            fallback=state.original_settings)
        if ck is not None:
            ck.save(state)
    try:
        yield
    except BaseException:
        if enabled:
            try:
                leave_load(adapter, config.index, rid, Path(config.state_dir), config.bulk_settings)
            except Exception as exc:  # noqa: BLE001 - the run's own error is the one to report
                logger.warning("index %s: could not restore its settings after the failure "
                               "(%s); the rerun restores them", config.index, exc)
        raise


def end_load(adapter: EngineAdapter, config: IngestConfig, ck: CheckpointFile | None,
             state: CheckpointState) -> None:
    """After a complete load: restore the settings (the last run out), refresh, mark the
    checkpoint complete."""
    wanted = config.bulk_settings
    if wanted.enabled:
        leave_load(adapter, config.index, run_id(ck), Path(config.state_dir), wanted)
    elif wanted.refresh_interval is not None or wanted.replicas is not None:
        restore_settings(adapter, config.index, current_settings(adapter, config.index), wanted)
    final_refresh(adapter, config.index)
    state.complete = True
    if ck is not None:
        ck.save(state)
