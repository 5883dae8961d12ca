"""``lr eval``: evaluate BM25, the full backbone and LightRetriever on BEIR-format data.

    lr eval --dataset ../shared/data/scifact --bundle B [--index I]
            [--runs bm25,full-dense,lr-dense,lr-sparse,lr-hybrid,full-hybrid,...]
            [--out results/eval/scifact] [--json] [--compare]
    lr eval --compare results/eval          # table of every report found there
    lr eval --dataset D --bundle B --runs bm25,bm25+rerank,lr-hybrid,lr-hybrid+rerank,xtr,\
            xtr+rerank --reranker ur2n --ur2n-bundle U [--token-index T]   # UR²N

Indexes the corpus through the ingest library (an existing index is reused when its
bundle matches and it holds the whole corpus; one that holds documents not in the corpus
is refused, never written into), runs the judged queries in batches and
writes ``report.json``, one TREC run file per run and ``sweep.png`` (a weight sweep of one
leg against the bundle's other legs, for display only: it never changes the bundle's
default weights, which were chosen on SciFact train queries).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from lr_opensearch import legs
from lr_opensearch.cli.common import (
    BUNDLE_ENV,
    add_bundle_arg,
    add_connection_args,
    bundle_path,
    client_from_args,
    quiet_transport,
)
from lr_opensearch.errors import ConfigError
from lr_opensearch.evaluation import compare_table, load_reports, parse_runs
from lr_opensearch.evaluation.config import MODEL_RUNS, RERANKERS, default_runs
from lr_opensearch.options import DEFAULT_EVAL_DEPTH, DEFAULT_RERANK_DEPTH

DEFAULT_OUT = Path("results") / "eval"


def _cmd_eval(args: argparse.Namespace) -> int:
    quiet_transport(args)
    if not args.dataset:
        if not args.compare:
            raise ConfigError("give --dataset DIR (one or more), or --compare [REPORT_DIRS]")
        print(compare_table(load_reports(args.compare or [DEFAULT_OUT])))
        return 0
    if args.index and len(args.dataset) > 1:
        raise ConfigError("--index names one index; give one --dataset with it")
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.evaluation.config import EvalConfig
    from lr_opensearch.evaluation.runs import evaluate

    client = client_from_args(args)
    if not (args.bundle or args.index or os.environ.get(BUNDLE_ENV)):
        raise ConfigError("give --bundle DIR to evaluate a dataset (or --index NAME of an index "
                          "built with the bundle)")
    bundle = load_bundle(bundle_path(args, client))
    reports: list[dict[str, Any]] = []
    for ds in args.dataset:
        name = Path(ds).resolve().name
        out = (
            Path(args.out) / name
            if args.out and len(args.dataset) > 1
            else Path(args.out or DEFAULT_OUT / name)
        )
        config = EvalConfig(
            runs=tuple(parse_runs(args.runs)),
            depth=args.depth,
            batch_size=args.batch_size,
            out_dir=out,
            sweep=not args.no_sweep,
            sweep_leg=args.sweep_leg,
            split=args.split,
            url=args.url,
            instruction=args.instruction,
            reranker=args.reranker,
            ur2n_bundle=args.ur2n_bundle,
            token_index=args.token_index,
            rerank_depth=args.rerank_depth,
            max_queries=args.max_queries,
        )
        report = evaluate(ds, bundle, client, index=args.index, config=config)
        reports.append(report)
        if args.json:
            print(json.dumps(report), flush=True)
    if args.compare is not None:
        extra = load_reports(args.compare) if args.compare else []
        print(compare_table(reports + extra))
    elif not args.json:
        print(compare_table(reports))
    return 0


def register(subparsers: Any) -> None:
    """Add ``lr eval`` to the ``lr`` dispatcher."""
    p = subparsers.add_parser(
        "eval",
        help="evaluate runs on a BEIR-format collection",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--dataset",
        action="append",
        default=[],
        help="BEIR folder (corpus.jsonl[.gz], queries.jsonl[.gz], qrels/test.tsv); repeatable",
    )
    add_bundle_arg(p)
    p.add_argument(
        "--index", default=None, help="index to use/create (default lr-eval-<dataset>-<bundle id>)"
    )
    p.add_argument(
        "--runs",
        default=None,
        help=f"comma list of runs (default: {','.join(default_runs())}; by name only: "
        f"{', '.join(MODEL_RUNS)})",
    )
    p.add_argument("--split", default="test", help="qrels split to evaluate (default test)")
    p.add_argument("--instruction", default=None, metavar="NAME",
                   help="the bundle's instruction (table) for every dataset (default: the table "
                        "named after the dataset if the bundle has one, else its default)")
    p.add_argument("--depth", type=int, default=DEFAULT_EVAL_DEPTH,
                   help=f"hits per query (default {DEFAULT_EVAL_DEPTH})")
    p.add_argument("--reranker", choices=RERANKERS, default=RERANKERS[0],
                   help="the reranker of the bm25+rerank and lr-hybrid+rerank runs: full (the "
                   "bundle's full model, default) or ur2n (the --ur2n-bundle's true/false "
                   "reranker); xtr+rerank always uses ur2n")
    p.add_argument("--max-queries", type=int, default=None, metavar="N",
                   help="evaluate the first N judged queries only (file order; for runs too "
                   "slow for the whole set on a CPU)")
    p.add_argument("--rerank-depth", type=int, default=DEFAULT_RERANK_DEPTH,
                   help=f"hits a +rerank run rescores per query (default {DEFAULT_RERANK_DEPTH})")
    p.add_argument("--ur2n-bundle", default=None, metavar="DIR",
                   help="UR²N bundle for the xtr runs and --reranker ur2n")
    p.add_argument("--token-index", default=None,
                   help="UR²N token index of the xtr runs (default lr-tokens-<dataset>-<UR²N "
                   "bundle id>; write it with python -m ingest.token_index)")
    p.add_argument("--batch-size", type=int, default=32, help="queries per _msearch (default 32)")
    p.add_argument("--out", default=None, help="report directory (default results/eval/<dataset>)")
    p.add_argument("--no-sweep", action="store_true", help="skip the weight sweep")
    p.add_argument("--sweep-leg", default=None, choices=legs.names(), metavar="LEG",
                   help="the leg whose weight the sweep moves from 0 to 1, the bundle's other "
                   f"weighted legs sharing the rest (one of {', '.join(legs.names())}; default "
                   "the bundle's first weighted leg)")
    p.add_argument(
        "--json", action="store_true", help="print each report as one JSON object on stdout"
    )
    p.add_argument(
        "--compare",
        nargs="*",
        default=None,
        metavar="REPORTS",
        help="print a table across runs/datasets (plus reports found in these dirs)",
    )
    add_connection_args(p)
    p.set_defaults(func=_cmd_eval)
