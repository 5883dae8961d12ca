"""The ``lr`` command line: a thin dispatcher, one module per subcommand in this package.

Each module exposes ``register(subparsers) -> None``; the parser it adds sets
``func(args) -> int``. Modules are imported only when their subcommand is used, so
``lr node status`` does not import torch. Applications outside the library add their own
subcommands through the ``lr_opensearch.commands`` entry-point group (the ingest app
registers ``lr ingest`` there), so the library never imports them.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from typing import Any

from lr_opensearch.cli.common import configure_logging
from lr_opensearch.errors import LRError
from lr_opensearch.version import __version__

# subcommand -> (module with register(), one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "node": ("lr_opensearch.cli.node", "install, start, stop and inspect the local search node"),
    "bundle": ("lr_opensearch.cli.bundle", "build and inspect model bundles"),
    "index": ("lr_opensearch.cli.index", "create and inspect LightRetriever indices"),
    "search": ("lr_opensearch.cli.search", "hybrid search (or one leg alone) with explanations"),
    "eval": ("lr_opensearch.cli.eval", "evaluate runs on a BEIR-format collection"),
    "demo": ("lr_opensearch.cli.demo", "the main job: node, bundle, ingest, search, end to end"),
    "dashboards": ("lr_opensearch.cli.dashboards", "saved objects for Dashboards / Kibana"),
    "models": ("lr_opensearch.cli.models", "LightRetriever query encoding inside the cluster "
               "(ml-commons): deploy, list, undeploy"),
    "plugin": ("lr_opensearch.cli.plugin", "the LightRetriever OpenSearch plugin (one request "
               "from any client): build, install, load, status"),
    "inspect": ("lr_opensearch.cli.inspect", "the hybrid and each of its legs side by side in the "
                "browser"),
}
ENTRY_POINT_GROUP = "lr_opensearch.commands"


def _plugin_commands() -> dict[str, Any]:
    """Subcommands that installed applications register: name -> entry point."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)
            if ep.name not in SUBCOMMANDS}


def _build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lr", description="LightRetriever for OpenSearch.")
    parser.add_argument("--version", action="version", version=f"lr-opensearch {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    plugins = _plugin_commands()
    wanted = next((a for a in argv if a in SUBCOMMANDS or a in plugins), None)
    for name, (module, help_text) in SUBCOMMANDS.items():
        if name == wanted:
            importlib.import_module(module).register(sub)
        else:  # listed in --help without importing its module
            sub.add_parser(name, help=help_text)
    for _name, ep in sorted(plugins.items()):
        ep.load()(sub)  # an application's register(); light by contract (no torch at import)
    return parser


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
        code = int(func(args) or 0)
        sys.stdout.flush()  # here, where a closed pipe can still be told apart
        return code
    except LRError as exc:
        logging.getLogger("lr").error("%s", exc)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _closed_stdout()


def _closed_stdout() -> int:
    """stdout's reader went away (``lr ... | head``): end quietly with the status of a
    process SIGPIPE ended, as Unix tools do; stdout goes to /dev/null so the interpreter's
    last flush does not complain."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind stdout: nothing to silence
        pass
    return 128 + 13  # SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
