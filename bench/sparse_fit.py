"""The sparse document side's per-term scale and bias (issue 48, 1a): variants chosen on
SciFact *train*, reported on every collection, by an exact replica of the LR sparse leg.

    python3 bench/sparse_fit.py --work W [--collection scifact ...] \\
        [--variant none --variant e3:f1 --variant e3:f0.3:lr0.1 ...] [--out result.json]

Per collection (``../shared/data/<c>``): the library's own fit inputs
(``fit.tables.prepare_fit``: the document sample, pseudo-queries, their sources and the
corpus's IDF weights; on these collections the sample is the whole corpus, in file order),
the packaged MiniLM's pre-activation maxima of every document (``DocEncoder.encode_maxima``,
cached as ``W/<c>/maxima.npy``: the one encoder pass), then per variant the library's fit
(``fit.sparse_head.fit_term_affine``) and the leg as the product serves it: a document's
weights ``log1p(relu(a z + c))``, special tokens dropped, its top ``--top-k`` (the bundle's
``sparse_top_k``, 128) positive weights, rounded as Lucene stores a ``rank_features``
value; a query's distinct tokens weighted by IDF (``QueryEncoder`` with the fitted bundle's
weights); exact dot products, top 100; nDCG@10 / R@100 by the evaluation's
``compute_metrics``. Variant ``none`` is the head as it is today.

Variant syntax: ``e<epochs>:f<flops>:lr<step>:a<anchor>`` (any subset; the rest from
``SparseFitConfig``). Never choose on a test split: the train split of SciFact chooses.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_choice import lucene_feature, top_k  # noqa: E402

from lr_opensearch.evaluation.beir import compute_metrics, iter_jsonl, load_beir  # noqa: E402
from lr_opensearch.fit.sparse import QuerySet, SparseFitConfig  # noqa: E402
from lr_opensearch.fit.tables import prepare_fit, query_tokenizer  # noqa: E402

logger = logging.getLogger("sparse_fit")
DATA = Path(os.environ.get("LR_DATA_DIR", "../shared/data"))
SPLITS = {"scifact": ("train", "test")}


def parse_variant(text: str) -> SparseFitConfig | None:
    if text == "none":
        return None
    fields = {"e": ("epochs", int), "f": ("flops", float), "lr": ("lr", float), "a": ("anchor", float),
              "b": ("batch", int)}
    values: dict[str, Any] = {}
    for part in text.split(":"):
        key = "lr" if part.startswith("lr") else part[0]
        name, kind = fields[key]
        values[name] = kind(part[len(key):])
    return SparseFitConfig(**values)


def load_encoder() -> Any:
    from tokenizers import Tokenizer

    from lr_opensearch.fit.build import default_max_length
    from lr_opensearch.model import DocEncoder, LightRetrieverModel
    from lr_opensearch.model.settings import DocSettings, RetrieverSettings
    from lr_opensearch.packaged import resolve_model

    source, name = resolve_model("packaged:minilm")
    model = LightRetrieverModel.from_pretrained(source, RetrieverSettings(pooling=None, normalize=None),
                                                name=name)
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    return DocEncoder(model, tokenizer, DocSettings(max_length=default_max_length(model, source)),
                      device="cpu", batch_size=32)


def collection_inputs(name: str, encoder: Any, work: Path) -> dict[str, Any]:
    from lr_opensearch.instructions import document_text

    corpus = next((DATA / name).glob("corpus.jsonl*"))
    records = [(str(r["_id"]), r.get("title") or "", r.get("text") or "") for _, r in iter_jsonl(corpus)]
    inputs = prepare_fit(encoder.tokenizer, [corpus])
    if [d for d in inputs.docs] != [(t, x) for _, t, x in records]:
        raise SystemExit(f"{name}: the fit's document sample is not the corpus in order; this bench "
                         "assumes a corpus under the sample cap")
    cache = work / name / "maxima.npy"
    if cache.is_file():
        maxima = np.load(cache)
        encode_s = json.loads((work / name / "encode.json").read_text())["seconds"]
    else:
        t0 = time.perf_counter()
        texts = [document_text(t, x) for _, t, x in records]
        maxima = np.concatenate([encoder.encode_maxima(texts[s : s + 256]) for s in range(0, len(texts), 256)])
        encode_s = time.perf_counter() - t0
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.save(cache, maxima)
        (work / name / "encode.json").write_text(json.dumps({"seconds": encode_s}))
    logger.info("%s: %d documents, maxima %s (%.0f s), %d pseudo-queries", name, len(records),
                maxima.shape, encode_s, len(inputs.texts))
    return {"ids": [r[0] for r in records], "inputs": inputs, "maxima": maxima, "encode_s": encode_s}


def doc_matrix(maxima: np.ndarray, scale: np.ndarray, bias: np.ndarray, excluded: list[int],
               k: int) -> sp.csr_matrix:
    """[N, V] the stored document weights (top k, positive, Lucene-rounded)."""
    rows, cols, vals = [], [], []
    for s in range(0, len(maxima), 512):
        w = np.log1p(np.maximum(maxima[s : s + 512].astype(np.float32) * scale + bias, 0))
        w[:, excluded] = 0
        idx = np.argpartition(-w, k - 1, axis=1)[:, :k]
        v = np.take_along_axis(w, idx, axis=1)
        keep = v > 0
        rows.append(np.nonzero(keep)[0] + s)
        cols.append(idx[keep])
        vals.append(lucene_feature(v[keep]))
    r, c, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    return sp.csr_matrix((v, (r, c)), shape=maxima.shape)


def query_matrix(texts: list[str], tokenizer: Any, idf: np.ndarray) -> sp.csr_matrix:
    flat, lengths = query_tokenizer(tokenizer)(texts)
    owner = np.repeat(np.arange(len(texts)), lengths)
    m = sp.csr_matrix((np.ones(len(flat), np.float32), (owner, flat)), shape=(len(texts), len(idf)))
    m.sum_duplicates()
    m.data = idf[m.indices].astype(np.float32)  # distinct tokens, IDF each
    return m


def evaluate(docs: sp.csr_matrix, ids: list[str], name: str, tokenizer: Any, idf: np.ndarray) -> dict[str, Any]:
    out = {}
    for split in SPLITS.get(name, ("test",)):
        data = load_beir(DATA / name, split)
        qids = list(data.queries)
        scores = (query_matrix([data.queries[q] for q in qids], tokenizer, idf) @ docs.T).toarray()
        idx, best = top_k(scores, 100, positive=True)
        run = {q: [(ids[j], float(s)) for j, s in zip(i, b, strict=True) if j >= 0]
               for q, i, b in zip(qids, idx, best, strict=True)}
        m = compute_metrics(data.qrels, run)
        out[split] = {"ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"]}
    return out


def explain(work: Path, name: str, variant: str, tokenizer: Any, excluded: list[int], k: int,
            docs: int = 3, show: int = 12) -> list[dict[str, Any]]:
    """For the first ``docs`` documents of a collection: the terms the fitted head
    (``W/<c>/head-<variant>.npz``) adds to a document's stored top ``k`` and those it drops,
    heaviest first, beside the terms both keep."""
    maxima = np.asarray(np.load(work / name / "maxima.npy", mmap_mode="r")[:docs], np.float32)
    head = np.load(work / name / f"head-{variant.replace(':', '_')}.npz")
    return compare_terms(maxima, maxima * head["scale"] + head["bias"], tokenizer, excluded, k, show)


def compare_terms(before_maxima: np.ndarray, after_maxima: np.ndarray, tokenizer: Any, excluded: list[int],
                  k: int, show: int = 12) -> list[dict[str, Any]]:
    """Per document: the terms ``after_maxima``'s stored top ``k`` adds to ``before_maxima``'s
    and those it drops, heaviest first, beside the terms both keep."""
    vocab = before_maxima.shape[1]
    one, zero = np.ones(vocab, np.float32), np.zeros(vocab, np.float32)
    before = doc_matrix(before_maxima, one, zero, excluded, k)
    after = doc_matrix(after_maxima, one, zero, excluded, k)
    out = []
    for d in range(before.shape[0]):
        b = dict(zip(before[d].indices.tolist(), before[d].data.tolist(), strict=True))
        a = dict(zip(after[d].indices.tolist(), after[d].data.tolist(), strict=True))

        def words(ids: list[int], weights: dict[int, float]) -> list[str]:
            top = sorted(ids, key=lambda t: -weights[t])[:show]
            return [f"{tokenizer.id_to_token(t)} {weights[t]:.2f}" for t in top]

        out.append({"doc": d, "added": words([t for t in a if t not in b], a),
                    "dropped": words([t for t in b if t not in a], b),
                    "kept_top": words([t for t in a if t in b], a), "kept": len(set(a) & set(b))})
    return out


def bench_parser(doc: str | None, head: str) -> argparse.ArgumentParser:
    """The options this bench and ``sparse_lowrank.py`` share; ``head`` names what a variant saves."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--collection", action="append", default=[])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--top-k", type=int, default=128)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--explain", default=None, metavar="VARIANT",
                        help=f"print the terms VARIANT's saved {head} adds / drops on the first 3 documents")
    return parser


def main() -> int:
    args = bench_parser(__doc__, "head").parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from lr_opensearch.fit.sparse_head import fit_term_affine
    from lr_opensearch.model.framing import special_token_ids

    encoder = load_encoder()
    excluded = special_token_ids(encoder.tokenizer)
    if args.explain:
        for name in args.collection or ["scifact"]:
            print(json.dumps(explain(args.work, name, args.explain, encoder.tokenizer, excluded, args.top_k),
                             indent=1))
        return 0
    results: dict[str, Any] = {}
    for name in args.collection or ["scifact"]:
        c = collection_inputs(name, encoder, args.work)
        inputs, maxima = c["inputs"], c["maxima"]
        vocab = maxima.shape[1]
        queries = QuerySet.build(inputs.bags, inputs.sources, inputs.idf, np.arange(len(c["ids"])))
        for text in args.variant or ["none"]:
            config = parse_variant(text)
            if config is None:
                scale, bias, stats = np.ones(vocab, np.float32), np.zeros(vocab, np.float32), None
            else:
                scale, bias, st = fit_term_affine(maxima, queries, config, progress=False)
                stats = dataclasses.asdict(st)
            docs = doc_matrix(maxima, scale, bias, excluded, args.top_k)
            row = {"metrics": evaluate(docs, c["ids"], name, encoder.tokenizer, inputs.idf),
                   "stored_terms_per_doc": docs.nnz / docs.shape[0], "fit": stats,
                   "encode_s": c["encode_s"]}
            results.setdefault(name, {})[text] = row
            logger.info("%s %s: %s, %.1f terms/doc, fit %s s", name, text,
                        json.dumps(row["metrics"]), row["stored_terms_per_doc"],
                        None if stats is None else round(stats["fit_seconds"], 1))
            if args.out:
                args.out.write_text(json.dumps(results, indent=1))
            np.savez(args.work / name / f"head-{text.replace(':', '_')}.npz", scale=scale, bias=bias)
    return 0


if __name__ == "__main__":
    sys.exit(main())
