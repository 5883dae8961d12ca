"""The ``lr`` command line: a thin dispatcher to each subsystem's own CLI module.

Each subcommand lives beside the code it drives and exposes
``register(subparsers) -> None``; the parser it adds sets ``func(args) -> int``.
Modules are imported only when their subcommand is used, so ``lr node status`` does
not import torch.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

from lr_opensearch import __version__
from lr_opensearch.errors import LRError

# subcommand -> (module with register(), one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "node": ("lr_opensearch.node.cli", "install, start, stop and inspect the local search node"),
    "bundle": ("lr_opensearch.bundle_cli", "build and inspect model bundles"),
    "index": ("lr_opensearch.index_cli", "create and inspect LightRetriever indices"),
    "ingest": ("ingest.cli", "encode a corpus and write it into an index (= python -m ingest.bulk)"),
    "search": ("lr_opensearch.search_cli", "hybrid / dense / sparse search with explanations"),
    "eval": ("lr_opensearch.eval_cli", "evaluate runs on a BEIR-format collection"),
    "demo": ("lr_opensearch.demo", "the main job: node, bundle, ingest, search, end to end"),
}


def _build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lr", description="LightRetriever for OpenSearch.")
    parser.add_argument("--version", action="version", version=f"lr-opensearch {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    wanted = next((a for a in argv if a in SUBCOMMANDS), None)
    for name, (module, help_text) in SUBCOMMANDS.items():
        if name == wanted:
            importlib.import_module(module).register(sub)
        else:  # listed in --help without importing its module
            sub.add_parser(name, help=help_text)
    return parser


def configure_logging(verbose: bool = False, quiet: bool = False) -> None:
    """Route logging to stderr; tqdm bars stay intact because they write to stderr too."""
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if not verbose:  # one INFO line per HTTP request drowns what the commands say
        for noisy in ("opensearch", "elastic_transport", "urllib3"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser(argv)
    args = parser.parse_args(argv)
    configure_logging(args.verbose, args.quiet)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 2
    try:
        return int(func(args) or 0)
    except LRError as exc:
        logging.getLogger("lr").error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
