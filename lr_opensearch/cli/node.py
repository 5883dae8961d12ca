"""``lr node install|start|stop|status|logs``: thin CLI over lr_opensearch.node.

``--engine elasticsearch`` runs Elasticsearch instead of OpenSearch (the default) with the
same commands; its default port is 9250 and its default node dir
``<cache>/nodes/elasticsearch-<port>``. ``--version 2.19.1`` (or ``2.19``) runs another
packaged version of the engine (OpenSearch 2.19.1 beside the default 3.6.0); its default
node dir is ``<cache>/nodes/opensearch-2.19.1-<port>``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from lr_opensearch.errors import NodeError
from lr_opensearch.node.cluster import (
    CLUSTER_HEAP,
    ClusterSpec,
    cluster_status,
    default_cluster_root,
    start_cluster,
    stop_cluster,
)
from lr_opensearch.node.config import NodeConfig, default_node_dir
from lr_opensearch.node.install import Installation, cache_dir, install
from lr_opensearch.node.process import (
    NodeStatus,
    node_status,
    server_log,
    start_node,
    stop_node,
    tail,
)
from lr_opensearch.node.products import DEFAULT_ENGINE, ENGINES, get_engine


def _node_dir(args: argparse.Namespace) -> Path:
    """The node dir from --data-dir, else the default of --engine, --version and --http-port.

    Without --engine and --version (stop, status, logs) the OpenSearch dir of --http-port
    (default 9200) is used unless only the dir of another engine or version of that port
    holds a node's state.
    """
    if args.data_dir:
        return Path(args.data_dir)
    cache = cache_dir(args.cache_dir)
    version = getattr(args, "version", None)
    if args.engine is not None or version is not None:
        engine = args.engine or DEFAULT_ENGINE
        port = args.http_port or get_engine(engine).default_http_port
        return default_node_dir(port, cache, engine, version)
    port = args.http_port or get_engine(DEFAULT_ENGINE).default_http_port
    dirs = [default_node_dir(port, cache, kind.name, v)
            for kind in ENGINES.values() for v in kind.versions]
    with_state = [d for d in dirs if (d / "node.json").is_file()]
    return with_state[0] if with_state else dirs[0]


def _installation(args: argparse.Namespace, force: bool = False) -> Installation:
    """The installation the flags ask for: lean, ``--with-ml`` or ``--with-plugin``."""
    if getattr(args, "with_plugin", False):
        if args.with_ml or (args.engine or DEFAULT_ENGINE) != "opensearch":
            raise NodeError("--with-plugin is the lean OpenSearch node with the LightRetriever "
                            "plugin; drop --with-ml / --engine")
        from lr_opensearch.plugin.install import plugin_installation

        return plugin_installation(args.cache_dir, version=args.version)
    return install(args.cache_dir, engine=args.engine, force=force, ml=args.with_ml,
                   version=args.version)


def _cmd_install(args: argparse.Namespace) -> int:
    started = time.monotonic()
    inst = _installation(args, force=args.force)
    plugin = " with the LightRetriever plugin" if args.with_plugin else ""
    print(f"{inst.engine.display} {inst.version}{' with ml-commons' if inst.ml else ''}{plugin} "
          f"installed in {inst.home} "
          f"(Java {inst.java.major} at {inst.java.path}; {time.monotonic() - started:.0f} s)")
    return 0


def _spec(args: argparse.Namespace) -> ClusterSpec:
    """The cluster of ``--nodes N`` (base port --http-port, root --data-dir or the default)."""
    engine = args.engine or DEFAULT_ENGINE
    base = args.http_port or get_engine(engine).default_http_port
    root = (Path(args.data_dir) if args.data_dir
            else default_cluster_root(cache_dir(args.cache_dir), base, engine,
                                      getattr(args, "version", None)))
    transport = getattr(args, "transport_port", None)
    return ClusterSpec(root=root, nodes=args.nodes, base_http_port=base,
                       heap=getattr(args, "heap", None) or CLUSTER_HEAP,
                       cluster_name=getattr(args, "cluster_name", "lr-opensearch"),
                       engine=engine,
                       transport_ports=tuple(transport + i for i in range(args.nodes))
                       if transport else ())


def _cmd_start(args: argparse.Namespace) -> int:
    inst = _installation(args)
    if args.nodes > 1:
        spec = _spec(args)
        started = time.monotonic()
        statuses = start_cluster(spec, inst, timeout=args.timeout, wait_for=args.wait_for)
        for status in statuses:
            print(status.describe())
        print(f"cluster {spec.cluster_name}: {spec.nodes} nodes {args.wait_for} in "
              f"{time.monotonic() - started:.1f} s ({', '.join(spec.urls)})")
        return 0
    config = NodeConfig(
        node_dir=_node_dir(args), http_port=args.http_port, transport_port=args.transport_port,
        host=args.host, heap=args.heap, cluster_name=args.cluster_name, node_name=args.node_name,
        seed_ports=tuple(args.seed_port or ()), engine=args.engine)
    started = time.monotonic()
    status = start_node(config, inst, wait=not args.no_wait, timeout=args.timeout,
                        wait_for=args.wait_for)
    print(status.describe())
    if not args.no_wait:
        print(f"ready in {time.monotonic() - started:.1f} s")
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    if args.nodes > 1:
        spec = _spec(args)
        print(f"stopped {stop_cluster(spec, timeout=args.timeout)} of {spec.nodes} nodes of "
              f"{spec.root}")
        return 0
    node_dir = _node_dir(args)
    status = node_status(node_dir)
    if status.running:  # say which node before stopping it (no --http-port: 9200's)
        default = "" if args.http_port or args.data_dir else " (no --http-port: the default port)"
        print(f"stopping the {get_engine(status.engine).display} node at {status.url}, pid "
              f"{status.pid}, node dir {node_dir}{default}", flush=True)
    stopped = stop_node(node_dir, timeout=args.timeout)
    print(f"stopped node of {node_dir}" if stopped else f"no node running from {node_dir}")
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    if args.nodes > 1:
        statuses = cluster_status(_spec(args))
        if args.json:
            print(json.dumps([_status_json(s) for s in statuses]))
        else:
            for s in statuses:
                print(s.describe())
        return 0 if all(s.running for s in statuses) else 3
    status = node_status(_node_dir(args))
    if args.json:
        print(json.dumps(_status_json(status)))
    else:
        print(status.describe())
    return 0 if status.running else 3


def _status_json(status: NodeStatus) -> dict[str, object]:
    return {"running": status.running, "engine": status.engine, "pid": status.pid,
            "url": status.url, "health": status.health, "version": status.version,
            "plugins": list(status.plugins), "node_dir": str(status.node_dir)}


def _cmd_logs(args: argparse.Namespace) -> int:
    if args.nodes > 1:  # the end of every member's log, one after the other
        for config in _spec(args).configs():
            path = (config.log_dir / "console.log" if args.console
                    else server_log(config.node_dir))
            print(f"==> {config.name} ({path})")
            print(tail(path, args.lines) if path.is_file() else "(no log)")
        return 0
    node_dir = _node_dir(args)
    path = node_dir / "logs" / "console.log" if args.console else server_log(node_dir)
    if not path.is_file():
        print(f"no log at {path}", file=sys.stderr)
        return 1
    print(tail(path, args.lines))
    if args.follow:
        with open(path, errors="replace") as handle:
            handle.seek(0, os.SEEK_END)
            while True:
                line = handle.readline()
                if line:
                    print(line, end="", flush=True)
                else:
                    time.sleep(0.5)
    return 0


def _engine(parser: argparse.ArgumentParser, default: str | None) -> None:
    what = "default opensearch" if default else "default: the node found for the port"
    parser.add_argument("--engine", choices=tuple(ENGINES), default=default,
                        help=f"which search engine ({what})")


def _version(parser: argparse.ArgumentParser) -> None:
    versions = "; ".join(f"{kind.name}: {', '.join(kind.versions)}" for kind in ENGINES.values())
    parser.add_argument("--version", default=None,
                        help=f"a packaged version of the engine, e.g. 2.19.1 or 2.19 (default "
                             f"the first; {versions}); other versions have their own "
                             "installation and default node dir")


def _with_ml(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--with-ml", action="store_true",
                        help="OpenSearch with ml-commons (about 500 MB more), so the cluster can "
                             "encode LightRetriever queries itself (lr models deploy); installed "
                             "beside the lean node, which stays as it is")
    parser.add_argument("--with-plugin", action="store_true",
                        help="OpenSearch with the LightRetriever plugin built from this "
                             "checkout (POST /<index>/_lightretriever; docs/PLUGIN.md), beside "
                             "the lean node, which stays as it is")


def _where(parser: argparse.ArgumentParser, engine_default: str | None = None) -> None:
    _engine(parser, engine_default)
    _version(parser)
    parser.add_argument("--nodes", type=int, default=1,
                        help="a local cluster of N nodes on consecutive ports from --http-port "
                             "(transport +100), in <cache>/nodes/cluster-<port>/ (default 1)")
    parser.add_argument("--http-port", type=int, default=None,
                        help="REST port (default 9200 OpenSearch, 9250 Elasticsearch); also "
                             "names the default node dir")
    parser.add_argument("--data-dir", "--node-dir", dest="data_dir", default=None,
                        help="the node's directory: config, data, logs, pid (default "
                             "<cache>/nodes/<http-port>, <cache>/nodes/elasticsearch-<port>)")
    parser.add_argument("--cache-dir", default=None,
                        help="installation cache (default env LR_CACHE_DIR or ~/.cache/lr-opensearch)")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``node`` command and its subcommands to the ``lr`` parser."""
    node = subparsers.add_parser("node", help="install, start, stop and inspect the local "
                                 "OpenSearch (or Elasticsearch) node")
    sub = node.add_subparsers(dest="node_command", metavar="ACTION", required=True)

    p = sub.add_parser("install", help="fetch OpenSearch + k-NN + neural-search (or, with "
                       "--engine elasticsearch, Elasticsearch) from Maven Central (mvn)")
    _engine(p, DEFAULT_ENGINE)
    _version(p)
    p.add_argument("--cache-dir", default=None, help="installation cache")
    p.add_argument("--force", action="store_true", help="reinstall even if installed")
    _with_ml(p)
    p.set_defaults(func=_cmd_install)

    p = sub.add_parser("start", help="start a node in the background and wait for green (a "
                       "lone node whose indices ask for replicas: yellow, which it stays)")
    _where(p, DEFAULT_ENGINE)
    p.add_argument("--transport-port", type=int, default=None,
                   help="node-to-node port (default http port + 100)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default %(default)s)")
    p.add_argument("--heap", default=os.environ.get("LR_NODE_HEAP"),
                   help="JVM heap (default env LR_NODE_HEAP, else 1g OpenSearch, "
                        "512m Elasticsearch and each node of a --nodes cluster)")
    p.add_argument("--cluster-name", default="lr-opensearch")
    p.add_argument("--node-name", default=None, help="default lr-<http-port>")
    p.add_argument("--seed-port", type=int, action="append",
                   help="transport port of another member (repeat) for a multi-node cluster")
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for health")
    p.add_argument("--wait-for", choices=("green", "yellow"), default="green")
    p.add_argument("--no-wait", action="store_true", help="return once the process is started")
    _with_ml(p)
    p.set_defaults(func=_cmd_start)

    p = sub.add_parser("stop", help="stop the node (SIGTERM, then SIGKILL after --timeout)")
    _where(p)
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=_cmd_stop)

    p = sub.add_parser("status", help="report the node (exit 0 running, 3 not running)")
    _where(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_status)

    p = sub.add_parser("logs", help="show the end of the node's log")
    _where(p)
    p.add_argument("-n", "--lines", type=int, default=50)
    p.add_argument("--console", action="store_true", help="the JVM's stdout/stderr instead")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    p.set_defaults(func=_cmd_logs)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m lr_opensearch.node``."""
    from lr_opensearch.cli import main as lr_main

    return lr_main(["node", *(sys.argv[1:] if argv is None else argv)])
