"""The LightRetriever plugin's test node and its corpus (import as ``from plugin_support import ...``)."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from node_support import free_port

N_DOCS = 40
QUERIES = [
    "paris tower",
    "boundary layer heat transfer flow",
    "doctors treat patients in hospitals",
    "The capital of France",
    "information retrieval ranks documents",
    "supersonic flow over a flat plate",
]


@dataclass
class PluginNode:
    """One local node running from the plugin installation."""

    node_dir: Path
    version: str
    http_port: int = field(default_factory=free_port)
    transport_port: int = field(default_factory=free_port)

    def config(self) -> Any:
        from lr_opensearch.node import NodeConfig

        return NodeConfig(node_dir=self.node_dir, http_port=self.http_port,
                          transport_port=self.transport_port,
                          heap=os.environ.get("LR_TEST_NODE_HEAP", "1g"),
                          cluster_name="lr-plugin-test")

    def start(self) -> None:
        from lr_opensearch.node import start_node
        from lr_opensearch.plugin.install import plugin_installation

        started = time.monotonic()
        start_node(self.config(), plugin_installation(version=self.version), timeout=300)
        print(f"\n[conftest] OpenSearch {self.version} with the LightRetriever plugin at "
              f"{self.url} ready in {time.monotonic() - started:.0f} s")

    def stop(self) -> None:
        from lr_opensearch.node import stop_node

        stop_node(self.node_dir, timeout=60)

    def restart(self) -> None:
        self.stop()
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def client(self) -> Any:
        from lr_opensearch.engine.client import make_client

        return make_client(self.url, timeout=120)


def index_corpus(client: Any, bundle: Any, tokenizer: Any, *, seed: int = 7,
                 index: str | None = None) -> str:
    """An index of ``bundle`` with N_DOCS documents (random dense vectors and sparse maps of
    the tokenizer's tokens, titles and texts of those tokens, a ``metadata.group``)."""
    from corpus_support import random_docs, tiny_vocab

    from lr_opensearch.engine.opensearch import OpenSearchAdapter

    index = index or f"lr-test-plugin-{uuid.uuid4().hex[:8]}"
    OpenSearchAdapter(client).create_index(index, bundle)
    ops: list[Any] = []
    docs = random_docs(seed, N_DOCS, tiny_vocab(tokenizer), dim=int(bundle.config.served_dim))
    for i, doc in enumerate(docs):
        tokens = doc.tokens
        ops += [{"index": {"_index": index, "_id": f"d{i:02d}"}},
                {"lr_dense": doc.dense.tolist(), "lr_sparse": doc.sparse,
                 "title": f"doc {i} {' '.join(tokens)}", "text": " ".join(tokens),
                 "metadata": {"group": "a" if i % 3 else "b"}}]
    resp = client.bulk(body=ops, refresh=True)
    assert not resp["errors"], json.dumps(resp)[:500]
    return index


THREE_LEGS = {"dense": 0.4, "sparse": 0.2, "bm25": 0.4}
TOL = 1e-5  # the plugin's scores against lr search's


def assert_same(expected: list[Any], got: list[Any]) -> None:
    """The plugin's hits (JSON) are ``lr search``'s (``Hit``s): same documents in the same
    order, scores within :data:`TOL`."""
    assert [(h["_index"], h["_id"]) for h in got] == [(h.index, h.doc_id) for h in expected]
    for e, g in zip(expected, got, strict=True):
        assert abs(g["_score"] - e.score) <= TOL, (e.doc_id, e.score, g["_score"])


def loaded_corpus(client: Any, root: Path, *, seed: int, doc_seed: int) -> tuple[Any, str, Any]:
    """(bundle, index, tokenizer): a tiny bundle of three legs (``seed``), an index of it
    (``doc_seed``), the bundle loaded into the cluster with the index's plugin record."""
    from tiny_artifacts import tiny_bundle, wordpiece_tokenizer

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.plugin.load import load_plugin_model

    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(root / "bundle", tok, seed=seed, weights=THREE_LEGS))
    index = index_corpus(client, bundle, tok, seed=doc_seed)
    load_plugin_model(client, bundle, index)
    return bundle, index, tok


def plugin_search(client: Any, index: str, body: Any, method: str = "POST") -> tuple[int, Any]:
    """(HTTP status, JSON answer) of ``<method> /<index>/_lightretriever``."""
    from opensearchpy.exceptions import TransportError

    try:
        return 200, client.transport.perform_request(method, f"/{index}/_lightretriever", body=body)
    except TransportError as exc:
        return int(exc.status_code), exc.info
