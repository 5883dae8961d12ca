"""The bulk-load settings of an index, shared by every run that loads into it.

During a load an index has ``refresh_interval: -1`` and ``number_of_replicas: 0``. The
values found before the first load are recorded ONCE, in the index itself (the mapping's
``_meta.lightretriever_load``), together with the runs now loading::

    {"original": {"refresh_interval": "7s", "number_of_replicas": 1},
     "runs": {"<run id>": {"host": "...", "pid": 123, "since": 1700000000.0}}}

A run joins the record before it switches the index to load settings (so a second run,
through another corpus file, never mistakes the first run's ``-1`` for the original), and
leaves it on every way out: success, error, Ctrl-C, SIGTERM (the app turns it into an
interrupt). The last run to leave restores the original and removes the record; a run that
leaves while others still load folds its ``--refresh-interval`` / ``--replicas`` into the
original instead. A run that died without leaving (SIGKILL, power loss) stays in the
record: on this machine a dead process is noticed and dropped by the next run that leaves;
its own rerun (same run id) takes its place and leaves as usual.

Runs on one machine that share a state directory join and leave under a file lock (the
record and the settings change together); every change of the record is one
``EngineAdapter.update_meta`` of its key, so other ``_meta`` keys written at the same time
(a calibration, the corpora, in-cluster models) are kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch.engine.lease import process_alive

from .config import BulkSettings
from .index_setup import LOAD_SETTINGS, apply_load_settings, current_settings, restore_settings

if TYPE_CHECKING:
    from lr_opensearch.engine.adapter import EngineAdapter

logger = logging.getLogger(__name__)

LOAD_KEY = "lightretriever_load"  # beside _meta.lightretriever


def _host() -> str:
    return socket.gethostname()


@contextlib.contextmanager
def _locked(state_dir: Path, index: str) -> Iterator[None]:
    """Serialise record updates of runs on this machine (a blocking ``flock``; it dies with
    its process)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / f".{index}.load.lock", "a+") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def join_load(adapter: EngineAdapter, index: str, run_id: str, state_dir: Path, *,
              fallback: dict[str, Any] | None = None) -> dict[str, Any]:
    """Enter this run in the record (creating it with the current settings if no run is
    loading), then switch the index to load settings. Returns the original settings.

    ``fallback``: original settings an older version kept in the run's checkpoint, used
    when the index has no record (a run of that version died mid-load).
    """
    def enter(record: Any) -> dict[str, Any]:
        if not isinstance(record, dict):
            record = {"original": _original(adapter, index, fallback), "runs": {}}
        record["runs"][run_id] = {"host": _host(), "pid": os.getpid(), "since": time.time()}
        return record

    with _locked(state_dir, index):
        record = adapter.update_meta(index, LOAD_KEY, enter)
        others = sorted(set(record["runs"]) - {run_id})
        apply_load_settings(adapter, index)
    if others:
        logger.info("index %s: %d other run(s) are loading too; the last to finish restores "
                    "%s", index, len(others), record["original"])
    return dict(record["original"])


def _original(adapter: EngineAdapter, index: str, fallback: dict[str, Any] | None) -> dict[str, Any]:
    found = current_settings(adapter, index)
    loading = {k: str(v) for k, v in found.items()} == {k: str(v) for k, v in LOAD_SETTINGS.items()}
    # load settings but no record: a run of an older version died mid-load, and only its
    # checkpoint knows what was there before
    return dict(fallback) if fallback and loading else found


def leave_load(adapter: EngineAdapter, index: str, run_id: str, state_dir: Path,
               wanted: BulkSettings) -> bool:
    """Take this run out of the record; the last run out restores the original settings
    (or ``wanted``'s values) and removes the record. Returns True if it restored them."""
    def leave(record: Any) -> Any:
        if not isinstance(record, dict):
            return record
        runs: dict[str, Any] = dict(record.get("runs", {}))
        runs.pop(run_id, None)
        _drop_dead_runs(index, runs)
        original = dict(record.get("original") or {})
        if wanted.refresh_interval is not None:
            original["refresh_interval"] = wanted.refresh_interval
        if wanted.replicas is not None:
            original["number_of_replicas"] = wanted.replicas
        return {"original": original, "runs": runs}

    with _locked(state_dir, index):
        record = adapter.update_meta(index, LOAD_KEY, leave)
        if not isinstance(record, dict):  # removed by hand: nothing known to restore
            logger.warning("index %s: its record of the settings before the load is gone "
                           "(_meta.%s); leaving the settings as they are", index, LOAD_KEY)
            if wanted.refresh_interval is not None or wanted.replicas is not None:
                restore_settings(adapter, index, current_settings(adapter, index), wanted)
            return False
        if record["runs"]:
            _still_loading(index, record["runs"], record["original"])
            return False
        # the settings first, then the record: a run that dies between leaves the record,
        # so the next one still knows the original
        restore_settings(adapter, index, record["original"], BulkSettings())
        adapter.update_meta(index, LOAD_KEY, lambda now: now if isinstance(now, dict)
                            and now.get("runs") else None)
        return True


def _drop_dead_runs(index: str, runs: dict[str, Any]) -> None:
    """Forget runs of this machine whose process is gone (killed without leaving)."""
    here = _host()
    for run_id, who in list(runs.items()):
        if who.get("host") == here and who.get("pid") != os.getpid() and not process_alive(int(who["pid"])):
            logger.info("index %s: run %s (pid %s) died during its load; it no longer holds "
                        "the load settings (its rerun resumes it)", index, run_id, who["pid"])
            del runs[run_id]


def _still_loading(index: str, runs: dict[str, Any], original: dict[str, Any]) -> None:
    here = _host()
    elsewhere = [f"{w.get('host')} pid {w.get('pid')}" for w in runs.values() if w.get("host") != here]
    logger.info("index %s keeps its load settings: %d other run(s) are still loading; the "
                "last to finish restores %s", index, len(runs), original)
    if elsewhere:
        logger.warning("index %s: runs on other machines hold its load settings (%s); if one "
                       "of them died, rerun it there (it resumes and restores the settings)",
                       index, ", ".join(elsewhere))
