"""In-cluster query encoding vs client encoding vs BM25, in one run (issue 26).

    python bench/incluster.py [--collection adi] [--rounds 3] [--out results/bench/incluster.json]

Starts an OpenSearch node with ml-commons (``--with-ml``) and a lean node (the default
installation) on free ports, each with the same heap; builds the collection's index on the
ml node (tests/incluster_support.py: MiniLM vocabulary, random 32-d table, IDF from the
collection, three legs) and deploys the bundle's query models with the index's default
pipeline. Then, for every test query of the collection, one search at a time (k 10,
100 candidates per leg), ``--rounds`` times, the three paths taking turns query by query:

- ``in-cluster``: ``_search`` with the text-only hybrid body (the cluster encodes);
- ``client``: ``Retriever.search`` (QueryEncoder in this process, vectors in the body);
- ``bm25``: ``Retriever.search(mode="bm25")``.

Reported: median / p99 ms per search (wall, this process), and the resident memory (sum of
VmRSS over the node's process group) of the lean node and of the ml node idle, and of the
ml node after the deploy and the searches.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from incluster_support import collection_index, start_ml_node  # noqa: E402
from node_support import free_port  # noqa: E402

from lr_opensearch.cluster import deploy_bundle, text_hybrid_body  # noqa: E402
from lr_opensearch.engine.client import make_client  # noqa: E402
from lr_opensearch.node import NodeConfig, install, start_node, stop_node  # noqa: E402
from lr_opensearch.node.process import read_state  # noqa: E402
from lr_opensearch.search import Retriever  # noqa: E402


def group_rss_mb(node_dir: Path) -> float:
    """Resident memory of the node's process group (launcher + JVM), in MB."""
    pgid = str(read_state(node_dir)["pid"])
    total = 0
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "stat").read_text().rsplit(")", 1)[-1].split()[2] != pgid:
                continue
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def timed(fns: dict[str, Any], texts: list[str], rounds: int) -> dict[str, dict[str, float]]:
    """Per path: median / p99 ms of one search. The paths take turns query by query, so a
    load change on a shared machine hits them alike."""
    for fn in fns.values():
        fn(texts[0])  # warm
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for text in texts:
            for name, fn in fns.items():
                t0 = time.perf_counter()
                fn(text)
                times[name].append(time.perf_counter() - t0)
    return {name: {"p50_ms": 1000 * float(np.median(v)),
                   "p99_ms": 1000 * float(np.percentile(v, 99)), "searches": len(v)}
            for name, v in times.items()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--collection", default="adi")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--heap", default="1g")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="lr-bench-incluster-"))
    memory: dict[str, float] = {}
    lean = NodeConfig(node_dir=tmp / "lean", http_port=free_port(), transport_port=free_port(),
                      heap=args.heap, cluster_name="lr-bench-lean")
    start_node(lean, install(), timeout=300)
    time.sleep(10)
    memory["lean_idle_mb"] = group_rss_mb(lean.node_dir)
    stop_node(lean.node_dir)
    ml = start_ml_node(tmp / "ml", heap=args.heap)
    try:
        time.sleep(10)
        memory["ml_idle_mb"] = group_rss_mb(ml.node_dir)
        client = make_client(ml.url, timeout=120)
        coll = collection_index(client, tmp / "data", args.collection)
        t0 = time.perf_counter()
        record = deploy_bundle(client, coll["bundle"], coll["index"], default_pipeline=True)
        deploy_s = time.perf_counter() - t0
        texts = [q["text"] for q in coll["queries"]]
        retriever = Retriever(coll["bundle"], client, coll["index"], fusion="server")
        index = coll["index"]
        results = timed({
            "in-cluster": lambda t: client.search(index=index, body=text_hybrid_body(
                record, t, size=10, candidates=retriever.candidates)),
            "client": lambda t: retriever.search(t, 10),
            "bm25": lambda t: retriever.search(t, 10, mode="bm25"),
        }, texts, args.rounds)
        memory["ml_after_deploy_and_searches_mb"] = group_rss_mb(ml.node_dir)
    finally:
        stop_node(ml.node_dir)
        shutil.rmtree(tmp, ignore_errors=True)
    report = {"collection": args.collection, "queries": len(texts), "rounds": args.rounds,
              "heap": args.heap, "deploy_s": round(deploy_s, 1), "latency": results,
              "memory": memory, "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
