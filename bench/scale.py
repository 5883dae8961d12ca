"""Cost as the corpus grows: each leg, the hybrid and BM25 at 10k .. 1M documents.

    python bench/scale.py --bundle B --source-index I [--source-index J ...]
        [--docs 10000,100000,1000000] [--candidates 10,30,100] [--queries 100]
        [--clients 8] [--seconds 5] [--dataset DIR --split train] [--url URL]
        [--sparse-top-k K] [--knn-engine lucene|faiss] [--knn-encoder sq7]
        [--ef-search N] [--sparse-min-idf X] [--setting KEY=VALUE] [--quality]
        [--tag NAME] [--index-of TAG] [--rebuild] [--build-only] [--template] [--plugin]
        [--out results/bench/scale.json]

For each size N: a corpus of N documents synthesised from the real encoded documents of
the source index(es) (``bench/scale_corpus.py`` says how), indexed on the node with the
vectors precomputed (bulk only, no model; refresh off while loading), then timed:

- one client: every query of the dataset's ``--split`` (train by default; texts only,
  no judgment is read) in turn through every shape - BM25 at size 10 (what users run
  today), each leg alone at size C, LR hybrid with server fusion and with client fusion
  at C candidates, and the one calibrated ``bool`` query (``fusion="calibrated"``, knn k =
  C) in each of ``CALIBRATED_SHAPES`` (the default shape; 10 / every sparse token with
  BM25 on ``text``; every token with BM25 on title + text), for each C; with
  ``--template`` also the index's stored text-only search template (``GET
  /<index>/_search/template``, the cluster encodes the query; the bench deploys the query
  models first, so the node needs ml-commons); with ``--plugin`` also the LightRetriever
  plugin's ``POST /<index>/_lightretriever`` at each C (the bench loads the bundle into it;
  the node needs the plugin: ``lr node start --with-plugin``) beside client fusion that
  fetches the page's ``_source`` as the plugin does (``hybrid-client+src``) - shapes
  interleaved per query so drift hits
  all alike: p50 / p99 ms (each index is calibrated after its build, and again if its
  calibration lacks a timed shape);
- ``--clients`` threads for ``--seconds`` per shape: QPS, p50 / p99 ms.

Reports index size, segments and build time per size, prints the hybrid / BM25 ratios
(same process, same node), and writes ``--out`` (per size: ``docs``, build figures, and
``modes``: per mode - ``bm25`` = BM25 at size 10, ``hybrid`` = LR hybrid at the default
candidates as ``fusion="auto"`` runs it at that size (``auto_path``), ``hybrid_server``
and ``hybrid_client`` both ways, each leg alone at the default candidates - ``p50_ms``;
every shape in ``one_client`` and ``clients``) under
the run's ``--tag`` (``base`` = default settings; a remedy gets its own tag), and a plot
of latency against corpus size next to it. Sizes already in ``--out`` are kept unless run
again, so one size can be run alone (``--docs 20000``). Indexes are named
``lr-scale-<tag>-<N>`` and reused when they hold N documents; ``--index-of base`` times
search-time variants on the base indexes. ``--quality`` also indexes the source documents
themselves (``lr-scale-<tag>-real``, their own ids, the same settings) and reports
nDCG@10 on the ``--split`` judgments - SciFact train by default, never test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

CHUNK = 500


def query_texts(folder: Path) -> list[str]:
    """Every query text of a BEIR folder's queries file (no judgment is read)."""
    from lr_opensearch.evaluation.beir import _find, iter_jsonl

    return [str(r["text"]) for _, r in iter_jsonl(_find(folder, "queries"))]


def interleave(lists: list[list[str]]) -> list[str]:
    """Round-robin over the lists, so a prefix has some of each."""
    out = []
    for i in range(max(len(x) for x in lists)):
        out += [x[i] for x in lists if i < len(x)]
    return out


def index_name(tag: str, n: int) -> str:
    return f"lr-scale-{tag}-{n}"


def build(client: Any, adapter: Any, bundle: Any, docs: Iterator[tuple[str, dict[str, Any]]],
          name: str, n: int, index_opts: dict[str, Any]) -> dict[str, Any]:
    """Create ``name`` for ``bundle`` and bulk-load the ``n`` documents of ``docs`` into it."""
    import orjson
    from tqdm import tqdm

    if adapter.index_exists(name):
        adapter.delete_index(name)
    create(adapter, bundle, name, index_opts)
    adapter.put_index_settings(name, {"refresh_interval": "-1"})
    t0 = time.perf_counter()
    pending: list[Future[Any]] = []

    def send(body: bytes) -> None:
        resp = client.bulk(body=body, index=name)
        if resp.get("errors"):
            bad = next(i for i in resp["items"] if "error" in next(iter(i.values())))
            raise SystemExit(f"bulk into {name} refused a document: {bad}")

    with ThreadPoolExecutor(2) as pool, tqdm(total=n, unit="doc", desc=name) as bar:
        while chunk := list(itertools.islice(docs, CHUNK)):
            lines = []
            for doc_id, fields in chunk:
                lines.append(orjson.dumps({"index": {"_id": doc_id}}))
                lines.append(orjson.dumps(fields, option=orjson.OPT_SERIALIZE_NUMPY))
            pending.append(pool.submit(send, b"\n".join(lines) + b"\n"))
            bar.update(len(chunk))
            while len(pending) > 3:
                pending.pop(0).result()
        for f in pending:
            f.result()
    load_s = time.perf_counter() - t0
    adapter.put_index_settings(name, {"refresh_interval": None})
    adapter.refresh(name)
    build_s = time.perf_counter() - t0
    if adapter.count(name) != n:
        raise SystemExit(f"{name}: {adapter.count(name)} documents after the load, not {n}")
    return {"load_s": load_s, "build_s": build_s, "docs_per_s": n / build_s}


def create(adapter: Any, bundle: Any, name: str, index_opts: dict[str, Any]) -> None:
    """Create ``name`` with the product template; ``knn_encoder`` (``sq7``: Lucene scalar
    quantization, 7 bits) is a bench-only variant of it."""
    opts = dict(index_opts)
    encoder = opts.pop("knn_encoder", None)
    if encoder is None:
        adapter.create_index(name, bundle, **opts)
        return
    from lr_opensearch.engine.adapter import DENSE_FIELD

    body = adapter.index_body(bundle, **opts)
    params = body["mappings"]["properties"][DENSE_FIELD]["method"]["parameters"]
    params["encoder"] = {"name": "sq", "parameters": {"bits": int(encoder.removeprefix("sq"))}}
    adapter._create(name, body)


def synthetic(synth: Any, n: int) -> Iterator[tuple[str, dict[str, Any]]]:
    for start in range(0, n, CHUNK):
        yield from synth.chunk(start, min(n, start + CHUNK))


def index_stats(client: Any, name: str) -> dict[str, Any]:
    st = client.indices.stats(index=name, metric="store,segments")["indices"][name]["primaries"]
    return {"index_bytes": int(st["store"]["size_in_bytes"]),
            "segments": int(st["segments"]["count"])}


# the one calibrated bool query's shapes (knn k = the candidates): (name, sparse tokens
# (0: all), BM25 fields); None: the default shape (options.CALIBRATED_*)
CALIBRATED_SHAPES: list[tuple[str, int | None, tuple[str, ...] | None]] = [
    ("calibrated", None, None),
    ("calibrated-t10", 10, ("text",)),
    ("calibrated-all", 0, ("text",)),
    ("calibrated-full", 0, ("title", "text")),
]


def shapes_for(leg_names: list[str], cs: list[int], template: str | None = None,
               plugin: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """(shape name, search overrides) for every shape the bench times; ``template``: also
    the index's stored text-only search template (in-cluster encoding, its own knn k);
    ``plugin``: also the LightRetriever plugin's one text-only request at each C, without
    the hits' ``_source`` as the client shapes run (``plugin``) and with it (``plugin+src``,
    beside client fusion fetching the page's ``_source`` as well: ``hybrid-client+src``)."""
    from lr_opensearch.options import CALIBRATED, DEFAULT_CANDIDATES

    out: list[tuple[str, dict[str, Any]]] = [("bm25@10", {"mode": "bm25", "k": 10})]
    for c in cs:
        out += [(f"{leg}@{c}", {"mode": leg, "k": c}) for leg in leg_names
                if f"{leg}@{c}" != out[0][0]]
        out += [(f"hybrid-{f}@{c}", {"mode": "hybrid", "fusion": f, "candidates": c, "k": 10})
                for f in ("server", "client")]
        for name, tokens, fields in CALIBRATED_SHAPES:
            shape = {} if tokens is None else {"sparse_tokens": tokens, "text_fields": fields}
            out.append((f"{name}@{c}", {"mode": "hybrid", "fusion": CALIBRATED, "candidates": c,
                                        "k": 10, **shape}))
        if plugin:
            out += [(f"hybrid-client+src@{c}", {"mode": "hybrid", "fusion": "client",
                                                 "candidates": c, "k": 10, "source": True}),
                    (f"plugin@{c}", {"plugin": {"size": 10, "candidates": c, "_source": False}}),
                    (f"plugin+src@{c}", {"plugin": {"size": 10, "candidates": c}})]
    if template:
        out.append((f"template@{DEFAULT_CANDIDATES}", {"template": template}))
    return out


def calibration_shapes() -> list[Any]:
    """Every shape the timed calibrated queries read scales for."""
    from lr_opensearch.options import CALIBRATED_SPARSE_TOKENS, CALIBRATED_TEXT_FIELDS
    from lr_opensearch.search.calibration import Shape

    out = [Shape(), Shape(CALIBRATED_SPARSE_TOKENS, CALIBRATED_TEXT_FIELDS)]
    out += [Shape(t or None, f) for _, t, f in CALIBRATED_SHAPES if t is not None]
    return list(dict.fromkeys(out))


def ensure_shapes_calibrated(client: Any, bundle: Any, name: str) -> None:
    """Calibrate ``name`` (again) unless its calibration has every timed shape's scales."""
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.search.calibration import CALIBRATION_KEY, calibrate, leg_key

    adapter = make_adapter(client)
    meta = adapter.meta_value(name, CALIBRATION_KEY) or {}
    names = [n for n, w in dict(bundle.config.weights).items() if w > 0]
    need = {leg_key(n, shape) for n in names for shape in calibration_shapes()}
    if need - set(meta.get("legs", {})):
        calibrate(adapter, name, bundle, shapes=calibration_shapes())


def deployed_template(client: Any, bundle: Any, name: str) -> str:
    """Deploy the bundle's query models on index ``name`` (``lr models deploy``), which
    stores its text-only calibrated search template; returns the template's id."""
    from lr_opensearch.cluster import deploy_bundle

    record = deploy_bundle(client, bundle, name)
    print(f"{name}: query models deployed ({record['actions']}), template "
          f"{record['template']}", flush=True)
    return str(record["template"])


def run_shape(retriever: Any, text: str, over: dict[str, Any], search: dict[str, Any]) -> Any:
    """One search of a shape: the stored template as a curl user sends it, or the
    retriever's search."""
    if "plugin" in over:  # POST /<index>/_lightretriever, as any client sends it
        return retriever.adapter.client.transport.perform_request(
            "POST", f"/{retriever.index}/_lightretriever", body={"text": text, **over["plugin"]})
    if "template" in over:
        from lr_opensearch.engine.text_queries import TEMPLATE_PARAM

        return retriever.adapter.client.transport.perform_request(
            "GET", f"/{retriever.index}/_search/template",
            body={"id": over["template"], "params": {TEMPLATE_PARAM: text}})
    return retriever.search(text, **{"source": False, **search, **over})


def one_client(retriever: Any, texts: list[str], shapes: list[tuple[str, dict[str, Any]]],
               search: dict[str, Any]) -> dict[str, dict[str, float]]:
    """p50 / p99 ms per shape, one search at a time, shapes interleaved per query; for the
    plugin's shapes also the median of each phase it reports (``phases_ms``: where its time
    goes inside the node, each leg's own took included)."""
    times: dict[str, list[float]] = {s: [] for s, _ in shapes}
    phases: dict[str, list[dict[str, Any]]] = {}
    for q, text in enumerate(texts):
        order = shapes if q % 2 == 0 else shapes[::-1]
        for shape, over in order:
            t0 = time.perf_counter()
            answer = run_shape(retriever, text, over, search)
            times[shape].append(1000 * (time.perf_counter() - t0))
            if "plugin" in over and "timings" in answer.get("lightretriever", {}):
                phases.setdefault(shape, []).append(answer["lightretriever"]["timings"])
    out: dict[str, dict[str, Any]] = {
        s: {"p50_ms": float(np.median(v)), "p99_ms": float(np.percentile(v, 99)),
            "qps_1": 1000.0 / float(np.mean(v))} for s, v in times.items()}
    for shape, rows in phases.items():
        out[shape]["phases_ms"] = phase_medians(rows)
    return out


def phase_medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each phase of the plugin's ``lightretriever.timings`` over searches
    (``leg_took_ms``: per leg)."""
    out: dict[str, Any] = {k: float(np.median([r[k] for r in rows]))
                           for k, v in rows[0].items() if not isinstance(v, dict)}
    out["leg_took_ms"] = {leg: float(np.median([r["leg_took_ms"][leg] for r in rows]))
                          for leg in rows[0]["leg_took_ms"]}
    return out


def many_clients(retriever: Any, texts: list[str], shapes: list[tuple[str, dict[str, Any]]],
                 search: dict[str, Any], clients: int, seconds: float) -> dict[str, Any]:
    from load import run_clients

    out = {}
    for shape, over in shapes:
        res = run_clients(lambda t, o=over: run_shape(retriever, t, o, search),
                          texts, clients, seconds)
        if res["errors"]:
            raise SystemExit(f"{shape}: {res['errors']} errors, first: {res['first_errors']}")
        out[shape] = {k: res[k] for k in ("qps", "p50_ms", "p99_ms", "searches")}
    return out


def summary(one: dict[str, dict[str, float]], leg_names: list[str], c: int,
            auto_path: str = "server") -> dict[str, Any]:
    """``bm25`` (BM25 alone at size 10, as users run it), ``hybrid`` (what the default
    ``fusion="auto"`` does at this size: ``auto_path``), ``hybrid_server``,
    ``hybrid_client`` and each leg alone at ``c`` candidates (a leg named like a mode above
    gets ``_leg``): p50 / p99 ms."""
    modes = {"bm25": one["bm25@10"], "hybrid": one[f"hybrid-{auto_path}@{c}"],
             "hybrid_server": one[f"hybrid-server@{c}"],
             "hybrid_client": one[f"hybrid-client@{c}"]}
    for mode, shape in (("calibrated", f"calibrated@{c}"), ("calibrated_full",
                                                             f"calibrated-full@{c}"),
                        ("template", f"template@{c}"), ("plugin", f"plugin@{c}"),
                        ("plugin_src", f"plugin+src@{c}"),
                        ("hybrid_client_src", f"hybrid-client+src@{c}")):
        if shape in one:  # (sizes timed before the calibrated fusion existed have none)
            modes[mode] = one[shape]
    for leg in leg_names:
        modes[f"{leg}_leg" if leg in modes else leg] = one[f"{leg}@{c}"]
    return {m: {"p50_ms": v["p50_ms"], "p99_ms": v["p99_ms"]} for m, v in modes.items()}


def main(argv: list[str] | None = None) -> int:
    from scale_corpus import Synthesizer, read_source

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.evaluation import load_beir
    from lr_opensearch.evaluation.runs import ensure_calibrated
    from lr_opensearch.options import DEFAULT_CANDIDATES
    from lr_opensearch.search import QueryEncoding, Retriever, connect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", default=os.environ.get("LR_OPENSEARCH_URL", "http://127.0.0.1:9200"))
    p.add_argument("--bundle", type=Path)
    p.add_argument("--source-index", action="append")
    p.add_argument("--markdown", action="store_true",
                   help="only print --out's tables for --tag as markdown (runs nothing)")
    p.add_argument("--source-url", default=None, help="the node holding the source indexes "
                   "(default: --url)")
    p.add_argument("--timing-queries", action="append", type=Path, default=None, metavar="DIR",
                   help="BEIR folder(s) whose queries file gives the timed query texts (no "
                   "judgment read; repeatable; default: --dataset's --split queries)")
    p.add_argument("--docs", default="10000,100000,1000000")
    p.add_argument("--candidates", default="10,30,100")
    p.add_argument("--dataset", type=Path, default=REPO.parent / "shared" / "data" / "scifact")
    p.add_argument("--split", default="train")
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--sparse-top-k", type=int, default=None,
                   help="stored terms per synthetic document (default: the bundle's)")
    p.add_argument("--knn-engine", default="lucene")
    p.add_argument("--knn-encoder", default=None, help="sq7: Lucene scalar quantization, 7 bits")
    p.add_argument("--ef-search", type=int, default=None)
    p.add_argument("--sparse-min-idf", type=float, default=0.0)
    p.add_argument("--setting", action="append", default=[], metavar="KEY=VALUE",
                   help="a dynamic index setting applied before timing (repeatable), e.g. "
                   "search.concurrent_segment_search.mode=all; reset to the default after")
    p.add_argument("--quality", action="store_true",
                   help="also index the source documents themselves with these settings and "
                   "report nDCG@10 on the dataset's --split judgments")
    p.add_argument("--tag", default="base", help="names the indexes and the entry in --out")
    p.add_argument("--index-of", default=None, metavar="TAG",
                   help="search the indexes built under another tag (search-time variants: "
                   "--ef-search, --sparse-min-idf, --setting)")
    p.add_argument("--rebuild", action="store_true", help="rebuild indexes that exist")
    p.add_argument("--template", action="store_true",
                   help="also time the text-only search template (in-cluster encoding): "
                   "deploys the bundle's query models on the index (needs ml-commons: "
                   "lr node start --with-ml)")
    p.add_argument("--plugin", action="store_true",
                   help="also time the LightRetriever plugin's POST /<index>/_lightretriever "
                   "(loads the bundle into it: lr plugin load; needs a node with the plugin: "
                   "lr node start --with-plugin)")
    p.add_argument("--build-only", action="store_true",
                   help="build (and calibrate) the indexes, record their build figures in "
                   "--out and time nothing: a later run times them (a 1M build takes an hour)")
    p.add_argument("--work", type=Path, default=REPO / "results" / "bench" / "scale-work")
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "scale.json")
    args = p.parse_args(argv)
    if args.markdown:
        print(markdown(json.loads(args.out.read_text(encoding="utf-8")), args.tag))
        return 0

    if not args.bundle or not args.source_index:
        p.error("--bundle and --source-index are required (except with --markdown)")
    bundle = load_bundle(args.bundle)
    client = connect(args.url, timeout=300)
    adapter = make_adapter(client)
    top_k = args.sparse_top_k or int(bundle.config.sparse_top_k)
    source_client = connect(args.source_url, timeout=300) if args.source_url else client
    source = read_source(source_client, args.source_index, args.work)
    synth = Synthesizer(source, top_k=top_k)
    if args.timing_queries:
        texts = interleave([query_texts(d) for d in args.timing_queries])[: args.queries]
    else:
        texts = list(load_beir(args.dataset, args.split).queries.values())[: args.queries]
    leg_names = [n for n, w in dict(bundle.config.weights).items() if w > 0]
    cs = [int(c) for c in args.candidates.split(",")]
    default_c = DEFAULT_CANDIDATES if DEFAULT_CANDIDATES in cs else max(cs)
    shapes = shapes_for(leg_names, cs)
    search = {"ef_search": args.ef_search} if args.ef_search else {}
    origin = ", ".join(d.name for d in args.timing_queries) if args.timing_queries else \
        f"{args.dataset.name} {args.split}"
    print(f"source: {source.size} documents from {args.source_index}; {len(texts)} timed "
          f"queries ({origin}); legs {leg_names}; candidates {cs}", flush=True)

    index_opts = {"knn_engine": args.knn_engine, "knn_encoder": args.knn_encoder}
    report = json.loads(args.out.read_text()) if args.out.exists() else {}
    entry = report.setdefault(args.tag, {"sizes": {}})
    entry.update({"knn_engine": args.knn_engine, "knn_encoder": args.knn_encoder, "sparse_top_k": top_k,
                  "ef_search": args.ef_search, "sparse_min_idf": args.sparse_min_idf,
                  "settings": args.setting,
                  "bundle": str(args.bundle), "source": args.source_index})
    for n in [int(x) for x in args.docs.split(",")]:
        name = index_name(args.index_of or args.tag, n)
        owner = report.get(args.index_of, entry) if args.index_of else entry
        built = owner["sizes"].get(str(n), {}).get("build")
        if args.rebuild or not adapter.index_exists(name) or adapter.count(name) != n:
            built = build(client, adapter, bundle, synthetic(synth, n), name, n, index_opts)
        ensure_calibrated(client, bundle, name)
        if args.build_only:
            entry["sizes"][str(n)] = {**entry["sizes"].get(str(n), {}), "docs": n,
                                      "build": built, **index_stats(client, name)}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
            print(f"{name}: built, {n} documents; timing left to a later run", flush=True)
            continue
        ensure_shapes_calibrated(client, bundle, name)
        if args.plugin:
            from lr_opensearch.plugin.load import load_plugin_model

            load_plugin_model(client, bundle, name)
        shapes = shapes_for(leg_names, cs, deployed_template(client, bundle, name)
                            if args.template else None, plugin=args.plugin)
        settings = dict(kv.split("=", 1) for kv in args.setting)
        if settings:
            adapter.put_index_settings(name, settings)
        stats = index_stats(client, name)
        print(f"{name}: {stats['index_bytes'] / 1e6:.0f} MB, {stats['segments']} segments, "
              f"build {built['build_s']:.0f} s" if built else "built earlier", flush=True)
        retriever = Retriever(bundle, client, name,
                              encoding=QueryEncoding(sparse_min_idf=args.sparse_min_idf))
        retriever.search_batch(texts[:32], 10)  # warm
        for _, over in shapes:  # and every shape once (the in-cluster models' first call)
            run_shape(retriever, texts[0], over, search)
        one = one_client(retriever, texts, shapes, search)
        many = many_clients(retriever, texts, shapes, search, args.clients, args.seconds)
        entry["sizes"][str(n)] = {"docs": n, "build": built, **stats, "queries": origin,
                                  "one_client": one, "auto_path": retriever._resolve_path(
                                      "auto", retriever.defaults),
                                  "clients": many, "n_clients": args.clients,
                                  "modes": summary(one, leg_names, default_c),
                                  "load_avg": os.getloadavg()}
        if settings:
            adapter.put_index_settings(name, dict.fromkeys(settings))
        print_size(n, one, many, shapes)
        for size in entry["sizes"].values():  # one definition of the summary for every size
            if f"hybrid-client@{default_c}" in size.get("one_client", {}):  # (timed at C)
                size["modes"] = summary(size["one_client"], leg_names, default_c,
                                        size.get("auto_path", "server"))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    if args.build_only:
        return 0
    if args.quality:
        entry["quality"] = quality(client, adapter, bundle, source, top_k, args, index_opts,
                                   leg_names, search)
        args.out.write_text(json.dumps(report, indent=1), encoding="utf-8")
    png = args.out.with_suffix(".png")
    plot(report, png, default_c)
    print(f"wrote {args.out} and {png}")
    return 0


def quality(client: Any, adapter: Any, bundle: Any, source: Any, top_k: int, args: Any,
            index_opts: dict[str, Any], leg_names: list[str],
            search: dict[str, Any]) -> dict[str, Any]:
    """nDCG@10 / R@100 of the hybrid (both fusions) and of each leg on the source documents
    indexed with these settings (``lr-scale-<tag>-real``), ``--split`` judgments."""
    from hybrid_cost import ndcg_at_10
    from scale_corpus import real_docs

    from lr_opensearch.evaluation import load_beir
    from lr_opensearch.search import QueryEncoding, Retriever

    name = index_name(args.index_of or args.tag, 0).removesuffix("-0") + "-real"
    if args.rebuild or not adapter.index_exists(name) or adapter.count(name) != source.size:
        build(client, adapter, bundle, real_docs(source, top_k), name, source.size, index_opts)
    dataset = load_beir(args.dataset, args.split)
    qids = list(dataset.queries)
    texts = [dataset.queries[q] for q in qids]
    retriever = Retriever(bundle, client, name,
                          encoding=QueryEncoding(sparse_min_idf=args.sparse_min_idf))
    out = {}
    for mode, over in [(f"hybrid-{f}", {"fusion": f}) for f in ("server", "client")] + \
            [(leg, {"mode": leg}) for leg in leg_names]:
        m = ndcg_at_10(retriever, dataset, qids, texts, 32, 100, **search, **over)
        out[mode] = {"ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"]}
        print(f"quality {args.split} {mode:<14} nDCG@10 {m['ndcg@10']:.4f}  "
              f"R@100 {m['recall@100']:.4f}", flush=True)
    return out


def print_size(n: int, one: dict[str, Any], many: dict[str, Any], shapes: list[Any]) -> None:
    bm = one["bm25@10"]["p50_ms"]
    bm_many = many["bm25@10"]["p50_ms"]
    print(f"\n{n} documents: shape, one client p50 / p99 ms (x BM25@10 p50), "
          f"then {len(many) and 'several'} clients QPS, p50 / p99 ms (x BM25@10 p50)")
    for shape, _ in shapes:
        o, m = one[shape], many[shape]
        print(f"  {shape:<20} {o['p50_ms']:8.1f} / {o['p99_ms']:8.1f} (x{o['p50_ms'] / bm:5.2f})"
              f"   {m['qps']:7.1f} QPS {m['p50_ms']:8.1f} / {m['p99_ms']:8.1f} "
              f"(x{m['p50_ms'] / bm_many:5.2f})", flush=True)


def markdown(report: dict[str, Any], tag: str = "base") -> str:
    """The tables of docs/RESULTS.md from a report: per size, one client p50 / p99 ms and
    x BM25@10, then several clients' QPS and p50 ms."""
    out = []
    for n, size in sorted(report[tag]["sizes"].items(), key=lambda kv: int(kv[0])):
        one, many = size["one_client"], size["clients"]
        bm, bm_many = one["bm25@10"]["p50_ms"], many["bm25@10"]["p50_ms"]
        build = size.get("build") or {}
        out.append(f"\n**{int(n):,} documents** ({size['index_bytes'] / 1e6:,.0f} MB, "
                   f"{size['segments']} segments, built in {build.get('build_s', 0):,.0f} s; "
                   f"`fusion=\"auto\"` fuses on the {size.get('auto_path', 'server')}):\n")
        out.append(f"| shape | one client: p50 / p99 ms | x BM25 p50 | {size['n_clients']} "
                   "clients: QPS | p50 ms | x BM25 p50 |")
        out.append("|---|---:|---:|---:|---:|---:|")
        for shape, o in one.items():
            m = many[shape]
            out.append(f"| {shape} | {o['p50_ms']:.1f} / {o['p99_ms']:.1f} | "
                       f"{o['p50_ms'] / bm:.2f} | {m['qps']:.1f} | {m['p50_ms']:.1f} | "
                       f"{m['p50_ms'] / bm_many:.2f} |")
        out += [phase_line(shape, o["phases_ms"]) for shape, o in one.items()
                if "phases_ms" in o]
    return "\n".join(out)


def phase_line(shape: str, phases: dict[str, Any]) -> str:
    """One plugin shape's median phases, as a sentence under the table."""
    legs = ", ".join(f"{leg} {ms:.0f}" for leg, ms in phases["leg_took_ms"].items())
    steps = ", ".join(f"{k.removesuffix('_ms')} {v:.2f}" for k, v in phases.items()
                      if k != "leg_took_ms")
    return f"\n`{shape}` inside the node, medians in ms: {steps} (each leg's own took: {legs})."


def plot(report: dict[str, Any], path: Path, c: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for tag, entry in report.items():
        sizes = sorted((s for s in entry["sizes"].values() if "modes" in s),  # (timed ones)
                       key=lambda s: s["docs"])
        if not sizes:
            continue
        docs = [s["docs"] for s in sizes]
        for mode in [m for m in sizes[0]["modes"] if m != "hybrid"]:  # = one of the two
            style = "k:" if mode == "bm25" else ("o-" if mode.startswith("hybrid") else "s--")
            label = "BM25 alone, size 10" if mode == "bm25" else f"{mode} (C={c})"
            ax.plot(docs, [s["modes"][mode]["p50_ms"] for s in sizes], style,
                    label=label if len(report) == 1 else f"{tag}: {label}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("documents in the index")
    ax.set_ylabel("p50 ms per search, one client")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("Search latency against corpus size (one node, 2 cores)")
    from hybrid_cost import save_figure

    save_figure(fig, path)


if __name__ == "__main__":
    sys.exit(main())
