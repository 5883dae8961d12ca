"""The sparse projection's low-rank correction (issue 48, 1b): variants chosen on SciFact
*train*, reported on every collection, by the replica of the LR sparse leg that
``bench/sparse_fit.py`` defines (top 128 positive weights, special tokens dropped, Lucene's
rounding, the query side's IDF vectors, exact dot products).

    python3 bench/sparse_states.py --work W --collection scifact      # the states, once
    python3 bench/sparse_lowrank.py --work W --collection scifact \\
        --variant r32:s300 --variant r32:s300:masked ... [--out result.json]

``W/<c>/`` also needs ``maxima.npy`` (``bench/sparse_fit.py``'s cache: the fit inputs'
check). ``--screen N``: evaluate on the documents judged for the collection's splits plus N
others drawn at random (a reduced corpus, to screen variants cheaply; ``none`` = today's head
on the same documents). Variant syntax: ``r<rank>:s<steps>:b<batch>:n<negatives>:lr<step>:f<flops>``
and ``masked`` (``pairs="masked"``), any subset; the rest from ``LowRankFitConfig``. The
fitted ``up`` / ``down`` are saved as ``W/<c>/lowrank-<variant>.npz``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sparse_fit import (  # noqa: E402
    DATA,
    bench_parser,
    collection_inputs,
    compare_terms,
    doc_matrix,
    evaluate,
    load_encoder,
)

from lr_opensearch.fit.sparse import QuerySet  # noqa: E402
from lr_opensearch.fit.sparse_lowrank import LowRankFitConfig, StateCache, fit_lowrank  # noqa: E402

logger = logging.getLogger("sparse_lowrank")


def parse_variant(text: str) -> LowRankFitConfig:
    fields = {"r": ("rank", int), "s": ("steps", int), "b": ("batch", int), "n": ("negatives", int),
              "lr": ("lr", float), "f": ("flops", float)}
    values: dict[str, Any] = {}
    for part in text.split(":"):
        if part == "masked":
            values["pairs"] = "masked"
            continue
        key = "lr" if part.startswith("lr") else part[0]
        name, kind = fields[key]
        values[name] = kind(part[len(key):])
    return LowRankFitConfig(**values)


def load_cache(work: Path, name: str) -> StateCache:
    d = work / name
    return StateCache(np.load(d / "states.npy"), np.load(d / "tokens.npy"), np.load(d / "offsets.npy"))


@torch.no_grad()
def corrected_maxima(cache: StateCache, weight: torch.Tensor, rows: int = 2048) -> np.ndarray:
    """[N, V] float32 maxima over each document's positions of ``states @ weight^T``."""
    n, off = len(cache), cache.offsets
    out = np.full((n, weight.shape[0]), -1e4, np.float32)
    d = 0
    while d < n:
        e = d + 1
        while e < n and off[e + 1] - off[d] <= rows:
            e += 1
        lengths = np.diff(off[d : e + 1])
        states = torch.from_numpy(cache.states[off[d] : off[e]].astype(np.float32))
        logits = (states @ weight.t()).numpy()
        have = np.flatnonzero(lengths > 0)
        if len(have):
            starts = (off[d : e] - off[d])[have]
            out[d + have] = np.maximum.reduceat(logits, starts, axis=0)
        d = e
    return out


def screen_rows(name: str, ids: list[str], extra: int, seed: int = 0) -> np.ndarray:
    """The reduced corpus of a screening run: every document judged for any of the
    collection's evaluated splits, plus ``extra`` others drawn at random (all: ``extra`` < 0)."""
    from sparse_fit import SPLITS

    from lr_opensearch.evaluation.beir import load_beir

    if extra < 0:
        return np.arange(len(ids))
    row = {d: i for i, d in enumerate(ids)}
    judged = {row[d] for split in SPLITS.get(name, ("test",))
              for rel in load_beir(DATA / name, split).qrels.values() for d in rel if d in row}
    rest = np.setdiff1d(np.arange(len(ids)), sorted(judged))
    pick = np.random.default_rng(seed).choice(rest, min(extra, len(rest)), replace=False)
    return np.sort(np.concatenate([sorted(judged), pick])).astype(np.int64)


def subset(cache: StateCache, rows: np.ndarray) -> StateCache:
    parts = [slice(cache.offsets[r], cache.offsets[r + 1]) for r in rows]
    lengths = [p.stop - p.start for p in parts]
    return StateCache(np.concatenate([cache.states[p] for p in parts]),
                      np.concatenate([cache.tokens[p] for p in parts]),
                      np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64))


def main() -> int:
    parser = bench_parser(__doc__, "correction")
    parser.add_argument("--reuse", action="store_true", help="evaluate a variant's saved fit instead of fitting")
    parser.add_argument("--screen", type=int, default=-1, metavar="N",
                        help="evaluate on the judged documents + N random others (default: all)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from lr_opensearch.model.framing import special_token_ids

    torch.manual_seed(0)
    encoder = load_encoder()
    excluded = special_token_ids(encoder.tokenizer)
    weight = encoder.model.sparse_projection()[0].detach().float()
    if args.explain:
        for name in args.collection or ["scifact"]:
            saved = np.load(args.work / name / f"lowrank-{args.explain.replace(':', '_')}.npz")
            first = subset(load_cache(args.work, name), np.arange(3))
            fitted = weight + torch.from_numpy(saved["up"]) @ torch.from_numpy(saved["down"]).t()
            vocab = encoder.vocab_limit
            print(json.dumps(compare_terms(corrected_maxima(first, weight)[:, :vocab],
                                           corrected_maxima(first, fitted)[:, :vocab], encoder.tokenizer,
                                           excluded, args.top_k), indent=1))
        return 0
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {}
    for name in args.collection or ["scifact"]:
        c = collection_inputs(name, encoder, args.work)
        inputs, vocab = c["inputs"], c["maxima"].shape[1]
        cache = load_cache(args.work, name)
        queries = QuerySet.build(inputs.bags, inputs.sources, inputs.idf, np.arange(len(c["ids"])))
        rows = screen_rows(name, c["ids"], args.screen)
        ids = [c["ids"][r] for r in rows]
        for text in args.variant:
            t0 = time.perf_counter()
            if text == "none":
                st, maxima = None, c["maxima"][rows].astype(np.float32)
            else:
                saved = args.work / name / f"lowrank-{text.replace(':', '_')}.npz"
                if args.reuse and saved.is_file():  # evaluate a saved fit again (e.g. on all documents)
                    st, up, down = None, *(torch.from_numpy(np.load(saved)[k]) for k in ("up", "down"))
                else:
                    up, down, st = fit_lowrank(cache, queries, weight, None, parse_variant(text), progress=False)
                    np.savez(saved, up=up.numpy(), down=down.numpy())
                t0 = time.perf_counter()
                maxima = corrected_maxima(subset(cache, rows), weight + up @ down.t())[:, :vocab]
            docs = doc_matrix(maxima, np.ones(vocab, np.float32), np.zeros(vocab, np.float32), excluded,
                              args.top_k)
            row = {"metrics": evaluate(docs, ids, name, encoder.tokenizer, inputs.idf), "documents": len(rows),
                   "stored_terms_per_doc": docs.nnz / docs.shape[0],
                   "fit": None if st is None else dataclasses.asdict(st), "project_s": time.perf_counter() - t0}
            key = f"{'screen ' if args.screen >= 0 else ''}lowrank {text}"
            results.setdefault(name, {})[key] = row
            logger.info("%s %s on %d documents: %s, %s", name, text, len(rows), json.dumps(row["metrics"]),
                        "" if st is None else f"fit {st.fit_seconds:.0f} s, loss {st.loss_first:.3f} -> "
                        f"{st.loss_last:.3f}")
            if args.out:
                args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
