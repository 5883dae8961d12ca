"""``lr plugin build|install|load|status``: the LightRetriever OpenSearch plugin (docs/PLUGIN.md).

    lr plugin build [--version 3.6.0|2.19.1]      the zip, from source, for that engine version
    lr plugin install --home OPENSEARCH_HOME       into a node's home (then restart the node)
    lr plugin load --bundle B [--index I]          the bundle's model into the cluster
    lr plugin status                               nodes with the plugin, bundles stored

The local node gets it with ``lr node install|start --with-plugin``. Search then with
``POST /<index>/_lightretriever {"text": "..."}`` from any client.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from lr_opensearch.cli.common import add_connection_args, client_from_args, quiet_transport
from lr_opensearch.errors import ConfigError


def _cmd_build(args: argparse.Namespace) -> int:
    from lr_opensearch.plugin.build import build_plugin

    built = build_plugin(args.version, cache=args.cache_dir, force=args.force)
    print(f"{built.zip_path}  (OpenSearch {built.engine_version}; install on each node with "
          f"bin/opensearch-plugin install --batch {built.zip_path.as_uri()})")
    return 0


def home_version(home: Path) -> str:
    """The OpenSearch version of an installed home (its ``lib/opensearch-<v>.jar``)."""
    for jar in sorted((home / "lib").glob("opensearch-*.jar")):
        found = re.fullmatch(r"opensearch-(\d+\.\d+\.\d+)\.jar", jar.name)
        if found:
            return found.group(1)
    raise ConfigError(f"{home} is not an OpenSearch home (no lib/opensearch-<version>.jar)")


def _cmd_install(args: argparse.Namespace) -> int:
    from lr_opensearch.node import install
    from lr_opensearch.plugin.build import build_plugin
    from lr_opensearch.plugin.install import install_into

    home = Path(args.home).expanduser().resolve()
    inst = install(args.cache_dir, version=home_version(home))
    built = build_plugin(cache=args.cache_dir, installation=inst)
    install_into(home, built, inst)
    print(f"installed {built.zip_path.name} into {home}; restart the node to load it")
    return 0


def _cmd_load(args: argparse.Namespace) -> int:
    quiet_transport(args)
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.plugin.load import load_plugin_model

    done = load_plugin_model(client_from_args(args), load_bundle(args.bundle), args.index,
                             instruction=args.instruction, candidates=args.candidates)
    if args.json:
        print(json.dumps(done, indent=2))
        return 0
    print(f"bundle {done['bundle_id']}: {done['parts']:,} bytes stored, {done['bytes']:,} bytes "
          f"in the node's memory (digest {done['digest'][:12]})")
    for index in done["indices"]:
        print(f"index {index}: POST /{index}/_lightretriever {{\"text\": \"...\"}}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    quiet_transport(args)
    from lr_opensearch.plugin.load import plugin_status

    status: dict[str, Any] = plugin_status(client_from_args(args))
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    print(f"nodes with the plugin: {', '.join(status['nodes']) or 'none (lr plugin install)'}")
    for row in status["stored"]:
        size = sum(p["size"] for p in row["parts"].values())
        print(f"stored  {row['bundle_id']}  {size:,} bytes  digest {row['digest'][:12]}")
    held = status["node_models"] or {}
    for row in held.get("models", []):
        print(f"in memory  {row['bundle_id']}  {row['bytes']:,} bytes")
    if held:
        print(f"memory bound: {held['max_bytes']:,} bytes (lightretriever.model_cache.max_bytes)")
    return 0


def register(subparsers: Any) -> None:
    """Add ``lr plugin`` and its subcommands."""
    plugin = subparsers.add_parser("plugin", help="the LightRetriever OpenSearch plugin: build, "
                                   "install, load a bundle, status", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = plugin.add_subparsers(dest="plugin_command", metavar="ACTION", required=True)

    p = sub.add_parser("build", help="build the plugin zip for an engine version from source")
    p.add_argument("--version", default=None, help="OpenSearch version (default 3.6.0; 2.19.1)")
    p.add_argument("--force", action="store_true", help="rebuild even if cached")
    p.add_argument("--cache-dir", default=None, help="installation cache")
    p.set_defaults(func=_cmd_build)

    p = sub.add_parser("install", help="build and install the plugin into an OpenSearch home")
    p.add_argument("--home", required=True, help="the node's OpenSearch directory")
    p.add_argument("--cache-dir", default=None, help="installation cache")
    p.set_defaults(func=_cmd_install)

    p = sub.add_parser("load", help="store a bundle's query model in the cluster; with --index, "
                       "the index's plugin record")
    p.add_argument("--bundle", required=True, help="model bundle directory")
    p.add_argument("--index", default=None, help="index (alias, pattern) searched with it")
    p.add_argument("--instruction", default=None, help="query instruction (default: the bundle's)")
    p.add_argument("--candidates", type=int, default=None,
                   help="hits per leg when a request names none (default as lr search)")
    p.add_argument("--json", action="store_true")
    add_connection_args(p)
    p.set_defaults(func=_cmd_load)

    p = sub.add_parser("status", help="the nodes with the plugin, the bundles stored and held")
    p.add_argument("--json", action="store_true")
    add_connection_args(p)
    p.set_defaults(func=_cmd_status)
