"""An ml-commons node and a small real collection for the in-cluster encoding tests and bench.

``start_ml_node`` starts OpenSearch from the ``--with-ml`` installation (installed into the
cache on first use, about 500 MB) on free ports. ``collection_index`` builds a bundle around
the packaged MiniLM tokenizer with a random table and IDF weights from the collection
(stopwords removed, three legs), indexes the collection's documents with vectors made by the
bundle's own encoder (a document's dense vector = its table mean, sparse = its IDF terms), and
returns what a search needs. No doc encoder, no torch.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from ingest_support import REPO, data_dir
from node_support import free_port
from tokenizers import Tokenizer

from lr_opensearch.bundle import BundleConfig, load_bundle, save_bundle
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import LRError
from lr_opensearch.node import NodeConfig, install, start_node, stop_node
from lr_opensearch.packaged import packaged_model_dir
from lr_opensearch.query import QueryEncoder

DIM = 32


def start_ml_node(node_dir: Path, heap: str = "1g") -> NodeConfig:
    """Start an ml-commons node in ``node_dir`` on free ports (caller stops it)."""
    config = NodeConfig(node_dir=node_dir, http_port=free_port(), transport_port=free_port(),
                        heap=heap, cluster_name="lr-test-ml")
    start_node(config, install(ml=True), timeout=300)
    return config


@contextlib.contextmanager
def running_ml_node(node_dir: Path, what: str) -> Iterator[NodeConfig]:
    """An ml-commons node for ``what`` (the tests FAIL when it cannot start), stopped after."""
    import pytest

    try:
        config = start_ml_node(node_dir)
    except LRError as exc:
        pytest.fail(f"no ml-commons node for {what}: {exc}", pytrace=False)
    try:
        yield config
    finally:
        stop_node(node_dir, timeout=60)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def collection_bundle(root: Path, docs: list[dict[str, Any]], seed: int = 0, *,
                      model_dir: Path | None = None, dim: int = DIM,
                      kind: str = "encoder") -> Path:
    """A tokenizer (default MiniLM's; else ``model_dir``'s) + random [V, dim] table +
    BM25-style IDF over ``docs``."""
    tok = Tokenizer.from_file(str((model_dir or packaged_model_dir()) / "tokenizer.json"))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    df: Counter[int] = Counter()
    for d in docs:
        df.update(set(tok.encode(f"{d.get('title', '')} {d['text']}", add_special_tokens=False).ids))
    n = len(docs)
    idf = np.array([math.log(1 + (n - df[i] + 0.5) / (df[i] + 0.5)) for i in range(vocab)],
                   np.float32)
    name = (model_dir or packaged_model_dir()).name
    config = BundleConfig(backbone_name=f"random/{name}-vocab",
                          architecture="BertModel" if kind == "encoder" else "LlamaForCausalLM",
                          kind=kind, pooling="mean" if kind == "encoder" else "last",
                          normalize=False, dense_dim=dim, served_dim=dim, max_length=128,
                          sparse_head="tied" if kind == "encoder" else "lm",
                          remove_stopwords=True,
                          weights={"dense": 0.5, "sparse": 0.3, "bm25": 0.2})
    table = np.random.default_rng(seed).standard_normal((vocab, dim)).astype(np.float32)
    return save_bundle(root, config, tokenizer=tok, tables={"default": table}, sparse_weights=idf)


def collection_index(client: Any, root: Path, name: str = "adi", **bundle_kw: Any) -> dict[str, Any]:
    """Bundle (``collection_bundle``'s, with ``bundle_kw``) + index of a shared collection;
    returns bundle, index, queries, qrels."""
    base = data_dir() / name
    docs = read_jsonl(base / "corpus.jsonl.gz")
    queries = read_jsonl(base / "queries.jsonl.gz")
    qrels: dict[str, dict[str, int]] = {}
    for line in (base / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        q, d, s = line.split("\t")
        qrels.setdefault(q, {})[d] = int(s)
    bundle = load_bundle(collection_bundle(root / f"{name}-bundle", docs, **bundle_kw))
    enc = QueryEncoder(bundle)
    batch = enc.encode_batch([f"{d.get('title', '')} {d['text']}" for d in docs])
    index = f"lr-incluster-{name}-{bundle.bundle_id[:8]}"
    adapter = OpenSearchAdapter(client)
    if not adapter.index_exists(index):
        adapter.create_index(index, bundle)
        ops: list[dict[str, Any]] = []
        for i, d in enumerate(docs):
            ops += [{"index": {"_index": index, "_id": str(d["_id"])}},
                    {"lr_dense": batch.dense[i].tolist(), "lr_sparse": dict(batch.sparse[i]),
                     "title": d.get("title", ""), "text": d["text"]}]
        client.bulk(body=ops, refresh=True)
    tested = [q for q in queries if str(q["_id"]) in qrels]
    return {"bundle": bundle, "index": index, "queries": tested, "qrels": qrels}


def ndcg10(ranked: list[str], rels: dict[str, int]) -> float:
    """nDCG@10 of one ranked id list (graded relevance, log2 discount)."""
    gain = sum(rels.get(d, 0) / math.log2(i + 2) for i, d in enumerate(ranked[:10]))
    ideal = sorted(rels.values(), reverse=True)[:10]
    best = sum(r / math.log2(i + 2) for i, r in enumerate(ideal))
    return gain / best if best else 0.0


DOCS_WITH_CURLS = ("README.md", "docs/searching-from-any-client.md", "docs/IN_CLUSTER.md")


def text_only_hybrid_curls() -> list[tuple[str, str, dict]]:
    """Every documented text-only ``hybrid`` request (a bash block that posts one to
    ``_search``): (file, the command as written, its JSON body)."""
    found = []
    for name in DOCS_WITH_CURLS:
        text = (REPO / name).read_text(encoding="utf-8")
        for block in re.findall(r"```bash\n(.*?)```", text, re.S):
            for command in re.findall(r"(curl [^\n]*/_search' -d '.*?')", block, re.S):
                if '"hybrid"' in command:
                    found.append((name, command, json.loads(command.split(" -d '", 1)[1][:-1])))
    return found
