"""``lr index create|info|delete``: LightRetriever indices on a cluster (thin CLI)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from lr_opensearch.cli.common import add_connection_args, client_from_args
from lr_opensearch.errors import EngineError
from lr_opensearch.options import ES_SPARSE_TYPES, KNN_ENGINES

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle


def _cmd_create(args: argparse.Namespace) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.search.client import cluster_capabilities
    from lr_opensearch.search.templates import create_index

    bundle = load_bundle(args.bundle)
    if args.cluster == "elasticsearch":
        return _create_es(args, bundle)
    client = client_from_args(args)
    caps = cluster_capabilities(client)
    if not caps.knn:
        raise EngineError(f"the cluster (OpenSearch {caps.version}) has no k-NN plugin on every "
                          f"node (plugins: {', '.join(caps.plugins) or 'none'}); lr indices "
                          "need it for the dense field")
    if _exists(client, args, bundle):
        return 0
    create_index(client, args.index, bundle, engine=args.engine, m=args.m,
                 ef_construction=args.ef_construction, shards=args.shards,
                 replicas=args.replicas)
    print(f"created index {args.index} (dense dim {bundle.config.served_dim}, engine "
          f"{args.engine}, bundle {bundle.bundle_id})")
    return 0


def _exists(client: Any, args: argparse.Namespace, bundle: Bundle) -> bool:
    """True when the index exists and was built with ``bundle`` (``--exist-ok``); an error
    when it exists otherwise; False when it must be created."""
    from lr_opensearch.search.templates import check_index_bundle

    if not client.indices.exists(index=args.index):
        return False
    if not args.exist_ok:
        raise EngineError(f"{args.cluster} index {args.index!r} already exists; pass "
                          "--exist-ok to accept it when it was built with this bundle, or "
                          "pick another name")
    check_index_bundle(client, args.index, bundle)
    print(f"index {args.index} exists and matches bundle {bundle.bundle_id}")
    return True


def _create_es(args: argparse.Namespace, bundle: Bundle) -> int:
    """``lr index create --cluster elasticsearch``: ``dense_vector`` + ``sparse_vector`` (or
    ``rank_features``, with ``--sparse-type``) for the Elasticsearch adapter."""
    from lr_opensearch.search.elasticsearch import create_es_index

    client = client_from_args(args, cluster="elasticsearch")
    if _exists(client, args, bundle):
        return 0
    create_es_index(client, args.index, bundle, sparse_type=args.sparse_type, m=args.m,
                    ef_construction=args.ef_construction, shards=args.shards,
                    replicas=args.replicas)
    print(f"created Elasticsearch index {args.index} (dense dim {bundle.config.served_dim}, "
          f"{args.sparse_type}, bundle {bundle.bundle_id})")
    return 0


def index_info(client: Any, index: str) -> dict[str, Any]:
    """Summary of an index: LightRetriever _meta, doc count, size, dense field settings."""
    from lr_opensearch.search.engine import DENSE_FIELD
    from lr_opensearch.search.templates import index_meta

    meta = index_meta(client, index)
    mapping = next(iter(client.indices.get_mapping(index=index).values()))["mappings"]
    stats = client.indices.stats(index=index, metric="docs,store")["_all"]["primaries"]
    settings = next(iter(client.indices.get_settings(index=index).values()))["settings"]["index"]
    return {"index": index, "lightretriever": meta or None,
            "docs": stats["docs"]["count"], "store_bytes": stats["store"]["size_in_bytes"],
            "shards": int(settings["number_of_shards"]),
            "replicas": int(settings["number_of_replicas"]),
            "dense": mapping.get("properties", {}).get(DENSE_FIELD)}


def _cmd_info(args: argparse.Namespace) -> int:
    info = index_info(client_from_args(args), args.index)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    meta = info["lightretriever"] or {}
    dense = info["dense"] or {}
    method = dense.get("method", {})
    print(f"index      {info['index']}")
    print(f"documents  {info['docs']}  ({info['store_bytes'] / 1e6:.1f} MB primary store)")
    print(f"shards     {info['shards']} x (1 + {info['replicas']} replicas)")
    print(f"bundle     {meta.get('bundle_id', '-  (not a LightRetriever index)')}")
    print(f"dense      dim {dense.get('dimension', '?')}, {method.get('engine', '?')} "
          f"{method.get('name', '?')} {method.get('space_type', '?')} "
          f"{method.get('parameters', {})}")
    print(f"sparse     key encoding {meta.get('key_encoding', '?')}")
    print(f"written by lr-opensearch {meta.get('library_version', '?')}")
    return 0


def _cmd_delete(args: argparse.Namespace) -> int:
    if args.yes != args.index:
        raise EngineError(f"refusing to delete {args.index!r}: repeat its name with "
                          f"--yes {args.index}")
    client_from_args(args).indices.delete(index=args.index)
    print(f"deleted index {args.index}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``lr index`` and its subcommands."""
    index = subparsers.add_parser("index", help="create and inspect LightRetriever indices")
    sub = index.add_subparsers(dest="index_command", metavar="ACTION", required=True)

    p = sub.add_parser("create", help="create an index for a bundle from index_templates/")
    p.add_argument("--bundle", required=True, help="model bundle directory")
    p.add_argument("--index", required=True, help="index name")
    p.add_argument("--cluster", default="opensearch", choices=("opensearch", "elasticsearch"),
                   help="what the URL points at (default opensearch)")
    p.add_argument("--engine", default="lucene", choices=KNN_ENGINES,
                   help="OpenSearch k-NN engine (default lucene; faiss needs the native k-NN "
                   "build)")
    p.add_argument("--sparse-type", default="sparse_vector", choices=ES_SPARSE_TYPES,
                   help="Elasticsearch sparse field type (default sparse_vector; rank_features "
                   "needs the mapper-extras module)")
    p.add_argument("--m", type=int, default=16, help="HNSW m (default %(default)s)")
    p.add_argument("--ef-construction", type=int, default=128,
                   help="HNSW ef_construction (default %(default)s)")
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--replicas", type=int, default=0)
    p.add_argument("--exist-ok", action="store_true",
                   help="succeed if the index exists and was built with this bundle")
    add_connection_args(p)
    p.set_defaults(func=_cmd_create)

    p = sub.add_parser("info", help="show an index's bundle, size and vector settings")
    p.add_argument("index")
    p.add_argument("--json", action="store_true")
    add_connection_args(p)
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("delete", help="delete an index (asks for its name again)")
    p.add_argument("index")
    p.add_argument("--yes", default=None, metavar="INDEX", help="the index name, to confirm")
    add_connection_args(p)
    p.set_defaults(func=_cmd_delete)
