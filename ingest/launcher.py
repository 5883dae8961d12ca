"""``--workers N`` without ``--worker-id``: run N worker processes on this machine.

The launcher prepares the index once (creation or bundle check, bulk-load settings, with
the previous settings saved in its own checkpoint file), starts ``python -m ingest.bulk ...
--workers N --worker-id K`` for K = 0..N-1 (each with its own checkpoint, dead-letter file
and 1/N of the CPU threads or its own GPU), shows the overall progress from the workers'
checkpoints, then sums their summaries, restores the settings and refreshes.

On several machines, run ``python -m ingest.bulk ... --workers N --worker-id K`` on each
instead: the split (CRC32 of the record id mod N) is the same everywhere.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.errors import ConfigError, IngestError
from lr_opensearch.indexing.checkpoint import CheckpointFile, Counts
from lr_opensearch.indexing.config import IngestConfig
from lr_opensearch.indexing.index_setup import ensure_index
from lr_opensearch.indexing.reader import check_corpus
from lr_opensearch.indexing.report import IngestSummary
from lr_opensearch.indexing.run import resumable
from lr_opensearch.indexing.session import (
    bulk_load,
    checkpoint_file,
    connect,
    end_load,
    load_state,
)
from lr_opensearch.progress import progress_bar

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

POLL_S = 1.0


def worker_argv(config: IngestConfig, worker_id: int, summary_path: Path) -> list[str]:
    """The command line of worker ``worker_id`` (the password travels in the environment)."""
    c = config.connection
    argv = [sys.executable, "-m", "ingest.bulk", config.corpus, "--bundle", config.bundle,
            "--index", config.index, "--workers", str(config.workers),
            "--worker-id", str(worker_id), "--no-bulk-settings", "--no-progress",
            "--batch-size", str(config.batch_size), "--chunk-size", str(config.chunk_size),
            "--sort-window", str(config.sort_window), "--queue-chunks", str(config.queue_chunks),
            "--encode-precision", config.encode_precision, "--runtime", config.runtime,
            "--state-dir", str(config.state_dir), "--summary-json", str(summary_path),
            "--timeout", str(c.timeout), "--engine", c.engine, "--max-attempts", str(config.retry.max_attempts),
            "--initial-backoff", str(config.retry.initial_backoff),
            "--max-backoff", str(config.retry.max_backoff)]
    for flag, value in (("--url", c.url), ("--user", c.user), ("--ca-certs", c.ca_certs),
                        ("--device", _worker_device(config.device, worker_id)),
                        ("--dead-letter", config.dead_letter)):
        if value is not None:
            argv += [flag, str(value)]
    if not c.verify_certs:
        argv.append("--no-verify-certs")
    if config.restart:
        argv.append("--restart")
    return argv


def _worker_device(device: str | None, worker_id: int) -> str | None:
    """``cuda`` without an index spreads the workers over the visible GPUs."""
    if device != "cuda":
        return device
    import torch

    count = torch.cuda.device_count()
    return f"cuda:{worker_id % count}" if count > 1 else device


def _worker_env(config: IngestConfig) -> dict[str, str]:
    env = dict(os.environ)
    if config.connection.password is not None:
        env["LR_OPENSEARCH_PASSWORD"] = config.connection.password
    threads = max(1, (os.cpu_count() or 1) // config.workers)
    env.setdefault("OMP_NUM_THREADS", str(threads))
    env.setdefault("MKL_NUM_THREADS", str(threads))
    return env


def launch(config: IngestConfig) -> IngestSummary:
    """Run ``config.workers`` local worker processes over ``config.corpus``; see module doc.

    Raises:
        ConfigError: reading stdin (workers need a file they can all read).
        IngestError: a worker failed (the others finish; rerun the command to resume).
    """
    if config.is_stdin:
        raise ConfigError("--workers N needs a corpus file: the workers cannot share stdin")
    started = time.perf_counter()
    check_corpus(config.corpus)
    if config.device is not None:
        from lr_opensearch.model.device import check_device

        check_device(config.device)
    bundle = load_bundle(config.bundle)
    with resumable(config):
        adapter = make_adapter(connect(config))
        # the workers are told what the cluster is, so none of them has to ask again
        config = dataclasses.replace(config, connection=dataclasses.replace(
            config.connection, engine=adapter.engine))
        ensure_index(adapter, config.index, bundle, **config.create_opts)
        ck = _launcher_checkpoint(config, bundle.bundle_id, checkpoint_file)
        with ck.exclusive():
            return _launch_locked(config, adapter, bundle, ck, started)


def _launch_locked(config: IngestConfig, adapter: Any, bundle: Bundle, ck: CheckpointFile,
                   started: float) -> IngestSummary:
    state = load_state(config, ck)
    load = config if not state.complete else dataclasses.replace(
        config, bulk_settings=dataclasses.replace(config.bulk_settings, enabled=False))
    with bulk_load(adapter, load, ck, state), \
            tempfile.TemporaryDirectory(prefix="lr-ingest-") as tmp:
        summaries = _run_workers(config, bundle.bundle_id, Path(tmp), checkpoint_file)
    total = IngestSummary(index=config.index, corpus=config.corpus, workers=config.workers,
                          complete=True, checkpoint=str(ck.path))
    total.counts = Counts()
    for s in summaries:
        total.counts.merge(s.counts)
        total.docs_this_run += s.docs_this_run
        total.encode_s += s.encode_s
        total.write_s += s.write_s
        total.wait_s += s.wait_s
        total.retries += s.retries
    total.extra["dead_letters"] = [s.dead_letter for s in summaries]
    total.dead_letter = ", ".join(str(s.dead_letter) for s in summaries if s.dead_letter)
    state.counts = total.counts
    end_load(adapter, load, ck, state)
    total.elapsed_s = time.perf_counter() - started
    return total


def _launcher_checkpoint(config: IngestConfig, bundle_id: str, checkpoint_file: Any) -> CheckpointFile:
    """The launcher's own state file (it only keeps the settings found before the load)."""
    ck = checkpoint_file(dataclasses.replace(config, worker_id=0, workers=1), bundle_id)
    key = dataclasses.replace(ck.key, worker_id=-1, workers=config.workers)
    return CheckpointFile(ck.path.with_name(f"{key.stem()}.json"), key)


def _run_workers(config: IngestConfig, bundle_id: str, tmp: Path,
                 checkpoint_file: Any) -> list[IngestSummary]:
    procs, paths = [], []
    env = _worker_env(config)
    for k in range(config.workers):
        path = tmp / f"summary-{k}.json"
        paths.append(path)
        procs.append(subprocess.Popen(worker_argv(config, k, path), env=env,
                                      preexec_fn=_die_with_parent))
        logger.info("started worker %d/%d (pid %d)", k, config.workers, procs[-1].pid)
    ckpts = [checkpoint_file(dataclasses.replace(config, worker_id=k), bundle_id)
             for k in range(config.workers)]
    bar = progress_bar(desc=f"ingest {config.index} ({config.workers} workers)", unit="doc",
               disable=not config.progress, dynamic_ncols=True)
    try:
        while any(p.poll() is None for p in procs):
            bar.n = sum(_indexed(c) for c in ckpts)
            bar.refresh()
            time.sleep(POLL_S)
    except BaseException:
        for p in procs:  # do not leave orphans writing to the index
            p.terminate()
        raise
    finally:
        bar.close()
    failed = [(k, p.returncode) for k, p in enumerate(procs) if p.returncode not in (0, 3)]
    if failed:
        raise IngestError(f"worker(s) {failed} (id, exit status) failed; the others finished. "
                          "Rerun the same command to resume: finished workers skip their part.")
    return [IngestSummary.from_dict(json.loads(p.read_text(encoding="utf-8"))) for p in paths]


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the launcher dies (Linux), so a killed
    launcher leaves no orphan workers racing the ones its rerun starts."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


def _indexed(ck: CheckpointFile) -> int:
    try:
        state = ck.load()
    except Exception:  # noqa: BLE001 - progress display only; a torn read is retried next poll
        return 0
    return state.counts.indexed if state is not None else 0
