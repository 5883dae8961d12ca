"""Which packaged encoder (bge-small-en-v1.5, e5-small-v2 or all-MiniLM-L6-v2): per
collection, BM25, full dense, LR dense, LR sparse, LR hybrid and the full-encoder hybrid,
nDCG@10 and R@100 on the test queries, by exact (brute-force) search over the library's own
vectors; and the dense / sparse / BM25 weight grid on SciFact *train* queries.

Three steps, each a subcommand, so that the model work can run on a GPU machine that has no
search engine and the engine work on one that has no GPU:

``bm25``   the engine's BM25 top-100 per query (the project's ``bm25`` leg through the
           ``Retriever``, ``mode="bm25"``) over an index of each collection's documents made
           with the project's index body (title and text only: the BM25 leg reads nothing
           else) on a running OpenSearch node; written to one small JSON file.
``legs``   per model and collection, the bundle ``lr bundle build --model packaged:<m>
           --fit-corpus <corpus>`` builds with its defaults (``fit.fitted.fitted_bundle``,
           the library function of that command and of zero-config ingest, into
           ``$LR_BUNDLE_STORE``; builds run in parallel processes, the first of each model
           alone since it computes the unfitted table); then, one model at a time, the
           documents through the bundle's ``DocEncoder`` as ingest encodes them (its text,
           character cut, batch size and device; timed: documents/s), the queries through the
           bundle's ``QueryEncoder`` (LR dense, LR sparse) and ``full_query_encoder`` (the
           ``full_dense`` leg), and the exact top-100 of each leg: dense legs by inner product
           (the engine's score transform applied when fusing), the sparse leg by the dot
           product with the document weights rounded as Lucene stores a ``rank_features``
           value (9 significant bits). Written as ``legs.npz`` + ``legs.json``.
``score``  the runs from those lists: one-leg runs as they are; ``lr-hybrid`` fuses the
           bundle's legs with its weights and semantics through the library's ``fuse``
           (each leg's top-100 = ``lr eval``'s candidates); ``full-hybrid`` the same with
           ``legs.reference_weights`` (the full model's query vector in the dense leg, as
           ``lr eval``'s ``full-hybrid``); nDCG@10 / R@100 by ``evaluation.beir.compute_metrics``;
           the weight grid (steps of 0.1) on SciFact train. Prints markdown tables.

What differs from ``lr eval`` on a node: the knn and the sparse leg are exact here (the
engine's HNSW is approximate; on these collections it is close to exact), and sparse scores
are summed in float64 before rounding to float32. docs/RESULTS.md compares both on ADI.

    python3 bench/model_choice.py bm25 --url http://127.0.0.1:9200 --out bm25.json.gz
    python3 bench/model_choice.py legs --out legs/          # GPU if there is one
    python3 bench/model_choice.py score --legs legs/ --bm25 bm25.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.evaluation.config import HYBRID_RUN, REFERENCE_RUN
from lr_opensearch.legs.builtin import BM25, DENSE, FULL, SPARSE

DATA = Path(os.environ.get("LR_DATA_DIR", "/work/shared/data"))
COLLECTIONS = ("adi", "cisi", "cranfield", "scifact")
SPLITS = {"scifact": ("test", "train")}  # the other collections: test only
MODELS = {"minilm": "packaged:minilm", "bge-small": "packaged:bge-small",
          "e5-small": "packaged:e5-small"}
DEPTH = 100  # lr eval's depth: each leg's candidates and the runs' length
SWEEP_COLLECTION, SWEEP_SPLIT = "scifact", "train"  # the only split choices are made on

logger = logging.getLogger("model_choice")


def splits(collection: str) -> tuple[str, ...]:
    return SPLITS.get(collection, ("test",))


def corpus_path(collection: str) -> Path:
    from lr_opensearch.evaluation.beir import load_beir

    return load_beir(DATA / collection, "test").corpus_path


def records(collection: str) -> list[Any]:
    """The corpus records ingest keeps (the reader's valid records), in file order."""
    from lr_opensearch.indexing.reader import CorpusReader, Record

    return [r for r in CorpusReader(str(corpus_path(collection))) if isinstance(r, Record)]


# ----------------------------------------------------------------------------- bm25


def run_bm25(args: argparse.Namespace) -> int:
    """The engine's BM25 top-``DEPTH`` of every query of every split (see the module doc)."""
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.engine.client import make_client
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.evaluation.beir import load_beir
    from lr_opensearch.search import Retriever

    client = make_client(args.url)
    adapter = make_adapter(client)
    bundle = load_bundle(args.bundle)  # any bundle: the BM25 leg reads title and text only
    out: dict[str, Any] = {}
    for collection in args.collections:
        index = f"model-choice-bm25-{collection}"
        if adapter.index_exists(index):
            adapter.delete_index(index)
        adapter.create_index(index, bundle)
        docs = records(collection)
        actions = [{"_op_type": "index", "_index": index, "_id": r.id,
                    "_source": {"title": r.title, "text": r.text}} for r in docs]
        failed = [info for ok, info in adapter.bulk(actions, max_chunk_bytes=5 << 20) if not ok]
        if failed:
            raise SystemExit(f"{collection}: {len(failed)} documents refused, first {failed[0]}")
        adapter.refresh(index)
        assert adapter.count(index) == len(docs), (collection, adapter.count(index), len(docs))
        retriever = Retriever(bundle, client, index, candidates=DEPTH)
        out[collection] = {"documents": len(docs)}
        for split in splits(collection):
            dataset = load_beir(DATA / collection, split)
            qids = list(dataset.queries)
            lists: dict[str, list[list[Any]]] = {}
            for start in range(0, len(qids), 32):
                chunk = qids[start:start + 32]
                hits = retriever.search_batch([dataset.queries[q] for q in chunk], DEPTH, mode="bm25")
                for qid, found in zip(chunk, hits, strict=True):
                    lists[qid] = [[h.doc_id, float(h.score)] for h in found]
            out[collection][split] = lists
            print(f"{collection} {split}: {len(qids)} queries, {len(docs)} documents")
        adapter.delete_index(index)
    with gzip.open(args.out, "wt", encoding="utf-8") as f:
        json.dump(out, f)
    print(f"wrote {args.out}")
    return 0


# ----------------------------------------------------------------------------- legs


def lucene_feature(values: np.ndarray) -> np.ndarray:
    """A ``rank_features`` value as Lucene's FeatureField stores it: the float's bits
    shifted right by 15 and back (9 significant bits, truncated)."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    return ((bits >> np.uint32(15)) << np.uint32(15)).view(np.float32)


def top_k(scores: np.ndarray, k: int, positive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per row the ``k`` best columns (stable: ties by column) and their scores; with
    ``positive`` only scores > 0 (a sparse leg matches no other document), -1 padding."""
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    best = np.take_along_axis(scores, order, axis=1).astype(np.float32)
    idx = order.astype(np.int32)
    if positive:
        idx[best <= 0] = -1
        best[best <= 0] = 0.0
    return idx, best


def build_one(model: str, corpus: str) -> dict[str, Any]:
    """One fitted bundle (in a worker process): ``fitted_bundle`` and its wall time."""
    import torch

    from lr_opensearch.fit.fitted import fitted_bundle

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.INFO, force=True,
                        format=f"%(asctime)s {model} {Path(corpus).parent.name} %(name)s: %(message)s")
    start = time.perf_counter()
    path = fitted_bundle(corpus, model=model, progress=False)
    return {"path": str(path), "build_s": time.perf_counter() - start}


def build_all(models: Sequence[str], collections: Sequence[str], workers: int) -> dict[str, dict[str, Any]]:
    """Every (model, collection) bundle; the first collection of each model first (it
    computes and caches the model's unfitted table), the rest of that model after it."""
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    built: dict[str, dict[str, Any]] = {m: {} for m in models}
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        pending = {pool.submit(build_one, MODELS[m], str(corpus_path(collections[0]))): (m, collections[0], True)
                   for m in models}
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                m, c, first = pending.pop(future)
                try:
                    built[m][c] = future.result()
                except Exception as exc:  # noqa: BLE001 - reported, the other builds go on
                    print(f"FAILED to build {m} {c}: {type(exc).__name__}: {exc}", flush=True)
                    continue
                built[m][c]["first_of_model"] = first
                print(f"built {m} {c}: {built[m][c]['build_s']:.1f} s", flush=True)
                if first:
                    for other in collections[1:]:
                        pending[pool.submit(build_one, MODELS[m], str(corpus_path(other)))] = (m, other, False)
    return built


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def bundle_facts(path: Path, build_s: float) -> dict[str, Any]:
    from lr_opensearch.bundle import load_bundle

    bundle = load_bundle(path)
    fit = bundle.fit or {}
    table = (fit.get("tables") or {}).get(bundle.config.default_instruction, {})
    return {
        "path": str(path), "bundle_id": bundle.bundle_id, "build_s": round(build_s, 1),
        "weights": dict(bundle.config.weights), "semantics": bundle.config.fusion_semantics,
        "size_mb": round(dir_mb(path), 1), "doc_encoder_mb": round(dir_mb(path / "doc_encoder"), 1),
        "tables_mb": round(dir_mb(path / "query_tables"), 1),
        "fit_s": round(float(fit.get("seconds", 0.0)), 1),
        "fit_queries": sum((fit.get("queries") or {}).values()),
        "targets_s": round(float(table.get("encode_seconds", 0.0)), 1),
        "solve_s": round(float(table.get("solve_seconds", 0.0)), 1),
        "lam": table.get("lam"), "holdout_cosine": table.get("holdout_cosine"),
        "holdout_cosine_unfitted": table.get("holdout_cosine_e0"),
        "instruction": bundle.instructions[bundle.config.default_instruction],
        "document_prompt": bundle.config.document_prompt, "max_length": bundle.config.max_length,
    }


def encode_and_search(bundle_path: Path, collection: str, device: Any) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """One bundle on one collection: documents encoded as ingest does (timed), the exact
    top-``DEPTH`` of the dense, sparse and full_dense legs for every split's queries."""
    import scipy.sparse as sp
    import torch

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.evaluation.beir import load_beir
    from lr_opensearch.indexing.config import IngestConfig
    from lr_opensearch.indexing.documents import SparseKeys, sparse_features
    from lr_opensearch.indexing.pipeline import CHARS_PER_TOKEN_CAP
    from lr_opensearch.instructions import dataset_instruction
    from lr_opensearch.model import DocEncoder
    from lr_opensearch.model.full_model import full_query_encoder
    from lr_opensearch.query import QueryEncoder

    bundle = load_bundle(bundle_path)
    batch_size = IngestConfig.__dataclass_fields__["batch_size"].default
    encoder = DocEncoder.from_bundle(bundle, device=device, batch_size=batch_size)
    docs = records(collection)
    max_chars = max(4096, bundle.config.max_length * CHARS_PER_TOKEN_CAP)  # the pipeline's cut
    texts = [r.encoder_text()[:max_chars] for r in docs]
    encoder.encode(texts[:batch_size])  # warm-up (kernels, allocator)

    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    sync()
    start = time.perf_counter()
    batch = encoder.encode(texts)
    sync()
    encode_s = time.perf_counter() - start
    keys = SparseKeys(bundle.tokenizer)
    features = [sparse_features(s, keys) for s in batch.sparse]
    columns: dict[str, int] = {}
    rows, cols, vals = [], [], []
    for i, feats in enumerate(features):
        for key, w in feats.items():
            rows.append(i)
            cols.append(columns.setdefault(key, len(columns)))
            vals.append(w)
    doc_sparse = sp.csr_matrix((lucene_feature(np.asarray(vals, np.float32)).astype(np.float64),
                                (rows, cols)), shape=(len(docs), len(columns)))
    query_encoder = QueryEncoder(bundle)
    out: dict[str, np.ndarray] = {}
    facts: dict[str, Any] = {"documents": len(docs), "encode_s": round(encode_s, 3),
                             "docs_per_s": round(len(docs) / encode_s, 1),
                             "device": str(encoder.device), "batch_size": batch_size,
                             "truncated": int(sum(batch.truncated)), "splits": {}}
    for split in splits(collection):
        dataset = load_beir(DATA / collection, split)
        qids = list(dataset.queries)
        queries = [dataset.queries[q] for q in qids]
        table, _ = dataset_instruction(bundle.instructions, dataset.name)
        encoded = query_encoder.encode_batch(queries, instruction=table)
        full = np.asarray(full_query_encoder(bundle, table, encoder=encoder)(queries), np.float32)
        q_sparse = sp.csr_matrix((len(qids), len(columns)), dtype=np.float64).tolil()
        for i in range(len(qids)):
            for key, w in encoded.sparse[i].items():
                j = columns.get(key)
                if j is not None:
                    q_sparse[i, j] = float(np.float32(w))
        leg_scores = {
            DENSE.name: encoded.dense @ batch.dense.T,
            SPARSE.name: np.asarray((q_sparse.tocsr() @ doc_sparse.T).todense(), np.float64),
            FULL.name: full @ batch.dense.T,
        }
        for leg, scores in leg_scores.items():
            idx, best = top_k(np.asarray(scores), DEPTH, positive=(leg == SPARSE.name))
            out[f"{collection}/{split}/{leg}/idx"] = idx
            out[f"{collection}/{split}/{leg}/score"] = best
        facts["splits"][split] = qids
    facts["doc_ids"] = [r.id for r in docs]
    return out, facts


def run_legs(args: argparse.Namespace) -> int:
    """Build every bundle, then encode and search (see the module doc)."""
    from lr_opensearch.model.doc_encoder import default_device

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    start = time.perf_counter()
    built = build_all(args.models, args.collections, args.workers)
    build_wall = time.perf_counter() - start
    print(f"all bundles built in {build_wall:.1f} s", flush=True)
    device = args.device or default_device()
    report: dict[str, Any] = {"build_wall_s": round(build_wall, 1), "models": {}}
    arrays: dict[str, np.ndarray] = {}
    for model in args.models:
        report["models"][model] = {}
        for collection in args.collections:
            b = built[model].get(collection)
            if b is None:
                continue
            facts = bundle_facts(Path(b["path"]), b["build_s"])
            facts["first_of_model"] = b["first_of_model"]
            try:
                leg_arrays, search_facts = encode_and_search(Path(b["path"]), collection, device)
            except Exception:  # noqa: BLE001 - reported, the others go on
                import traceback

                print(f"FAILED {model} {collection}:\n{traceback.format_exc()}", flush=True)
                continue
            arrays.update({f"{model}/{key}": value for key, value in leg_arrays.items()})
            facts.update(search_facts)
            report["models"][model][collection] = facts
            print(f"{model} {collection}: bundle {facts['size_mb']} MB, build {facts['build_s']} s "
                  f"(fit {facts['fit_s']} s: targets {facts['targets_s']}, solve {facts['solve_s']}), "
                  f"{facts['documents']} docs at {facts['docs_per_s']} docs/s on {facts['device']}",
                  flush=True)
        report["total_s"] = round(time.perf_counter() - start, 1)
        report["torch_device_name"] = _device_name()
        np.savez_compressed(out / "legs.npz", **arrays)  # after each model: a cut run keeps them
        (out / "legs.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out} in {report['total_s']} s")
    return 0


def _device_name() -> str:
    import torch

    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"


# ----------------------------------------------------------------------------- score

RUNS = (BM25.run, FULL.run, DENSE.run, SPARSE.run, HYBRID_RUN, REFERENCE_RUN)


def leg_lists(arrays: Any, facts: Mapping[str, Any], bm25: Mapping[str, Any], collection: str,
              split: str) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """{leg: {qid: [(doc id, engine score), ...]}} of one collection split."""
    from lr_opensearch.legs.scores import score_from_inner_product

    doc_ids = facts["doc_ids"]
    qids = facts["splits"][split]
    out: dict[str, dict[str, list[tuple[str, float]]]] = {}
    for leg in (DENSE.name, SPARSE.name, FULL.name):
        idx = arrays[f"{collection}/{split}/{leg}/idx"]
        score = arrays[f"{collection}/{split}/{leg}/score"]
        transform = (lambda s: s) if leg == SPARSE.name else score_from_inner_product
        out[leg] = {q: [(doc_ids[j], transform(float(s))) for j, s in zip(idx[i], score[i], strict=True) if j >= 0]
                    for i, q in enumerate(qids)}
    out[BM25.name] = {q: [(d, float(s)) for d, s in bm25[collection][split].get(q, [])] for q in qids}
    return out


def fused_run(lists: Mapping[str, Mapping[str, list[tuple[str, float]]]], weights: Mapping[str, float],
              semantics: str) -> dict[str, list[tuple[str, float]]]:
    from lr_opensearch.search.fusion import fuse

    used = {leg: w for leg, w in weights.items() if w > 0}
    qids = next(iter(lists.values())).keys()
    return {q: [(h.doc_id, h.score) for h in fuse({leg: lists[leg][q] for leg in used}, weights=used,
                                                   semantics=semantics, k=DEPTH)]
            for q in qids}


def runs_of(lists: Mapping[str, Any], weights: Mapping[str, float], semantics: str) -> dict[str, Any]:
    from lr_opensearch import legs

    runs = {leg.run: lists[leg.name] for leg in (BM25, FULL, DENSE, SPARSE)}
    runs[HYBRID_RUN] = fused_run(lists, weights, semantics)
    runs[REFERENCE_RUN] = fused_run(lists, legs.reference_weights(weights), semantics)
    return runs


def grid(step: float = 0.1) -> list[dict[str, float]]:
    """dense / sparse / BM25 weights in steps of ``step`` summing to 1 (at least one > 0)."""
    n = round(1 / step)
    return [{DENSE.name: round(i * step, 1), SPARSE.name: round(j * step, 1),
             BM25.name: round((n - i - j) * step, 1)}
            for i in range(n + 1) for j in range(n + 1 - i)]


def read_legs(legs_dir: Path, bm25_file: Path) -> tuple[dict[str, Any], Any, dict[str, Any]]:
    """(``legs.json``, the ``legs.npz`` arrays, the BM25 lists) of a ``legs`` and a ``bm25`` run."""
    report = json.loads((legs_dir / "legs.json").read_text())
    with gzip.open(bm25_file, "rt", encoding="utf-8") as f:
        bm25 = json.load(f)
    return report, np.load(legs_dir / "legs.npz"), bm25


def model_arrays(stored: Any, model: str) -> dict[str, np.ndarray]:
    """One model's arrays of ``legs.npz``, keyed without the model's prefix."""
    return {key.removeprefix(f"{model}/"): stored[key] for key in stored.files if key.startswith(f"{model}/")}


def run_score(args: argparse.Namespace) -> int:
    from lr_opensearch.evaluation.beir import compute_metrics, load_beir

    report, stored, bm25 = read_legs(Path(args.legs), Path(args.bm25))
    results: dict[str, Any] = {"models": {}, "sweep": {}}
    for model, per_collection in report["models"].items():
        arrays = model_arrays(stored, model)
        results["models"][model] = {}
        for collection, facts in per_collection.items():
            weights, semantics = facts["weights"], facts["semantics"]
            dataset = load_beir(DATA / collection, "test")
            lists = leg_lists(arrays, facts, bm25, collection, "test")
            runs = runs_of(lists, weights, semantics)
            results["models"][model][collection] = {
                name: compute_metrics(dataset.qrels, run) for name, run in runs.items()}
            if collection == SWEEP_COLLECTION and SWEEP_SPLIT in facts["splits"] and not args.no_sweep:
                train = load_beir(DATA / collection, SWEEP_SPLIT)
                _SWEEP.update(lists=leg_lists(arrays, facts, bm25, collection, SWEEP_SPLIT),
                              qrels=train.qrels, semantics=semantics)
                with multiprocessing.get_context("fork").Pool(args.workers) as pool:
                    results["sweep"][model] = list(zip(grid(), pool.map(_sweep_point, grid()), strict=True))
    results["own_best"] = own_best_on_test(report, results, stored, bm25)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print_tables(report, results)
    return 0


def own_best_on_test(report: Mapping[str, Any], results: Mapping[str, Any], stored: Any,
                     bm25: Mapping[str, Any]) -> dict[str, Any]:
    """Per model, the LR and full-encoder hybrids on the test queries with the weights that
    were best for that model on SciFact train (chosen there, only reported here)."""
    from lr_opensearch import legs
    from lr_opensearch.evaluation.beir import compute_metrics, load_beir

    out: dict[str, Any] = {}
    for model, rows in results.get("sweep", {}).items():
        best = max(rows, key=lambda t: t[1])[0]
        arrays = model_arrays(stored, model)
        per: dict[str, Any] = {}
        for collection, facts in report["models"][model].items():
            qrels = load_beir(DATA / collection, "test").qrels
            lists = leg_lists(arrays, facts, bm25, collection, "test")
            per[collection] = {
                HYBRID_RUN: compute_metrics(qrels, fused_run(lists, best, facts["semantics"]))["ndcg@10"],
                REFERENCE_RUN: compute_metrics(qrels, fused_run(lists, legs.reference_weights(best),
                                                                facts["semantics"]))["ndcg@10"]}
        out[model] = {"weights": best, "test": per}
    return out


_SWEEP: dict[str, Any] = {}  # one sweep's lists, qrels and semantics (inherited by the forked workers)


def _sweep_point(weights: dict[str, float]) -> float:
    from lr_opensearch.evaluation.beir import compute_metrics

    run = fused_run(_SWEEP["lists"], weights, _SWEEP["semantics"])
    return compute_metrics(_SWEEP["qrels"], run)["ndcg@10"]


def print_tables(report: Mapping[str, Any], results: Mapping[str, Any]) -> None:
    models = list(results["models"])
    collections = list(next(iter(results["models"].values())))
    print(f"\nexact top-{DEPTH} per leg; nDCG@10 / R@100 on the test queries "
          f"(legs computed on {report.get('torch_device_name')})\n")
    print("| collection | model | " + " | ".join(RUNS) + " | LR / full hybrid |")
    print("|---|---|" + "---:|" * (len(RUNS) + 1))
    for c in collections:
        for m in models:
            r = results["models"][m][c]
            cells = [f"{r[run]['ndcg@10']:.3f} / {r[run]['recall@100']:.3f}" for run in RUNS]
            share = r["lr-hybrid"]["ndcg@10"] / max(r["full-hybrid"]["ndcg@10"], 1e-9)
            print(f"| {c} | {m} | " + " | ".join(cells) + f" | {100 * share:.1f} % |")
    print("\naverage nDCG@10 over the collections\n")
    print("| model | " + " | ".join(RUNS) + " |")
    print("|---|" + "---:|" * len(RUNS))
    for m in models:
        avg = [np.mean([results["models"][m][c][run]["ndcg@10"] for c in collections]) for run in RUNS]
        print(f"| {m} | " + " | ".join(f"{a:.4f}" for a in avg) + " |")
    print("\ncost\n")
    print("| model | collection | bundle MB | build s (first: + table) | fit s | targets s | solve s "
          "| pseudo-queries | held-back cosine | docs | docs/s (encoder, device) |")
    print("|---|---|" + "---:|" * 9)
    for m, per in report["models"].items():
        for c, f in per.items():
            print(f"| {m} | {c} | {f['size_mb']} | {f['build_s']}{' (first)' if f['first_of_model'] else ''} "
                  f"| {f['fit_s']} | {f['targets_s']} | {f['solve_s']} | {f['fit_queries']} "
                  f"| {f['holdout_cosine']:.4f} | {f['documents']} | {f['docs_per_s']} ({f['device']}) |")
    for m, rows in results.get("sweep", {}).items():
        ranked = sorted(rows, key=lambda t: -t[1])
        used = {leg: w for leg, w in report["models"][m][SWEEP_COLLECTION]["weights"].items() if w > 0}
        default = next(v for w, v in rows if {leg: x for leg, x in w.items() if x > 0} == used)
        order = (DENSE.name, SPARSE.name, BM25.name)
        print(f"\n{m}: SciFact train nDCG@10, best weights ({'/'.join(order)}): " + ", ".join(
            "/".join(str(w[leg]) for leg in order) + f" {v:.4f}" for w, v in ranked[:5])
            + f"; the bundle's default weights {default:.4f}")
    for m, own in results.get("own_best", {}).items():
        per = own["test"]
        print(f"{m} with its SciFact-train best weights {own['weights']}, test nDCG@10 "
              + ", ".join(f"{c} {v[HYBRID_RUN]:.3f} / {v[REFERENCE_RUN]:.3f}" for c, v in per.items())
              + f"; average {HYBRID_RUN} {np.mean([v[HYBRID_RUN] for v in per.values()]):.4f}, "
              f"{REFERENCE_RUN} {np.mean([v[REFERENCE_RUN] for v in per.values()]):.4f}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bm25", help="the engine's BM25 lists (needs a running node)")
    b.add_argument("--url", required=True)
    b.add_argument("--bundle", required=True, help="any bundle (the index body; BM25 reads text only)")
    b.add_argument("--out", required=True)
    b.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    b.set_defaults(func=run_bm25)
    g = sub.add_parser("legs", help="bundles, document encoding, exact per-leg lists (GPU if there is one)")
    g.add_argument("--out", required=True)
    g.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    g.add_argument("--collections", nargs="+", default=list(COLLECTIONS))
    g.add_argument("--workers", type=int, default=12, help="bundle builds in parallel")
    g.add_argument("--device", default=None, help="document and query encoding device (default: GPU if any)")
    g.set_defaults(func=run_legs)
    s = sub.add_parser("score", help="fusion, metrics, the SciFact-train grid")
    s.add_argument("--legs", required=True)
    s.add_argument("--bm25", required=True)
    s.add_argument("--json", default=None, help="also write the figures here")
    s.add_argument("--no-sweep", action="store_true")
    s.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes of the weight grid")
    s.set_defaults(func=run_score)
    args = p.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
