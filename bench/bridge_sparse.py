"""BRIDGE-Embed's sparse side vs LightRetriever's, trained the same way on this CPU (issue 19).

    python bench/bridge_sparse.py [--steps 12] [--docs 500] [--out results/bench/bridge_sparse.json]

Three runs of ``trainer.train.Trainer`` from the same backbone (all-MiniLM-L6-v2, the
encoder path with its tied head: the one backbone here whose training and encoding fit a
shared 2-core CPU), the same SciFact *train* pairs (``python -m trainer.pairs ... --recipe
qrels --split train``; in-batch negatives), the same steps (default 12 of batch 8: what the
shared CPU allows), seed and LoRA:

- ``lr``: sparse_mode "max", the LightRetriever sparse term (contrastive + FLOPs);
- ``bridge``: sparse_mode "medusa_last" (3 Medusa heads), S-Matryoshka over k = 64/128/256
  plus self-distillation, no LightRetriever sparse term; SoftTopK tau ``MEDUSA_TAU``
  (chosen on SciFact train batches, see there), not the paper's 0.05;
- ``bridge+rrf``: the same plus the RRF-shaped hybrid hinge;
- ``bridge@tau0.05`` (only with ``--runs``): ``bridge`` at the paper's tau 0.05.

All three also train the LightRetriever dense side (dense_weight 1). Evaluation on SciFact
*test* (used only here, for the reported figures): each document's stored terms at k =
64/128/256 are ``DocEncoder.select_terms`` of the document forward (what ingest stores);
sparse scores are exact in-memory dot products with the query's token counts (the sum
rank_features computes, without its 9-bit rounding); dense scores are the LightRetriever
dense query (``encode_query_dense``, what the query table's mean gives) against the
document vectors; the hybrid fuses the top 100 of both legs with RRF (rank constant 60).
The corpus is every test-judged document plus a seeded random sample of the rest (``--docs``
in all), because encoding all 5,183 documents three times does not fit the CPU budget:
absolute nDCG is higher than on the full corpus; the comparison between runs is fair.
Index size: stored terms per document and the bytes of its ``lr_sparse`` JSON.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import random
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lr_opensearch.bundle.keys import encode_key  # noqa: E402
from lr_opensearch.evaluation.beir import compute_metrics, iter_jsonl, load_beir  # noqa: E402
from lr_opensearch.indexing.reader import document_text  # noqa: E402
from lr_opensearch.legs import DEFAULT_RANK_CONSTANT  # noqa: E402
from lr_opensearch.model import DocEncoder, DocSettings  # noqa: E402
from trainer.config import config_from_dict  # noqa: E402
from trainer.train import Trainer  # noqa: E402

logger = logging.getLogger("bench.bridge_sparse")
DATA = REPO.parent / "shared" / "data" / "scifact"
KS = (64, 128, 256)
DEPTH = 100
MAX_LENGTH = 64
QUERY_BATCH = 64
#: SoftTopK tau of the Medusa runs. all-MiniLM-L6-v2's tied head is nearly flat at [SEP]
#: (logit std ~0.3, max softmax ~1e-4 over 30,522 terms), so h = sum_n (1 - p_eos) p^(n)
#: spreads over ~1e-4 and the paper's tau 0.05 makes softmax(h / tau) a flat mask (every
#: kept weight 1/sqrt(k), no gradient). 5e-4 is the grid point (0.05 ... 2e-5) with the
#: lowest S-Matryoshka loss on held-out SciFact *train* batches (sampler batches 100-107,
#: which the 12 training steps never see) at the untrained model.
MEDUSA_TAU = 5e-4

RUNS: dict[str, dict[str, Any]] = {
    "lr": {"model": {"sparse_mode": "max"},
           "loss": {"sparse_weight": 1.0, "sparse_temperature": 1.0, "flops_max": 1e-3,
                    "flops_warmup_steps": 20}},
    "bridge": {"model": {"sparse_mode": "medusa_last", "medusa_heads": 3,
                         "soft_top_k_temperature": MEDUSA_TAU},
               "loss": {"sparse_weight": 0.0, "s_matryoshka_weight": 1.0,
                        "s_matryoshka_sizes": list(KS), "self_distill_weight": 0.1}},
    "bridge+rrf": {"model": {"sparse_mode": "medusa_last", "medusa_heads": 3,
                             "soft_top_k_temperature": MEDUSA_TAU},
                   "loss": {"sparse_weight": 0.0, "s_matryoshka_weight": 1.0,
                            "s_matryoshka_sizes": list(KS), "self_distill_weight": 0.1,
                            "rrf_weight": 100.0}},
    # the paper's tau, for comparison (not run by default: --runs bridge@tau0.05)
    "bridge@tau0.05": {"model": {"sparse_mode": "medusa_last", "medusa_heads": 3,
                                 "soft_top_k_temperature": 0.05},
                       "loss": {"sparse_weight": 0.0, "s_matryoshka_weight": 1.0,
                                "s_matryoshka_sizes": list(KS), "self_distill_weight": 0.1}},
}
DEFAULT_RUNS = ("lr", "bridge", "bridge+rrf")


def run_config(name: str, records: Path, out: Path, steps: int) -> dict[str, Any]:
    spec = RUNS[name]
    return {
        "model": {"path": "packaged:minilm", "pooling": "mean", "normalize": True, **spec["model"]},
        "lora": {"r": 16, "alpha": 32, "dropout": 0.0},
        "data": {"sources": [{"name": "scifact-train", "path": str(records)}], "negatives": 0,
                 "max_length": MAX_LENGTH, "query_max_tokens": 32},
        "loss": {"temperature": 0.05, "dense_weight": 1.0, "symmetric_weight": 0.0,
                 "kl_weight": 0.0, **spec["loss"]},
        "optim": {"lr": 2e-4, "warmup_steps": 5, "schedule": "constant", "weight_decay": 0.0},
        "run": {"output_dir": str(out / name), "steps": steps, "batch_size": 8, "save_every": 0,
                "log_every": 10, "seed": 13, "threads": 2, "resume": True},
    }


def corpus_subset(dataset: Any, size: int, seed: int = 0) -> dict[str, str]:
    """Every test-judged document plus a seeded sample of the others, ``size`` in all."""
    judged = {d for rel in dataset.qrels.values() for d in rel}
    docs = {str(r["_id"]): document_text(r.get("title", ""), r.get("text", ""))
            for _, r in iter_jsonl(dataset.corpus_path)}
    rest = sorted(set(docs) - judged)
    random.Random(seed).shuffle(rest)
    keep = sorted(judged & set(docs)) + rest[: max(0, size - len(judged))]
    return {d: docs[d] for d in keep}


def top(scores: np.ndarray, ids: list[str], depth: int) -> list[tuple[str, float]]:
    """The best ``depth`` (doc id, score) pairs, best first (an evaluation run's hits)."""
    order = np.argsort(-scores, kind="stable")[:depth]
    return [(ids[i], float(scores[i])) for i in order]


def rrf(*runs: list[tuple[str, float]]) -> list[tuple[str, float]]:
    """Reciprocal rank fusion of ranked hit lists (rank constant 60)."""
    fused: dict[str, float] = {}
    for run in runs:
        for rank, (doc, _) in enumerate(run, start=1):
            fused[doc] = fused.get(doc, 0.0) + 1.0 / (DEFAULT_RANK_CONSTANT + rank)
    return sorted(fused.items(), key=lambda kv: -kv[1])


def evaluate(trainer: Trainer, dataset: Any, corpus: dict[str, str]) -> dict[str, Any]:
    """nDCG@10 of the sparse leg at every k, the dense leg, and their RRF hybrid."""
    model, tok = trainer.model, trainer.tokenizer
    model.eval()
    encoder = DocEncoder(model, tok, DocSettings(max_length=MAX_LENGTH, top_k=max(KS)),
                         batch_size=32, device="cpu")
    ids, texts = list(corpus), list(corpus.values())
    from lr_opensearch.model.framing import tokenize_texts

    rows, _ = tokenize_texts(tok, texts, model.framing, MAX_LENGTH)
    dense_docs, raw = [], []
    start = time.perf_counter()
    with torch.inference_mode():
        for b in range(0, len(rows), 32):
            chunk = rows[b:b + 32]
            width = max(len(r) for r in chunk)
            x = torch.zeros(len(chunk), width, dtype=torch.long)
            m = torch.zeros_like(x)
            for n, r in enumerate(chunk):
                x[n, : len(r)], m[n, : len(r)] = torch.tensor(r), 1
            out = model.encode_documents(x, m)
            dense_docs.append(out.dense.float())
            raw.append(out.sparse.float())
    encode_s = time.perf_counter() - start
    doc_dense = torch.cat(dense_docs).numpy()
    sparse_raw = torch.cat(raw)
    qids = sorted(dataset.queries)
    tokens = trainer.collator.query_ids([dataset.queries[q] for q in qids])
    with torch.inference_mode():  # batched: one packed forward per QUERY_BATCH queries
        q_dense = torch.cat([model.encode_query_dense([], tokens[b:b + QUERY_BATCH]).float()
                             for b in range(0, len(tokens), QUERY_BATCH)]).numpy()
    dense_run = {q: top(doc_dense @ q_dense[i], ids, DEPTH) for i, q in enumerate(qids)}
    result: dict[str, Any] = {"encode_seconds": round(encode_s, 1),
                              "dense_ndcg10": compute_metrics(dataset.qrels, dense_run)["ndcg@10"]}
    for k in KS:
        encoder.top_k = k
        terms = encoder.select_terms(sparse_raw.clone())
        matrix = np.zeros((len(ids), sparse_raw.shape[1]), dtype=np.float32)
        for n, doc_terms in enumerate(terms):
            matrix[n, list(doc_terms)] = list(doc_terms.values())
        counts = np.zeros((len(qids), sparse_raw.shape[1]), dtype=np.float32)
        for i, query_ids in enumerate(tokens):
            np.add.at(counts[i], query_ids, 1.0)
        scores = counts @ matrix.T
        sparse_run = {q: top(scores[i], ids, DEPTH) for i, q in enumerate(qids)}
        hybrid = {q: rrf(sparse_run[q], dense_run[q]) for q in qids}
        size = [len(json.dumps({encode_key(tok.id_to_token(i)): w for i, w in t.items()}))
                for t in terms]
        result[f"k{k}"] = {
            "sparse_ndcg10": compute_metrics(dataset.qrels, sparse_run)["ndcg@10"],
            "hybrid_rrf_ndcg10": compute_metrics(dataset.qrels, hybrid)["ndcg@10"],
            "terms_per_doc": float(np.mean([len(t) for t in terms])),
            "sparse_json_bytes_per_doc": float(np.mean(size)),
        }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--docs", type=int, default=500)
    parser.add_argument("--records", default="/tmp/b19/scifact.train.jsonl",
                        help="python -m trainer.pairs DATA --recipe qrels --split train --out F")
    parser.add_argument("--work", default="/tmp/b19/runs")
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS), help=f"of {sorted(RUNS)}")
    parser.add_argument("--out", default=str(REPO / "results" / "bench" / "bridge_sparse.json"))
    parser.add_argument("--merge", nargs="*", default=None, metavar="JSON",
                        help="only combine the results of earlier runs (one process per run)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(2)
    dataset = load_beir(DATA, "test")
    corpus = corpus_subset(dataset, args.docs)
    results: dict[str, Any] = {}
    for earlier in args.merge or []:
        results.update(json.loads(Path(earlier).read_text(encoding="utf-8"))["results"])
    for name in [] if args.merge is not None else args.runs.split(","):
        config = config_from_dict(run_config(name, Path(args.records), Path(args.work), args.steps),
                                  source=f"bench run {name}")
        trainer = Trainer(config)
        trained = trainer.run()  # a finished run resumes as done: its figures are in metrics.jsonl
        metrics = (Path(args.work) / name / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
        last = json.loads(metrics[-1]) if metrics else {}
        results[name] = {"train_seconds": round(float(last.get("elapsed_s", trained.wall_seconds)), 1),
                         "last_logs": trained.last_logs or {k: v for k, v in last.items()
                                                            if k not in ("step", "elapsed_s")},
                         **evaluate(trainer, dataset, corpus)}
        logger.info("%s: %s", name, json.dumps(results[name]))
    header = (f"{'run':<14} {'dense':>6} " + " ".join(f"{'sp@' + str(k):>7}" for k in KS)
              + " " + " ".join(f"{'hyb@' + str(k):>7}" for k in KS)
              + " " + " ".join(f"{'B/doc@' + str(k):>9}" for k in KS))
    lines = [header]
    for name, r in results.items():
        lines.append(f"{name:<14} {r['dense_ndcg10']:>6.4f} "
                     + " ".join(f"{r[f'k{k}']['sparse_ndcg10']:>7.4f}" for k in KS) + " "
                     + " ".join(f"{r[f'k{k}']['hybrid_rrf_ndcg10']:>7.4f}" for k in KS) + " "
                     + " ".join(f"{r[f'k{k}']['sparse_json_bytes_per_doc']:>9.0f}" for k in KS))
    print("\n".join(lines))
    report = {"benchmark": "bridge_sparse", "issue": 19, "steps": args.steps, "batch_size": 8,
              "max_length": MAX_LENGTH, "corpus_docs": len(corpus), "test_queries": len(dataset.queries),
              "backbone": "all-MiniLM-L6-v2", "medusa_tau": MEDUSA_TAU,
              "runs": {name: RUNS[name] for name in results if name in RUNS},
              "machine": platform.platform(),
              "cpu_threads": torch.get_num_threads(), "torch": torch.__version__,
              "python": platform.python_version(), "results": results, "table": lines}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
