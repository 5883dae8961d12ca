"""A local multi-node cluster: N nodes of one installation on loopback ports.

Node ``i`` of a cluster whose base port is ``P`` serves HTTP on ``P + i`` and transport on
``P + 100 + i``, lives in ``<root>/<P + i>`` and is named ``lr-<P + i>``; every node is
cluster-manager eligible and holds data, the others' transport ports are its discovery
seeds and all names are the initial cluster managers (the first election). Small heaps
(512m by default) so that three nodes fit beside the tests on a laptop::

    lr node start --nodes 3            # http 9200-9202, transport 9300-9302
    lr node status --nodes 3
    lr node stop --nodes 3
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from lr_opensearch.errors import ConfigError, NodeError
from lr_opensearch.node.config import DEFAULT_CLUSTER, NodeConfig
from lr_opensearch.node.install import Installation
from lr_opensearch.node.process import (
    NodeStatus,
    node_status,
    start_node,
    stop_node,
    wait_for_health,
)
from lr_opensearch.node.products import DEFAULT_ENGINE, get_engine

logger = logging.getLogger(__name__)

CLUSTER_HEAP = "512m"
TRANSPORT_OFFSET = 100


@dataclass(frozen=True)
class ClusterSpec:
    """Where the members of one local cluster live.

    Attributes:
        root: the cluster's directory (one node dir per member below it).
        nodes: how many members (2..9).
        base_http_port: node i serves HTTP on ``base_http_port + i``.
        heap: JVM heap of each member.
        cluster_name: the cluster name.
        engine: ``opensearch`` (default) or ``elasticsearch``.
        transport_ports: explicit transport ports, one per member (default base + 100 + i).
    """

    root: Path
    nodes: int
    base_http_port: int
    heap: str = CLUSTER_HEAP
    cluster_name: str = DEFAULT_CLUSTER
    engine: str = DEFAULT_ENGINE
    transport_ports: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not 2 <= self.nodes <= 9:
            raise ConfigError(f"a local cluster has 2 to 9 nodes, not {self.nodes}")
        if self.transport_ports and len(self.transport_ports) != self.nodes:
            raise ConfigError(f"{len(self.transport_ports)} transport ports for {self.nodes} "
                              "nodes; give one per node or none")
        object.__setattr__(self, "root", Path(self.root).expanduser().absolute())
        object.__setattr__(self, "engine", get_engine(self.engine).name)

    def transport(self, i: int) -> int:
        if self.transport_ports:
            return self.transport_ports[i]
        return self.base_http_port + TRANSPORT_OFFSET + i

    def configs(self) -> list[NodeConfig]:
        """The members' node configurations."""
        names = tuple(f"lr-{self.base_http_port + i}" for i in range(self.nodes))
        out = []
        for i in range(self.nodes):
            port = self.base_http_port + i
            seeds = tuple(self.transport(j) for j in range(self.nodes) if j != i)
            out.append(NodeConfig(
                node_dir=self.root / str(port), http_port=port, transport_port=self.transport(i),
                heap=self.heap, cluster_name=self.cluster_name, node_name=names[i],
                seed_ports=seeds, initial_managers=names, engine=self.engine))
        return out

    @property
    def urls(self) -> list[str]:
        return [c.url for c in self.configs()]


def default_cluster_root(cache: Path, base_http_port: int, engine: str | None = None,
                         version: str | None = None) -> Path:
    prefix = get_engine(engine).node_dir_prefix(version)
    return cache / "nodes" / f"{prefix}cluster-{base_http_port}"


def start_cluster(spec: ClusterSpec, installation: Installation, *, timeout: float = 300.0,
                  wait_for: str = "green") -> list[NodeStatus]:
    """Start every member (those already running are kept), then wait until all have
    joined and the cluster is ``wait_for``.

    Raises:
        NodeError: a member does not start, or the cluster does not form in ``timeout``
            (every member started by this call is stopped again).
    """
    configs = spec.configs()
    started: list[NodeConfig] = []
    t0 = time.monotonic()
    try:
        for config in configs:
            if not node_status(config.node_dir).running:
                started.append(config)
            start_node(config, installation, wait=False)
        first = configs[0]
        wait_for_health(first.url, wait_for, max(1.0, timeout - (time.monotonic() - t0)),
                        config=first, nodes=spec.nodes)
    except (NodeError, ConfigError):
        for config in started:
            stop_node(config.node_dir, timeout=30)
        raise
    logger.info("cluster %s: %d nodes %s in %.0f s", spec.cluster_name, spec.nodes, wait_for,
                time.monotonic() - t0)
    return [node_status(c.node_dir) for c in configs]


def stop_cluster(spec: ClusterSpec, *, timeout: float = 60.0) -> int:
    """Stop every member; returns how many were running."""
    return sum(stop_node(c.node_dir, timeout=timeout) for c in spec.configs())


def cluster_status(spec: ClusterSpec) -> list[NodeStatus]:
    """Every member's status (running or not), in member order."""
    return [node_status(c.node_dir) for c in spec.configs()]
