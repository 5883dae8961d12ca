"""``lr search``: hybrid / dense / sparse search from the command line (thin CLI).

    lr search --index I "what is a boundary layer" [--bundle B --k 10 --mode hybrid
        --weights 0.4,0.2,0.4 --fusion auto --semantics opensearch --explain --json --url URL]

Prints a readable table (rank, id, fused score, each leg's score, title; ``--explain`` adds
each leg's normalised score and rank and the query tokens that contributed most to the
sparse score), or JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lr_opensearch import legs
from lr_opensearch.cli.common import (
    add_bundle_arg,
    add_connection_args,
    bundle_path,
    client_from_args,
    quiet_transport,
)
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import parse_weights
from lr_opensearch.options import (
    CALIBRATED,
    CALIBRATED_SPARSE_TOKENS,
    CALIBRATED_TEXT_FIELDS,
    CLIENT_FUSION_MIN_DOCS,
    DEFAULT_CANDIDATES,
    DEFAULT_RERANK_DEPTH,
    FUSION_PATHS,
    HYBRID_SKIPS_FROM,
    SEMANTICS,
)
from lr_opensearch.search.explain import Explanation
from lr_opensearch.search.hits import Hit

if TYPE_CHECKING:
    from lr_opensearch.search.rerank import Reranker

TITLE_WIDTH = 48
# control characters (C0 but newline, DEL, C1): a query or stored title holding them must not
# move the cursor, recolour or retitle the user's terminal, nor end a comment line
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029]")


def shown(text: str) -> str:
    """``text`` safe for a terminal line: each control character (newline included) as
    its Python escape (``\\x1b``), the rest untouched."""
    return CONTROL.sub(lambda m: repr(m.group())[1:-1], text.replace("\n", "\\n"))


def _num(value: float | None, width: int = 8) -> str:
    return f"{value:>{width}.4f}" if value is not None else " " * (width - 1) + "-"


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def format_hits(query: str, hits: Sequence[Hit], *, explain: bool = False) -> str:
    """A readable table of hits: rank, id, score, one column per leg that returned any of
    them (its score as it reads: the dense inner product, the sparse dot product, BM25;
    ``-``: that leg did not return the document), title. With ``explain`` every row is
    followed by each leg's normalised score and rank and the top query tokens
    (``token count x doc weight = contribution``).
    """
    lines = [f"query: {shown(query)}"]
    if not hits:
        lines.append("  (no hits)")
        return "\n".join(lines)
    columns = [name for name in legs.names() if any(name in h.scores for h in hits)]
    # a target of several indices: one _id can be a hit of each, so the index is shown
    several = len({h.index for h in hits}) > 1
    ids = [shown(f"{h.index}/{h.doc_id}" if several else h.doc_id) for h in hits]
    id_width = max(4, *(len(i) for i in ids))
    title_width = max(
        20, min(TITLE_WIDTH, shutil.get_terminal_size((120, 20)).columns - id_width - 40)
    )
    head = " ".join(f"{name:>8}" for name in columns)
    lines.append(f"{'rank':>4}  {'index/id' if several else 'id':<{id_width}}  {'score':>8} "
                 f"{head}  title")
    for h, doc_id in zip(hits, ids, strict=True):
        cells = " ".join(_num(h.scores.get(name)) for name in columns)
        lines.append(f"{h.rank:>4}  {doc_id:<{id_width}}  {_num(h.score)} {cells}  "
                     f"{_clip(shown(' '.join(h.title.split())), title_width)}")
        if explain and h.explanation is not None:
            lines.extend(_explain_lines(h.explanation))
    return "\n".join(lines)


def format_dsl(plan: dict[str, Any]) -> str:
    """One query's requests as Dev Tools console text (``GET /index/_search`` + body)."""
    f = plan["fusion"]
    how = {"server": f"{plan['engine']} fuses these legs itself",
           "client": "fused client side by lr_opensearch.search.fusion",
           "single": "one leg alone",
           CALIBRATED: "one bool query: each leg's clause boosted by weight / its scale "
                       "calibrated on the index"}[plan["path"]]
    lines = [f"# query: {json_text(plan['query'])}",
             f"# legs {', '.join(f['legs'])}, weights {f['weights']}, semantics "
             f"{f['semantics']}, {f['normalization']} + {f['combination']}: {how}"]
    if plan["path"] == CALIBRATED:
        lines[-1] = (f"# legs {', '.join(f['legs'])}, weights {f['weights']}, boosts "
                     f"{[round(b, 6) for b in f['boosts']]}: {how}")
    for r in plan["requests"]:
        if "leg" in r:
            lines.append(f"# leg: {r['leg']}")
        lines.append(f"{r['method']} {urllib.parse.quote(r['path'], safe='/?=:,*&_-.')}")
        lines.append(_dumps_compact_vectors(r["body"]))
    return "\n".join(lines)


def _dumps_compact_vectors(body: Any) -> str:
    """Indented JSON with every list of numbers (the query vector) on one line."""
    vectors: list[str] = []

    def swap(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: swap(v) for k, v in node.items()}
        if isinstance(node, list):
            if node and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in node):
                vectors.append(json.dumps(node))
                return f"\x00{len(vectors) - 1}\x00"
            return [swap(v) for v in node]
        return node

    text = json.dumps(swap(body), ensure_ascii=False, indent=2)
    for i, vec in enumerate(vectors):
        text = text.replace(json.dumps(f"\x00{i}\x00"), vec)
    return escape_controls(text)


def escape_controls(text: str) -> str:
    """JSON text with DEL, the C1 controls and the line / paragraph separators (which JSON
    leaves raw) as ``\\u`` escapes: they stay inside their string, on their line."""
    return CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def json_text(value: Any) -> str:
    """``value`` as one line of JSON that no character of it can break."""
    return escape_controls(json.dumps(value, ensure_ascii=False))


def _explain_lines(e: Explanation) -> list[str]:
    pad = " " * 6

    def part(name: str) -> str:
        leg, mine = legs.get(name), e.leg(name)
        label = f"{name} {leg.score_label}".strip()
        if mine.score is None:
            return f"{label} -"
        if mine.rank is None and mine.norm is not None:  # calibrated: its part of the sum
            return f"{label} {mine.score:.4f} (calibrated {mine.norm:.4f})"
        extra = f", norm {mine.norm:.4f}" if mine.norm is not None else ""
        return f"{label} {mine.score:.4f} (rank {mine.rank}{extra})"

    out = [pad + " | ".join(part(name) for name in e.legs)]
    if e.top_tokens:
        tokens = ", ".join(
            f"{t.token!r} {t.query_count:g}x{t.doc_weight:.3f}={t.contribution:.3f}"
            for t in e.top_tokens
        )
        out.append(f"{pad}top tokens: {tokens}")
    elif e.sparse_from_tokens is None:
        out.append(f"{pad}top tokens: (document has no stored lr_sparse)")
    else:
        out.append(f"{pad}top tokens: (no query token in the document)")
    return out


def hits_json(query: str, hits: Sequence[Hit]) -> dict[str, Any]:
    """A JSON-ready dict for one query's hits. Per leg, ``scores`` / the explanation's
    ``legs``; the flat ``<leg>_score`` (and ``<leg>_norm`` / ``<leg>_rank``) keys of the
    output before the leg registry are kept for every leg."""
    return {"query": query, "hits": [_hit_json(h) for h in hits]}


def _hit_json(h: Hit) -> dict[str, Any]:
    """One hit as plain data: ``scores`` {leg: score as it reads}, and with an explanation
    ``explanation.legs`` {leg: engine_score, score, norm, rank} (one name per meaning: no
    flat ``<leg>_score`` keys, which meant the inner product on the hit and the engine score
    in the explanation)."""
    out = dataclasses.asdict(h)
    out["scores"] = dict(h.scores)
    if h.explanation is not None:
        e = h.explanation
        out["explanation"]["legs"] = {name: dataclasses.asdict(e.leg(name)) for name in e.legs}
    return out


def _weights(text: str | None) -> dict[str, float] | None:
    return None if text is None else parse_weights(text)


def _filter(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"--filter must be a JSON query clause, e.g. "
            f'\'{{"term": {{"metadata.lang": "en"}}}}\': {exc}'
        ) from exc


def _cmd_search(args: argparse.Namespace) -> int:
    quiet_transport(args)
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.search import QueryEncoding, Retriever, SearchOptions

    client = client_from_args(args)
    bundle = load_bundle(bundle_path(args, client))
    reranker: Reranker | None = None
    if args.rerank == "full":
        from lr_opensearch.model.full_model import FullModelReranker

        reranker = FullModelReranker(bundle, args.instruction)
    elif args.rerank == "ur2n":
        if not args.ur2n_bundle:
            raise ConfigError("--rerank ur2n needs --ur2n-bundle DIR (a UR²N bundle)")
        from lr_opensearch.ur2n.model import UR2NReranker

        reranker = UR2NReranker(args.ur2n_bundle)
    options = SearchOptions(
        k=args.k, from_=args.from_, mode=args.mode, weights=_weights(args.weights),
        fusion=args.fusion, semantics=args.semantics, candidates=args.candidates,
        sparse_tokens=args.sparse_tokens,
        text_fields=tuple(args.text_fields.split(",")) if args.text_fields else None,
        ef_search=args.ef_search, filter=_filter(args.filter), timeout=args.timeout,
        explain=args.explain, instruction=args.instruction, rerank_depth=args.rerank_depth,
        rerank_budget_s=args.rerank_budget)
    retriever = Retriever(bundle, client, args.index, options, rerank=reranker,
                          encoding=QueryEncoding(
                              encode="cluster" if args.in_cluster else "client",
                              sparse_min_idf=args.sparse_min_idf))
    if args.dsl:
        plans = retriever.dsl(args.query)
        print(json.dumps(plans, ensure_ascii=False, indent=2) if args.json
              else "\n\n".join(format_dsl(p) for p in plans))
        return 0
    results = retriever.search_batch(args.query)
    if args.json:
        print(
            json.dumps(
                [hits_json(q, h) for q, h in zip(args.query, results, strict=True)],
                ensure_ascii=False,
                indent=2,
            )
        )
        return 0
    print(
        "\n\n".join(
            format_hits(q, h, explain=args.explain)
            for q, h in zip(args.query, results, strict=True)
        )
    )
    return 0


def register(subparsers: Any) -> None:
    """Add ``lr search`` to the ``lr`` dispatcher."""
    p = subparsers.add_parser(
        "search",
        help="hybrid search (or one leg alone) with explanations",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("query", nargs="+", help="query text(s); several are sent in one _msearch")
    add_bundle_arg(p)
    p.add_argument("--index", required=True, help="index name (several: a,b, an alias or a "
                   "wildcard, all of one bundle)")
    p.add_argument("--k", type=int, default=10, help="hits per query (default 10)")
    p.add_argument("--from", dest="from_", type=int, default=0, help="offset into the ranked list")
    p.add_argument("--mode", choices=legs.modes(), default=legs.HYBRID,
                   help=f"{legs.HYBRID} (the bundle's legs), or one leg alone")
    example = ",".join(f"{leg}={w:g}" for leg, w in legs.default_weights().items() if w)
    p.add_argument(
        "--weights", default=None, help=f"weight per leg, e.g. {example} (a leg left out is "
        f"not searched; plain numbers name the legs in order: {', '.join(legs.names())}); "
        "default: the bundle's"
    )
    p.add_argument(
        "--fusion",
        choices=FUSION_PATHS,
        default=FUSION_PATHS[0],
        help="hybrid fusion path (auto: the server when the cluster has neural-search, "
        f"except client side from {CLIENT_FUSION_MIN_DOCS:,} documents on OpenSearch "
        f"before {'.'.join(map(str, HYBRID_SKIPS_FROM))}, whose hybrid query cannot skip; "
        f"same ranking); {CALIBRATED}: one bool query, each leg boosted by weight / its "
        "scale measured on the index (lr index calibrate)",
    )
    p.add_argument(
        "--semantics",
        choices=SEMANTICS,
        default=None,
        help="fusion semantics (default: the bundle's)",
    )
    p.add_argument("--filter", default=None, help="JSON query clause applied to every leg")
    p.add_argument(
        "--instruction", default=None, help="query instruction name (default: the bundle's)"
    )
    p.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES,
                   help=f"hits per sub-query (default {DEFAULT_CANDIDATES})")
    p.add_argument("--ef-search", type=int, default=None, help="HNSW ef_search for the knn query")
    p.add_argument("--sparse-tokens", type=int, default=None, metavar="N",
                   help="send the sparse leg the query's N heaviest tokens only (0: all; "
                   f"default all, with --fusion {CALIBRATED} {CALIBRATED_SPARSE_TOKENS})")
    p.add_argument("--text-fields", default=None, metavar="F[,F]",
                   help="the fields BM25 searches (default title,text; with --fusion "
                   f"{CALIBRATED} {','.join(CALIBRATED_TEXT_FIELDS or ('title', 'text'))})")
    p.add_argument("--sparse-min-idf", type=float, default=0.0, metavar="X",
                   help="leave query tokens with IDF below X out of the sparse leg (default 0: "
                        "keep all; needs a fitted bundle's IDF weights)")
    p.add_argument("--timeout", default=None, help="engine timeout per search, e.g. 2s")
    p.add_argument(
        "--explain", action="store_true", help="show raw/normalised scores and top tokens"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--rerank", choices=("full", "ur2n"), default=None,
                   help="a second stage: 'full' rescores the top hits with the bundle's full "
                   "model (needs torch and the bundle's document encoder); 'ur2n' with the "
                   "--ur2n-bundle's true/false reranker")
    p.add_argument("--ur2n-bundle", default=None, metavar="DIR",
                   help="UR²N bundle of --rerank ur2n")
    p.add_argument("--rerank-depth", type=int, default=DEFAULT_RERANK_DEPTH,
                   help=f"hits reranked (default {DEFAULT_RERANK_DEPTH})")
    p.add_argument("--rerank-budget", type=float, default=None,
                   help="seconds of reranking per search at most (default: no limit)")
    p.add_argument("--in-cluster", action="store_true",
                   help="send the text only: the cluster's query models encode it (after `lr "
                   "models deploy --bundle B --index I`; docs/IN_CLUSTER.md)")
    p.add_argument("--dsl", action="store_true",
                   help="print the exact request(s) instead of searching, in Dev Tools console "
                   "form (with --json: as JSON); server fusion: one _search with its "
                   "normalization pipeline inline; client fusion: one per leg")
    add_connection_args(p)
    p.set_defaults(func=_cmd_search)
