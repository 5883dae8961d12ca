"""The local node: OpenSearch (core + k-NN + neural-search) or Elasticsearch, from Maven Central.

Typical use::

    from lr_opensearch.node import NodeConfig, install, start_node, stop_node
    inst = install()                                     # idempotent, cached
    status = start_node(NodeConfig(node_dir="/tmp/n1", http_port=9250), inst)
    ...
    stop_node("/tmp/n1")

    es = install(engine="elasticsearch")                 # Elasticsearch, same API
    start_node(NodeConfig(node_dir="/tmp/e1", engine="elasticsearch"), es)   # port 9250

The CLI is ``lr node ...`` / ``python -m lr_opensearch.node ...``.
"""

from __future__ import annotations

from lr_opensearch.node.config import NodeConfig, default_node_dir
from lr_opensearch.node.install import Installation, cache_dir, install, installed
from lr_opensearch.node.lock import load_lock
from lr_opensearch.node.process import NodeStatus, node_status, start_node, stop_node
from lr_opensearch.node.products import ENGINES, Engine, get_engine

__all__ = [
    "ENGINES", "Engine", "Installation", "NodeConfig", "NodeStatus", "cache_dir",
    "default_node_dir", "get_engine", "install", "installed", "load_lock", "node_status",
    "start_node", "stop_node",
]
