"""``lr index create|info|delete``: LightRetriever indices on a cluster (thin CLI)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from lr_opensearch.cli.common import (
    add_connection_args,
    add_layout_args,
    client_from_args,
    layout_opts,
)
from lr_opensearch.engine.adapter import VECTOR_FIELDS
from lr_opensearch.engine.client import ENGINE_NAMES
from lr_opensearch.engine.meta import meta_of
from lr_opensearch.engine.templates import META_KEY
from lr_opensearch.errors import EngineError
from lr_opensearch.options import ES_SPARSE_TYPES, KNN_ENGINES
from lr_opensearch.search.calibration import DEFAULT_SAMPLE_DOCS


def _cmd_create(args: argparse.Namespace) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.engine.client import cluster_capabilities
    from lr_opensearch.engine.factory import make_adapter

    bundle = load_bundle(args.bundle)
    client = client_from_args(args)
    adapter = make_adapter(client)
    if adapter.engine == "opensearch":
        caps = cluster_capabilities(client)
        if not caps.knn:
            raise EngineError(f"the cluster (OpenSearch {caps.version}) has no k-NN plugin on "
                              f"every node (plugins: {', '.join(caps.plugins) or 'none'}); lr "
                              "indices need it for the dense field")
        opts: dict[str, Any] = {"knn_engine": args.knn_engine, **layout_opts(args)}
        what = f"k-NN engine {args.knn_engine}, sparse {args.sparse_layout}"
    else:
        opts = {"sparse_type": args.sparse_type, **layout_opts(args)}
        what = f"dense_vector + {args.sparse_type}"
    if adapter.index_exists(args.index):
        if not args.exist_ok:
            raise EngineError(f"{adapter.engine} index {args.index!r} already exists; pass "
                              "--exist-ok to accept it when it was built with this bundle, or "
                              "pick another name")
        adapter.check_bundle(args.index, bundle)
        print(f"index {args.index} exists and matches bundle {bundle.bundle_id}")
        return 0
    adapter.create_index(args.index, bundle, m=args.m, ef_construction=args.ef_construction,
                         shards=args.shards, replicas=args.replicas, **opts)
    print(f"created {ENGINE_NAMES[adapter.engine]} index {args.index} (dense dim "
          f"{bundle.config.served_dim}, {what}, bundle {bundle.bundle_id})")
    return 0


def index_info(client: Any, index: str) -> dict[str, Any]:
    """Summary of an index: LightRetriever _meta, doc count, size, dense field settings."""

    from lr_opensearch.engine.factory import make_adapter

    adapter = make_adapter(client)
    mapping = adapter.index_mapping(index)
    meta = meta_of(mapping, META_KEY) or {}
    stats = client.indices.stats(index=index, metric="docs,store")["_all"]["primaries"]
    settings = adapter.index_settings(index)
    props = mapping.get("properties", {})
    return {"index": index, "engine": adapter.engine, META_KEY: meta or None,
            "docs": stats["docs"]["count"], "store_bytes": stats["store"]["size_in_bytes"],
            "shards": int(settings["number_of_shards"]),
            "replicas": int(settings["number_of_replicas"]),
            **{kind: props.get(name) for kind, name in VECTOR_FIELDS.items()}}


def _dense_line(dense: dict[str, Any]) -> str:
    if "method" in dense:  # OpenSearch knn_vector
        method = dense["method"]
        return (f"dim {dense.get('dimension', '?')}, {method.get('engine', '?')} "
                f"{method.get('name', '?')} {method.get('space_type', '?')} "
                f"{method.get('parameters', {})}")
    opts = dense.get("index_options", {})  # Elasticsearch dense_vector
    return (f"dim {dense.get('dims', '?')}, {opts.get('type', '?')} "
            f"{dense.get('similarity', '?')} "
            f"{ {k: v for k, v in opts.items() if k != 'type'} }")


def _cmd_info(args: argparse.Namespace) -> int:
    info = index_info(client_from_args(args), args.index)
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    meta = info[META_KEY] or {}
    print(f"index      {info['index']}  ({ENGINE_NAMES[info['engine']]})")
    print(f"documents  {info['docs']}  ({info['store_bytes'] / 1e6:.1f} MB primary store)")
    print(f"shards     {info['shards']} x (1 + {info['replicas']} replicas)")
    print(f"bundle     {meta.get('bundle_id', '-  (not a LightRetriever index)')}")
    dense, sparse = (info[kind] or {} for kind in VECTOR_FIELDS)
    print(f"dense      {_dense_line(dense)}")
    layout = meta.get("sparse_layout")  # sparse_vector: the field is in the companion index
    seismic = f", SEISMIC {meta['seismic']}" if "seismic" in meta else ""
    print(f"sparse     {layout or sparse.get('type', '?')}, key encoding "
          f"{meta.get('key_encoding', '?')}{seismic}")
    print(f"written by lr-opensearch {meta.get('library_version', '?')}")
    return 0


def list_indices(client: Any) -> list[dict[str, Any]]:
    """Every index made by lr-opensearch on the cluster, closed ones included: name, state
    (open / closed), format, bundle id, document count (None when closed), and the bundle's
    directory on this machine (None: not here)."""
    from lr_opensearch.bundle.store import bundle_of_index
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.errors import ConfigError

    adapter = make_adapter(client)
    out = []
    for name, mapping in sorted(adapter.index_mappings("*", closed=True).items()):
        meta = meta_of(mapping, META_KEY)
        if not meta:
            continue
        try:
            here: str | None = str(bundle_of_index(name, meta))
        except ConfigError:
            here = None
        closed = adapter.index_closed(name)
        out.append({"index": name, "state": "closed" if closed else "open",
                    "format": meta.get("format", "lightretriever-index"),
                    "bundle_id": meta.get("bundle_id"),
                    "docs": None if closed else adapter.count(name), "bundle": here})
    return out


def _cmd_list(args: argparse.Namespace) -> int:
    rows = list_indices(client_from_args(args))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no lr-opensearch index on this cluster (make one with `lr ingest CORPUS`)")
        return 0
    width = max(5, *(len(r["index"]) for r in rows))
    print(f"{'index':<{width}}  {'docs':>9}  {'bundle id':<32}  bundle here")
    for r in rows:
        kind = "" if r["format"] == "lightretriever-index" else f" [{r['format']}]"
        docs = "closed" if r["docs"] is None else r["docs"]
        print(f"{r['index']:<{width}}  {docs:>9}  {r['bundle_id'] or '-':<32}  "
              f"{r['bundle'] or 'no (give --bundle DIR to search it)'}{kind}")
    return 0


def delete_targets(adapter: Any, target: str) -> tuple[list[str], dict[str, str]]:
    """The indices ``lr index delete target`` may delete, resolved to names: (the
    LightRetriever indices ``target`` names or matches, {other index: why it is kept}). An
    index counts as LightRetriever's when its mapping carries ``_meta.lightretriever``; one
    reached only through an alias is kept (name it)."""
    import re

    parts = [p for p in target.split(",") if p and not p.startswith("-")]
    patterns = [re.compile("".join(".*" if c == "*" else re.escape(c) for c in p) + r"\Z")
                for p in parts]
    ours: list[str] = []
    kept: dict[str, str] = {}
    for name, mapping in sorted(adapter.index_mappings(target, closed=True).items()):
        if not any(p.match(name) for p in patterns):
            kept[name] = f"reached through an alias in {target!r}, not named: name it"
        elif not meta_of(mapping, META_KEY):
            kept[name] = (f"not a LightRetriever index (its mapping has no _meta.{META_KEY}); "
                          "lr deletes only its own indices: use the engine's API if you mean it")
        else:
            ours.append(name)
    return ours, kept


def _cmd_delete(args: argparse.Namespace) -> int:
    if args.yes != args.index:
        raise EngineError(f"refusing to delete {args.index!r}: repeat its name with "
                          f"--yes {args.index}")
    import logging

    from lr_opensearch.engine.factory import make_adapter

    adapter = make_adapter(client_from_args(args))
    ours, kept = delete_targets(adapter, args.index)
    log = logging.getLogger("lr")
    for name, why in kept.items():
        log.error("kept index %s: %s", name, why)
    if not ours:
        raise EngineError(f"no LightRetriever index matches {args.index!r}: nothing deleted")
    log.info("deleting %d LightRetriever index(es) matching %r: %s", len(ours), args.index,
             ", ".join(ours))
    for name in ours:
        if adapter.index_exists(name):  # a companion index goes with its main index
            adapter.delete_index(name)
        print(f"deleted index {name}")
    return 1 if kept else 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.cli.common import bundle_path
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.options import CALIBRATED_SPARSE_TOKENS, CALIBRATED_TEXT_FIELDS
    from lr_opensearch.search.calibration import Shape, calibrate

    client = client_from_args(args)
    adapter = make_adapter(client)
    bundle = load_bundle(bundle_path(args, client))
    adapter.check_bundle(args.index, bundle)
    shapes = [Shape(), Shape(CALIBRATED_SPARSE_TOKENS, CALIBRATED_TEXT_FIELDS)]
    shapes += [Shape(n or None, tuple(args.text_fields.split(",")) if args.text_fields else None)
               for n in (args.sparse_tokens or [])]
    cal = calibrate(adapter, args.index, bundle, shapes=shapes, sample_docs=args.sample_docs,
                    seed=args.seed)
    if args.json:
        print(json.dumps(cal.to_meta(), indent=2))
        return 0
    print(f"calibrated {args.index} on {cal.method['pseudo_queries']} pseudo-queries of "
          f"{cal.method['sampled_documents']} documents (seed {args.seed}; recorded in its "
          f"_meta): leg, top-1 mean / median, top-10 mean")
    for key, leg in cal.scales.items():
        print(f"  {key:<16} {leg.top1_mean:10.4g} {leg.top1_median:10.4g} {leg.top10_mean:10.4g}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``lr index`` and its subcommands."""
    index = subparsers.add_parser("index", help="create and inspect LightRetriever indices")
    sub = index.add_subparsers(dest="index_command", metavar="ACTION", required=True)

    p = sub.add_parser("create", help="create an index for a bundle from index_templates/")
    p.add_argument("--bundle", required=True, help="model bundle directory")
    p.add_argument("--index", required=True, help="index name")
    p.add_argument("--knn-engine", default="lucene", choices=KNN_ENGINES,
                   help="OpenSearch k-NN engine of the dense field (default lucene; faiss needs "
                   "the native k-NN build)")
    p.add_argument("--sparse-type", default="sparse_vector", choices=ES_SPARSE_TYPES,
                   help="Elasticsearch sparse field type (default sparse_vector; rank_features "
                   "needs the mapper-extras module)")
    add_layout_args(p, default="rank_features")
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

    p = sub.add_parser("list", help="the cluster's lr-opensearch indices: bundle, documents, "
                       "whether the bundle is on this machine")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_connection_args(p)
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("calibrate", help="measure each leg's score scale on the index (for "
                       "fusion calibrated: one bool query) and record it in its _meta")
    p.add_argument("--index", required=True, help="index name")
    p.add_argument("--bundle", default=None,
                   help="model bundle directory (default: the one the index was built with)")
    p.add_argument("--sample-docs", type=int, default=DEFAULT_SAMPLE_DOCS,
                   help="documents whose pseudo-queries measure the scales (default "
                   "%(default)s)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--sparse-tokens", type=int, action="append", default=None, metavar="N",
                   help="also calibrate the sparse leg with the query's N heaviest tokens "
                   "(repeatable; the defaults are always calibrated)")
    p.add_argument("--text-fields", default=None, metavar="F[,F]",
                   help="with --sparse-tokens: the BM25 fields of that shape")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    add_connection_args(p)
    p.set_defaults(func=_cmd_calibrate)

    p = sub.add_parser("delete", help="delete LightRetriever indices (asks for the name again); "
                       "a pattern is resolved to names, other indices are kept")
    p.add_argument("index", help="an index name, a list a,b or a pattern (ad*)")
    p.add_argument("--yes", default=None, metavar="INDEX", help="the index name, to confirm")
    add_connection_args(p)
    p.set_defaults(func=_cmd_delete)
