"""Item 2 of issue 48 at a CPU's scale: the inference-free recipe trained for a bounded
number of steps (the IDF query side as served; the document side the backbone with its
top ``--unfreeze`` layers trained and the tied projection frozen), on SciFact *train*
pairs (the even-numbered train queries and their judged documents) plus the corpus's
pseudo-queries, the loss of ``fit.sparse_lowrank`` (softmax over the step's documents:
in-batch and random negatives, logits on the batch's query columns; FLOPS on sampled
columns relative to the untrained head). No GPU was lent: this measures the recipe's
cost and direction on 2 shared cores, not what a trained head can reach.

    python3 bench/sparse_train.py --work W --steps 80 [--unfreeze 1] [--out result.json]

Figures, by the replica of ``bench/sparse_fit.py`` (top 128, Lucene rounding, IDF
queries): SciFact *odd-numbered* train queries (never trained on) against a reduced
corpus (their judged documents + ``--pool`` random others; before = the same reduced
corpus with today's head, from ``W/scifact/maxima.npy``), and ADI whole.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sparse_fit import DATA, collection_inputs, doc_matrix, evaluate, load_encoder, query_matrix  # noqa: E402

from lr_opensearch.evaluation.beir import compute_metrics, load_beir  # noqa: E402
from lr_opensearch.instructions import document_text  # noqa: E402
from lr_opensearch.model.doc_encoder import padded  # noqa: E402
from lr_opensearch.model.framing import tokenize_texts  # noqa: E402
from lr_opensearch.model.heads import unwrap  # noqa: E402

logger = logging.getLogger("sparse_train")


def pairs(c: dict[str, Any], tokenizer: Any, idf: np.ndarray, seed: int) -> tuple[sp.csr_matrix, np.ndarray]:
    """IDF query vectors and their positive document rows: the even train queries' judged
    pairs, then as many pseudo-queries drawn at random."""
    data = load_beir(DATA / "scifact", "train")
    row = {d: i for i, d in enumerate(c["ids"])}
    texts, pos = [], []
    for n, (qid, rel) in enumerate(sorted(data.qrels.items())):
        if n % 2 == 0:
            for d, g in rel.items():
                if g > 0 and d in row:
                    texts.append(data.queries[qid])
                    pos.append(row[d])
    real = query_matrix(texts, tokenizer, idf)
    inputs = c["inputs"]
    rng = np.random.default_rng(seed)
    pick = rng.choice(np.flatnonzero(inputs.sources >= 0), len(texts), replace=False)
    pseudo = inputs.bags[pick].tocsr(copy=True)
    pseudo.data = idf[pseudo.indices].astype(np.float32)
    return sp.vstack([real, pseudo]).tocsr(), np.concatenate([pos, inputs.sources[pick]]).astype(np.int64)


def step_loss(model: Any, tokenizer: Any, texts: list[str], docs: np.ndarray, target: np.ndarray,
              q: sp.csr_matrix, weight: torch.Tensor, flops: float, rng: np.random.Generator) -> torch.Tensor:
    ids, _ = tokenize_texts(tokenizer, [texts[d] for d in docs], model.framing, 128)
    input_ids, mask = padded(ids)
    states, content = model.document_states(input_ids, mask)
    qcols = np.unique(q.indices)
    cols = torch.from_numpy(np.concatenate([qcols, rng.choice(weight.shape[0], 512, replace=False)]))
    logits = (states @ weight[cols].t()).masked_fill(~content.unsqueeze(-1), -torch.inf)
    s = torch.log1p(torch.relu(logits.amax(1)))
    qd = torch.zeros(q.shape[0], len(qcols))
    owner = np.repeat(np.arange(q.shape[0]), np.diff(q.indptr))
    qd[torch.from_numpy(owner), torch.from_numpy(np.searchsorted(qcols, q.indices))] = torch.from_numpy(q.data)
    loss = torch.nn.functional.cross_entropy(qd @ s[:, : len(qcols)].t(), torch.from_numpy(target))
    return loss + flops * s[:, len(qcols):].mean(0).square().sum()


def heldout(c: dict[str, Any], maxima: np.ndarray, rows: np.ndarray, tokenizer: Any, idf: np.ndarray,
            excluded: list[int]) -> dict[str, float]:
    """nDCG@10 / R@100 of the odd train queries on the reduced corpus ``rows``."""
    data = load_beir(DATA / "scifact", "train")
    qids = [q for n, q in enumerate(sorted(data.qrels)) if n % 2 == 1]
    vocab = maxima.shape[1]
    docs = doc_matrix(maxima, np.ones(vocab, np.float32), np.zeros(vocab, np.float32), excluded, 128)
    scores = (query_matrix([data.queries[q] for q in qids], tokenizer, idf) @ docs.T).toarray()
    ids = [c["ids"][r] for r in rows]
    run = {q: {ids[j]: float(scores[i, j]) for j in np.argsort(-scores[i])[:100] if scores[i, j] > 0}
           for i, q in enumerate(qids)}
    m = compute_metrics({q: data.qrels[q] for q in qids}, {q: sorted(r.items(), key=lambda x: -x[1])
                                                          for q, r in run.items()})
    return {"ndcg@10": m["ndcg@10"], "recall@100": m["recall@100"], "queries": len(qids), "documents": len(rows)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--negatives", type=int, default=8)
    parser.add_argument("--unfreeze", type=int, default=1)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--flops", type=float, default=1e-3)
    parser.add_argument("--pool", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from lr_opensearch.model.framing import special_token_ids

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    encoder = load_encoder()
    model, tok = encoder.model, encoder.tokenizer
    excluded = special_token_ids(tok)
    c = collection_inputs("scifact", encoder, args.work)
    idf = c["inputs"].idf
    texts = [document_text(t, x) for t, x in c["inputs"].docs]
    q, pos = pairs(c, tok, idf, seed=0)
    data = load_beir(DATA / "scifact", "train")
    judged = {c["ids"].index(d) for n, qid in enumerate(sorted(data.qrels)) if n % 2 == 1 for d in data.qrels[qid]}
    rows = np.array(sorted(judged | set(rng.choice(len(texts), args.pool, replace=False).tolist())))
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}, "pairs": int(q.shape[0])}
    result["before"] = {"scifact_train_odd_reduced": heldout(c, c["maxima"][rows].astype(np.float32), rows, tok,
                                                             idf, excluded)}
    layers = unwrap(model.hf).base_model.encoder.layer
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in layers[len(layers) - args.unfreeze:]:
        for p in layer.parameters():
            p.requires_grad_(True)
    weight = model.sparse_projection()[0].detach()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    model.train()
    t0, losses = time.perf_counter(), []
    for step in range(args.steps):
        b = rng.choice(q.shape[0], args.batch, replace=False)
        docs, target = np.unique(np.concatenate([pos[b], rng.choice(len(texts), args.negatives)]),
                                 return_inverse=True)
        loss = step_loss(model, tok, texts, docs, target[: args.batch], q[b], weight, args.flops, rng)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        logger.info("step %d loss %.3f (%.0f s)", step, losses[-1], time.perf_counter() - t0)
    result["train_seconds"], result["loss"] = time.perf_counter() - t0, [losses[:5], losses[-5:]]
    model.eval()
    t1 = time.perf_counter()
    maxima = encoder.encode_maxima([texts[r] for r in rows]).astype(np.float32)
    result["after"] = {"scifact_train_odd_reduced": heldout(c, maxima, rows, tok, idf, excluded)}
    adi = collection_inputs("adi", encoder, args.work)
    ai = adi["inputs"]
    amax = encoder.encode_maxima([document_text(t, x) for t, x in ai.docs]).astype(np.float32)
    v = amax.shape[1]
    result["after"]["adi"] = evaluate(doc_matrix(amax, np.ones(v, np.float32), np.zeros(v, np.float32), excluded,
                                                 128), adi["ids"], "adi", tok, ai.idf)
    result["encode_seconds"] = time.perf_counter() - t1
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
