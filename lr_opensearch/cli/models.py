"""``lr models deploy|list|undeploy``: LightRetriever query encoding inside the cluster.

    lr models deploy --bundle B [--index I] [--default-pipeline]
    lr models list
    lr models undeploy [--bundle B] [--delete]

``deploy`` uploads the bundle's query side as two ml-commons models (dense ONNX table mean,
sparse tokenizer + IDF), deploys them, records their ids in the index ``_meta`` and writes
the search pipeline, so any client can search the index with text alone. Run it again
whenever a model is not served (undeployed, failed; after a node restart ml-commons
redeploys the deployed models by itself within seconds): it uploads nothing twice.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from lr_opensearch.cli.common import add_connection_args, client_from_args, quiet_transport


def _cmd_deploy(args: argparse.Namespace) -> int:
    quiet_transport(args)
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.cluster import deploy_bundle

    record = deploy_bundle(client_from_args(args), load_bundle(args.bundle), args.index,
                           instruction=args.instruction, max_tokens=args.max_tokens,
                           sparse_min_idf=args.sparse_min_idf,
                           default_pipeline=args.default_pipeline, timeout=args.timeout)
    if args.json:
        print(json.dumps(record, indent=2))
        return 0
    for kind, done in record["actions"].items():
        print(f"{kind:<6} {record[f'{kind}_model_id']}  {record[f'{kind}_model']}  ({done})")
    if args.index:
        default = " (the index's default)" if args.default_pipeline else ""
        print(f"index {args.index}: models recorded in _meta, search pipeline "
              f"{record['pipeline']}{default}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    quiet_transport(args)
    from lr_opensearch.engine import mlapi

    models = mlapi.list_models(client_from_args(args))
    if args.json:
        print(json.dumps(models, indent=2, default=str))
        return 0
    if not models:
        print("no LightRetriever models on the cluster (lr models deploy --bundle B)")
    for m in models:
        print(f"{m['model_id']}  {m['state']:<12} {m['name']}  "
              f"{m.get('algorithm', '?')}")
    return 0


def _cmd_undeploy(args: argparse.Namespace) -> int:
    quiet_transport(args)
    from lr_opensearch.cluster import undeploy_bundle

    bundle_id = None
    if args.bundle:
        from lr_opensearch.bundle import load_bundle

        bundle_id = load_bundle(args.bundle, verify=False).bundle_id
    done = undeploy_bundle(client_from_args(args), bundle_id, delete=args.delete)
    verb = "deleted" if args.delete else "undeployed"
    for m in done:
        print(f"{verb} {m['model_id']}  {m['name']}")
    if not done:
        print("no LightRetriever models matched")
    return 0


def register(subparsers: Any) -> None:
    """Add ``lr models`` and its subcommands."""
    models = subparsers.add_parser("models", help="LightRetriever query encoding inside the "
                                   "cluster (ml-commons)", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    p = sub.add_parser("deploy", help="upload + deploy a bundle's query models; wire an index")
    p.add_argument("--bundle", required=True, help="model bundle directory")
    p.add_argument("--index", default=None, help="index to wire (its _meta and pipeline)")
    p.add_argument("--default-pipeline", action="store_true",
                   help="make the pipeline the index's default (plain _search then fuses)")
    p.add_argument("--instruction", default=None, help="query instruction (default: the bundle's)")
    p.add_argument("--max-tokens", type=int, default=None,
                   help="query tokens kept (default: the most the cluster keeps, 510 for BERT "
                        "tokenizers: ml-commons keeps 512 with the specials)")
    p.add_argument("--sparse-min-idf", type=float, default=0.0, metavar="X",
                   help="leave tokens with IDF below X out of the sparse query (default 0)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait per deploy")
    p.add_argument("--json", action="store_true")
    add_connection_args(p)
    p.set_defaults(func=_cmd_deploy)

    p = sub.add_parser("list", help="the LightRetriever models on the cluster and their state")
    p.add_argument("--json", action="store_true")
    add_connection_args(p)
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("undeploy", help="undeploy the models of a bundle (default: all lr models)")
    p.add_argument("--bundle", default=None, help="only this bundle's models")
    p.add_argument("--delete", action="store_true", help="also delete them from the cluster")
    add_connection_args(p)
    p.set_defaults(func=_cmd_undeploy)
