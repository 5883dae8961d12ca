"""One ingest session's state around the pipeline: connection, checkpoint, dead letters,
bulk-load settings. Shared by ``run`` (one worker) and the app's multi-worker launcher."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch.errors import LRError

from .checkpoint import CheckpointFile, CheckpointKey, CheckpointState
from .config import IngestConfig
from .index_setup import apply_load_settings, current_settings, final_refresh, restore_settings

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


def begin_load(adapter: EngineAdapter, config: IngestConfig, ck: CheckpointFile | None,
                state: CheckpointState) -> None:
    if state.original_settings is None:
        state.original_settings = current_settings(adapter, config.index)
        if ck is not None:  # saved before changing anything, so a crash cannot lose them
            ck.save(state)
    apply_load_settings(adapter, config.index)


def end_load(adapter: EngineAdapter, config: IngestConfig, ck: CheckpointFile | None,
              state: CheckpointState) -> None:
    wanted = config.bulk_settings
    if wanted.enabled:
        restore_settings(adapter, config.index, state.original_settings, wanted)
    elif wanted.refresh_interval is not None or wanted.replicas is not None:
        restore_settings(adapter, config.index, current_settings(adapter, config.index), wanted)
    final_refresh(adapter, config.index)
    state.complete = True
    if ck is not None:
        ck.save(state)
