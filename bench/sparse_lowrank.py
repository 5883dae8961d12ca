"""The sparse projection's low-rank correction (issue 48, 1b): variants chosen on SciFact
*train*, reported on every collection, by the replica of the LR sparse leg that
``bench/sparse_fit.py`` defines (top 128 positive weights, special tokens dropped, Lucene's
rounding, the query side's IDF vectors, exact dot products).

    python3 bench/sparse_states.py --work W --collection scifact      # the states, once
    python3 bench/sparse_lowrank.py --work W --collection scifact \\
        --variant r32:s300 --variant r32:s300:masked ... [--out result.json]

``W/<c>/`` also needs ``maxima.npy`` (``bench/sparse_fit.py``'s cache: the fit inputs'
check). Variant syntax: ``r<rank>:s<steps>:b<batch>:n<negatives>:lr<step>:f<flops>``
and ``masked`` (``pairs="masked"``), any subset; the rest from ``LowRankFitConfig``. The
fitted ``up`` / ``down`` are saved as ``W/<c>/lowrank-<variant>.npz``.
"""

from __future__ import annotations

import argparse
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

from sparse_fit import collection_inputs, doc_matrix, evaluate, load_encoder  # noqa: E402

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--collection", action="append", default=[])
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--top-k", type=int, default=128)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from lr_opensearch.model.framing import special_token_ids

    torch.manual_seed(0)
    encoder = load_encoder()
    excluded = special_token_ids(encoder.tokenizer)
    weight = encoder.model.sparse_projection()[0].detach().float()
    results: dict[str, Any] = json.loads(args.out.read_text()) if args.out and args.out.is_file() else {}
    for name in args.collection or ["scifact"]:
        c = collection_inputs(name, encoder, args.work)
        inputs, vocab = c["inputs"], c["maxima"].shape[1]
        cache = load_cache(args.work, name)
        queries = QuerySet.build(inputs.bags, inputs.sources, inputs.idf, np.arange(len(c["ids"])))
        for text in args.variant:
            config = parse_variant(text)
            up, down, st = fit_lowrank(cache, queries, weight, None, config, progress=False)
            np.savez(args.work / name / f"lowrank-{text.replace(':', '_')}.npz", up=up.numpy(), down=down.numpy())
            t0 = time.perf_counter()
            maxima = corrected_maxima(cache, weight + up @ down.t())[:, :vocab]
            docs = doc_matrix(maxima, np.ones(vocab, np.float32), np.zeros(vocab, np.float32), excluded,
                              args.top_k)
            row = {"metrics": evaluate(docs, c["ids"], name, encoder.tokenizer, inputs.idf),
                   "stored_terms_per_doc": docs.nnz / docs.shape[0], "fit": dataclasses.asdict(st),
                   "project_s": time.perf_counter() - t0}
            results.setdefault(name, {})[f"lowrank {text}"] = row
            logger.info("%s %s: %s, fit %.0f s, loss %.3f -> %.3f", name, text, json.dumps(row["metrics"]),
                        st.fit_seconds, st.loss_first, st.loss_last)
            if args.out:
                args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
