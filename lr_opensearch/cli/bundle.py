"""``lr bundle``: build a bundle from an HF checkpoint and inspect bundles.

``lr bundle info BUNDLE [--json] [--verify]`` reads the manifest (no torch);
``lr bundle build [--model DIR] --out BUNDLE`` runs ``lr_opensearch.bundle.build.build_bundle``
(imported only then: it needs torch); without ``--model`` it uses the packaged
all-MiniLM-L6-v2.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from lr_opensearch.errors import ConfigError


def register(subparsers: Any) -> None:
    """Add ``lr bundle`` and its subcommands to the ``lr`` parser."""
    parser = subparsers.add_parser("bundle", help="build and inspect model bundles",
                                   description="Build and inspect LightRetriever model bundles.")
    sub = parser.add_subparsers(dest="bundle_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])

    info = sub.add_parser("info", help="show a bundle's manifest summary")
    info.add_argument("bundle", type=Path, help="bundle directory")
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    info.add_argument("--verify", action="store_true",
                      help="hash every file, doc encoder included (default: query side only)")
    info.set_defaults(func=run_info)

    build = sub.add_parser("build", help="build a bundle from an HF checkpoint (needs torch)")
    build.add_argument("--model", type=Path, default=None,
                       help="HF save_pretrained directory (default: packaged all-MiniLM-L6-v2)")
    build.add_argument("--out", type=Path, required=True, help="bundle directory to write")
    build.add_argument("--instruction", action="append", default=[], metavar="NAME=TEXT",
                       help="a query instruction (repeatable); default: default='' (no text)")
    build.add_argument("--pooling", choices=["cls", "mean", "last"], default=None)
    norm = build.add_mutually_exclusive_group()
    norm.add_argument("--normalize", dest="normalize", action="store_true", default=None,
                      help="L2-normalise dense vectors")
    norm.add_argument("--no-normalize", dest="normalize", action="store_false")
    build.add_argument("--sparse-head", choices=["lm", "mlm", "tied"], default=None)
    build.add_argument("--max-length", type=int, default=None, help="doc encoder max tokens")
    build.add_argument("--served-dim", type=int, default=None, help="leading dense dims served")
    build.add_argument("--batch-size", type=int, default=256, help="table rows per forward pass")
    build.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    build.set_defaults(func=run_build)


def parse_instructions(items: list[str]) -> dict[str, str] | None:
    """``["qa=Query: "]`` -> ``{"qa": "Query: "}``; ConfigError on an item without '='."""
    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--instruction {item!r}: expected NAME=TEXT (e.g. default=)")
        out[name] = text
    return out


def run_build(args: argparse.Namespace) -> int:
    from lr_opensearch.bundle.build import build_bundle

    start = time.perf_counter()
    path = build_bundle(
        args.model, args.out, instructions=parse_instructions(args.instruction),
        pooling=args.pooling, normalize=args.normalize, sparse_head=args.sparse_head,
        max_length=args.max_length, served_dim=args.served_dim, batch_size=args.batch_size,
        overwrite=args.overwrite,
    )
    from lr_opensearch.bundle import load_bundle

    bundle = load_bundle(path)
    print(f"built {path} (bundle id {bundle.bundle_id}) in {time.perf_counter() - start:.1f} s")
    return 0


def summary(bundle: Any) -> dict[str, Any]:
    """The facts ``lr bundle info`` shows."""
    m = bundle.manifest
    sizes = m["files"]
    return {
        "path": str(bundle.path),
        "bundle_id": bundle.bundle_id,
        "format": f"{m['format']} v{m['format_version']}",
        "library_version": m.get("library_version"),
        "created_at": m.get("created_at"),
        "config": bundle.config.to_dict(),
        "vocab_size": bundle.vocab_size,
        "special_token_ids": sorted(bundle.special_token_ids),
        "query_tables": {name: {"file": e["file"], "shape": e["shape"], "instruction": e["instruction"]}
                         for name, e in m["query_tables"].items()},
        "doc_encoder": m.get("doc_encoder"),
        "files": len(sizes),
        "total_bytes": sum(int(v["size"]) for v in sizes.values()),
    }


def run_info(args: argparse.Namespace) -> int:
    from lr_opensearch.bundle import load_bundle

    bundle = load_bundle(args.bundle)
    if args.verify:
        bundle.verify_all()
    info = summary(bundle)
    info["verified"] = "all files" if args.verify else "query side (tokenizer, tables)"
    if args.json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
        return 0
    cfg = info.pop("config")
    print(f"bundle      {info['path']}")
    print(f"id          {info['bundle_id']}  ({info['format']}, lr-opensearch {info['library_version']}, "
          f"{info['created_at']})")
    print(f"backbone    {cfg['backbone_name']} ({cfg['architecture']}, {cfg['kind']}, "
          f"pooling {cfg['pooling']}, normalize {cfg['normalize']})")
    print(f"dense       dim {cfg['dense_dim']}, served {cfg['served_dim']}")
    print(f"sparse      head {cfg['sparse_head']}, top-k {cfg['sparse_top_k']}, min weight "
          f"{cfg['sparse_min_weight']}, keys {cfg['key_encoding']}, stopwords removed "
          f"{cfg['remove_stopwords']}")
    print(f"fusion      dense {cfg['dense_weight']} / sparse {cfg['sparse_weight']} "
          f"({cfg['fusion_semantics']})")
    print(f"vocabulary  {info['vocab_size']} tokens, {len(info['special_token_ids'])} special excluded")
    for name, t in info["query_tables"].items():
        mark = " (default)" if name == cfg["default_instruction"] else ""
        print(f"table       {name}{mark}: {t['shape']} float16, instruction {t['instruction']!r}")
    print(f"doc encoder {info['doc_encoder'] or 'none (query-only bundle)'}")
    print(f"files       {info['files']}, {info['total_bytes'] / 1e6:.1f} MB; verified: {info['verified']}")
    return 0
