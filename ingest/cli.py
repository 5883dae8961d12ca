"""Command-line parsing for ``python -m ingest.bulk`` (thin: arguments -> ``IngestConfig``).

Zero-config: ``python -m ingest.bulk corpus.jsonl`` alone works. The bundle defaults to
``LR_BUNDLE``, else the packaged MiniLM fitted on this corpus, built once into the local
bundle store (``lr_opensearch.fit.fitted``) and reused; the index to ``LR_INDEX``, else
a name made from the file name. The run ends with the ``lr search`` command to try.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import shlex
import signal
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ingest.launcher import launch
from lr_opensearch.cli.common import (
    add_connection_args,
    add_layout_args,
    add_precision_arg,
    add_runtime_arg,
    configure_logging,
    connection_kwargs,
    layout_opts,
    quiet_transport,
)
from lr_opensearch.errors import ConfigError, LRError
from lr_opensearch.indexing import (
    BulkSettings,
    ConnectionConfig,
    IngestConfig,
    IngestSummary,
    RetryPolicy,
    default_state_dir,
    exit_code,
    run,
)
from lr_opensearch.indexing.outputs import check_outputs

EPILOG = """\
exit status: 0 every record indexed; 3 done, but some lines were skipped or refused (see the
dead-letter file); 1 error (rerun the same command to resume); 130 interrupted.

Empty documents: a record with a title but no text is indexed title-only; with neither it is
skipped and reported. Records longer than the encoder's max length are truncated for encoding
(the stored text is complete) and counted in the summary.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ingest options (shared by ``python -m ingest.bulk`` and the launcher's workers)."""
    p.add_argument("corpus", help="JSONL or JSONL.gz in BEIR corpus form ('_id'/'id', 'title', "
                   "'text', other keys kept as metadata), or '-' for stdin")
    p.add_argument("--bundle", default=None, help="model bundle directory (default env "
                   "LR_BUNDLE, else the packaged MiniLM fitted on this corpus: built once into "
                   "the local bundle store, reused next time)")
    p.add_argument("--index", default=None, help="target index, created if absent (default "
                   "env LR_INDEX, else a name made from the corpus file name)")
    g = p.add_argument_group("connection (defaults: LR_OPENSEARCH_URL / _USER / _PASSWORD / _CA_CERTS)")
    add_connection_args(g, timeout=True)
    g = p.add_argument_group("index layout (when the run creates the index)")
    add_layout_args(g, default=None)
    g = p.add_argument_group("throughput")
    g.add_argument("--batch-size", type=int, default=32, help="documents per encoder forward")
    g.add_argument("--chunk-size", type=int, default=256,
                   help="documents per bulk request and per checkpoint")
    g.add_argument("--sort-window", type=int, default=1024,
                   help="records read ahead and sorted by length before batching")
    g.add_argument("--queue-chunks", type=int, default=2,
                   help="encoded chunks that may wait for the writer thread")
    g.add_argument("--device", help="torch device for the encoder (cpu, cuda, cuda:1, ...); "
                   "default: GPU if available")
    add_precision_arg(g)
    add_runtime_arg(g)
    g = p.add_argument_group("splitting")
    g.add_argument("--workers", type=int, default=1, help="split the corpus N ways; without "
                   "--worker-id, run N local worker processes")
    g.add_argument("--worker-id", type=int, help="handle part K of N (0-based), e.g. on machine K")
    g = p.add_argument_group("resume and reports")
    g.add_argument("--restart", action="store_true", help="ignore the checkpoint and start over")
    g.add_argument("--state-dir", type=Path, default=None,
                   help=f"checkpoint directory (default {default_state_dir()})")
    g.add_argument("--dead-letter", type=Path, help="JSONL of every line not indexed "
                   "(default: next to the checkpoint)")
    g.add_argument("--summary-json", type=Path, help="also write the summary as JSON here")
    g = p.add_argument_group("index settings during the load")
    g.add_argument("--bulk-settings", dest="bulk_settings", action="store_true", default=None,
                   help="refresh off and 0 replicas during the load, restored after (default "
                   "unless --worker-id is given)")
    g.add_argument("--no-bulk-settings", dest="bulk_settings", action="store_false")
    g.add_argument("--refresh-interval", help="refresh_interval after the load (default: as before)")
    g.add_argument("--replicas", type=int, help="number_of_replicas after the load (default: as before)")
    g = p.add_argument_group("retries on 429 / 5xx / connection errors")
    g.add_argument("--max-attempts", type=int, default=8)
    g.add_argument("--initial-backoff", type=float, default=0.5)
    g.add_argument("--max-backoff", type=float, default=30.0)
    g = p.add_argument_group("output")
    g.add_argument("-q", "--quiet", action="store_true", help="no progress bar, warnings only")
    g.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m ingest.bulk", description="Ingest a BEIR-form corpus into a "
        "LightRetriever index (dense + sparse fields), resumably.", epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser)
    return parser.parse_args(argv)


def config_from_args(args: argparse.Namespace) -> IngestConfig:
    """Build the (validated) ``IngestConfig``; raises ``ConfigError`` on bad values."""
    bulk = args.bulk_settings if args.bulk_settings is not None else args.worker_id is None
    extra: dict[str, Any] = {}
    if args.state_dir is not None:
        extra["state_dir"] = args.state_dir
    return IngestConfig(
        corpus=args.corpus, bundle=args.bundle, index=args.index,
        connection=ConnectionConfig(**connection_kwargs(args)),
        batch_size=args.batch_size, chunk_size=args.chunk_size, sort_window=args.sort_window,
        queue_chunks=args.queue_chunks, workers=args.workers, worker_id=args.worker_id,
        device=args.device, encode_precision=args.encode_precision, runtime=args.runtime, restart=args.restart, dead_letter=args.dead_letter,
        bulk_settings=BulkSettings(enabled=bulk, refresh_interval=args.refresh_interval,
                                   replicas=args.replicas),
        retry=RetryPolicy(max_attempts=args.max_attempts, initial_backoff=args.initial_backoff,
                          max_backoff=args.max_backoff),
        progress=not (args.quiet or args.no_progress), summary_json=args.summary_json,
        **layout_opts(args), **extra)


def write_summary(summary: IngestSummary, config: IngestConfig, *, quiet: bool) -> None:
    """Print the summary (stdout) and write it as JSON if asked."""
    if config.summary_json is not None:
        Path(config.summary_json).parent.mkdir(parents=True, exist_ok=True)
        Path(config.summary_json).write_text(json.dumps(summary.to_dict(), indent=1),
                                             encoding="utf-8")
    if not quiet or summary.counts.failed or summary.counts.skipped:
        print(summary.format_text(), flush=True)


def register(subparsers: Any) -> None:
    """``lr ingest ...``: the same options as ``python -m ingest.bulk``."""
    p = subparsers.add_parser(
        "ingest", help="ingest a corpus into a LightRetriever index (resumable)",
        description="Ingest a BEIR-form corpus into a LightRetriever index (dense + sparse "
        "fields), resumably.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=_run_from_lr)


def _run_from_lr(args: argparse.Namespace) -> int:
    quiet_transport(args)
    config = resolve_defaults(args)
    with sigterm_as_interrupt():
        summary = execute(config)
    write_summary(summary, config, quiet=args.quiet)
    _print_next_step(config, args.quiet)
    return exit_code(summary)


def resolve_defaults(args: argparse.Namespace) -> IngestConfig:
    """The config, with the zero-config defaults filled in: the index from ``LR_INDEX`` or
    the file name, the bundle from ``LR_BUNDLE`` or the store (built once, with progress).
    Every option is checked before a bundle is built."""
    from lr_opensearch.indexing.defaults import default_index_name

    named = args.index or os.environ.get("LR_INDEX")
    args.index = named or default_index_name(args.corpus)
    bundle = args.bundle or os.environ.get("LR_BUNDLE")
    args.bundle = bundle or ""
    config = config_from_args(args)  # raises on bad options, before anything is built
    config = dataclasses.replace(config, index_named=bool(named))
    if bundle is None:
        from lr_opensearch.fit.fitted import fitted_bundle
        from lr_opensearch.indexing.run import preflight

        if config.is_stdin:
            raise ConfigError("reading stdin: name the bundle with --bundle (or LR_BUNDLE); "
                              "the default bundle is fitted on the corpus file")
        preflight(config)  # the target and the corpus, before minutes of fitting
        args.bundle = str(fitted_bundle(config.corpus, progress=config.progress))
        config = dataclasses.replace(config, bundle=args.bundle)
    return config


def _print_next_step(config: IngestConfig, quiet: bool) -> None:
    """The exact search command to try next (the URL without any credentials in it)."""
    if quiet:
        return
    cmd = ["lr", "search", "--index", config.index, "--bundle", config.bundle]
    url = config.connection.url
    if url:
        parts = urllib.parse.urlsplit(url)
        cmd += ["--url", urllib.parse.urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))]
    print("search it:  " + shlex.join(cmd) + ' "your query"', flush=True)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (``kill``, a job scheduler, a container stop) ends the run the way Ctrl-C
    does: the index settings are given back and the checkpoint stays, instead of the
    process vanishing with the index still in bulk-load settings."""
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def execute(config: IngestConfig) -> IngestSummary:
    """One worker in this process, or the launcher's N local workers (``--workers N``; the
    summary file is the launcher's to write, so it is checked here, the rest by each worker)."""
    if config.workers > 1 and config.worker_id is None:
        check_outputs(config, None)
        return launch(config)
    return run(config)


def main(argv: list[str] | None = None) -> int:
    """``python -m ingest.bulk``: parse, ingest, print the summary; the exit code says how."""
    args = parse_args(argv)
    configure_logging(args.verbose, args.quiet)
    try:
        config = resolve_defaults(args)
        with sigterm_as_interrupt():
            summary = execute(config)
    except LRError as exc:
        logging.getLogger("ingest").error("%s", exc)
        return 1
    except KeyboardInterrupt as exc:
        why = f" by {exc.args[0]}" if exc.args else ""
        logging.getLogger("ingest").error("interrupted%s; rerun the same command to resume", why)
        return 130
    write_summary(summary, config, quiet=args.quiet)
    _print_next_step(config, args.quiet)
    return exit_code(summary)
