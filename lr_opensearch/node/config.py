"""Configuration of one local node and the files it is started from.

A node lives in its own directory (``node_dir``) so several nodes (a developer's, each
test session's, the members of a small cluster) can share one installation::

    node_dir/
      config/opensearch.yml (elasticsearch.yml), jvm.options, jvm.options.d/lr.options,
             log4j2.properties
      data/  logs/  tmp/
      node.json        written at start: pid, ports, installation (removed at stop)
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from lr_opensearch.errors import ConfigError
from lr_opensearch.node.products import DEFAULT_ENGINE, Engine, get_engine

DEFAULT_HTTP_PORT = 9200  # OpenSearch's; Elasticsearch's is engine.default_http_port (9250)
DEFAULT_HEAP = "1g"
DEFAULT_CLUSTER = "lr-opensearch"
_HEAP_UNITS = ("k", "m", "g")


@dataclass(frozen=True)
class NodeConfig:
    """Settings of one local node.

    Attributes:
        node_dir: the node's own directory (config, data, logs, state).
        http_port: REST port; None: the engine's default (9200 OpenSearch, 9250
            Elasticsearch).
        transport_port: node-to-node port (default http_port + 100).
        host: bind address; loopback unless you know why not.
        heap: JVM heap, -Xms = -Xmx (e.g. "1g", "1536m"); None: the engine's default
            (1g for OpenSearch, 512m for Elasticsearch).
        cluster_name: cluster name; members of one cluster share it.
        node_name: this node's name (default ``lr-<http_port>``).
        seed_ports: transport ports of the other members of a multi-node cluster on the
            same host; empty means ``discovery.type: single-node``.
        initial_managers: node names of the first cluster-manager-eligible nodes
            (multi-node only; default: this node plus ``lr-<port - 100>`` of each seed).
        settings: extra ``opensearch.yml`` / ``elasticsearch.yml`` settings.
        engine: ``opensearch`` (default) or ``elasticsearch``.
    """

    node_dir: Path
    http_port: int = None  # type: ignore[assignment]  # set in __post_init__
    transport_port: int | None = None
    host: str = "127.0.0.1"
    heap: str = None  # type: ignore[assignment]  # set in __post_init__
    cluster_name: str = DEFAULT_CLUSTER
    node_name: str | None = None
    seed_ports: tuple[int, ...] = ()
    initial_managers: tuple[str, ...] = ()
    settings: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))
    engine: str = DEFAULT_ENGINE

    def __post_init__(self) -> None:
        object.__setattr__(self, "node_dir", Path(self.node_dir).expanduser().absolute())
        object.__setattr__(self, "engine", get_engine(self.engine).name)
        if self.http_port is None:
            object.__setattr__(self, "http_port", self.kind.default_http_port)
        if self.heap is None:
            object.__setattr__(self, "heap", self.kind.default_heap)
        for name in ("http_port", "transport_port"):
            port = getattr(self, name)
            if port is not None and not 1 <= int(port) <= 65535:
                raise ConfigError(f"{name}={port} is not a TCP port (1..65535)")
        heap = self.heap.strip().lower()
        if not heap[:-1].isdigit() or heap[-1] not in _HEAP_UNITS:
            raise ConfigError(f"heap={self.heap!r}: use a size such as '1g' or '1536m'")

    @property
    def kind(self) -> Engine:
        """The :class:`~lr_opensearch.node.products.Engine` this node runs."""
        return get_engine(self.engine)

    @property
    def transport(self) -> int:
        """The transport port actually used."""
        return self.transport_port if self.transport_port is not None else self.http_port + 100

    @property
    def name(self) -> str:
        """The node name actually used."""
        return self.node_name or f"lr-{self.http_port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def state_file(self) -> Path:
        return self.node_dir / "node.json"

    @property
    def config_dir(self) -> Path:
        return self.node_dir / "config"

    @property
    def log_dir(self) -> Path:
        return self.node_dir / "logs"

    def node_settings(self) -> dict[str, object]:
        """The full ``opensearch.yml`` (``elasticsearch.yml``) content as a mapping."""
        out: dict[str, object] = {
            "cluster.name": self.cluster_name,
            "node.name": self.name,
            "network.host": self.host,
            "http.port": self.http_port,
            "transport.port": self.transport,
            "path.data": str(self.node_dir / "data"),
            "path.logs": str(self.log_dir),
            # A developer machine's disk is often > 90 % full; never go read-only for that.
            "cluster.routing.allocation.disk.threshold_enabled": False,
            "action.destructive_requires_name": True,
        }
        if self.seed_ports:
            hosts = [f"{self.host}:{p}" for p in (self.transport, *self.seed_ports)]
            managers = self.initial_managers or (
                self.name, *(f"lr-{p - 100}" for p in self.seed_ports))
            out["discovery.seed_hosts"] = hosts
            out[self.kind.initial_managers_setting] = list(managers)
        else:
            out["discovery.type"] = "single-node"
        out.update(self.kind.settings)
        out.update(self.settings)
        return out


def default_node_dir(http_port: int, cache: Path, engine: str | None = None,
                     version: str | None = None) -> Path:
    """Default node directory for a port: ``<cache>/nodes/<http_port>`` for OpenSearch,
    ``<cache>/nodes/elasticsearch-<http_port>`` for Elasticsearch,
    ``<cache>/nodes/opensearch-2.19.1-<http_port>`` for another packaged version (their data
    differ)."""
    return cache / "nodes" / f"{get_engine(engine).node_dir_prefix(version)}{http_port}"


def write_node_files(config: NodeConfig, home: Path) -> None:
    """Write the node's config directory from the installation's defaults plus our settings.

    ``opensearch.yml`` (``elasticsearch.yml``) is written as one JSON value per key (YAML
    accepts JSON values).
    """
    conf = config.config_dir
    (conf / "jvm.options.d").mkdir(parents=True, exist_ok=True)
    for sub in ("data", "logs", "tmp"):
        (config.node_dir / sub).mkdir(parents=True, exist_ok=True)
    for name in config.kind.config_files:
        shutil.copyfile(home / "config" / name, conf / name)
    lines = ["# Written by lr-opensearch (lr node start); regenerated at every start."]
    lines += [f"{key}: {json.dumps(value)}" for key, value in config.node_settings().items()]
    _write(conf / config.kind.config_file, "\n".join(lines) + "\n")
    heap = config.heap.strip().lower()
    _write(conf / "jvm.options.d" / "lr.options",
           f"# lr-opensearch heap (lr node start --heap)\n-Xms{heap}\n-Xmx{heap}\n")


def _write(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
