"""Query encoding throughput: the bundle's model-free encoder vs a full forward pass.

    python bench/query_encode.py [--bundle DIR] [--data ../shared/data] [--n 65536]
                                 [--forward-n 1024] [--repeats 3]

Reads ALL queries of every collection under ``--data`` (``*/queries.jsonl.gz``), repeats
them to ``--n`` and measures, on the same ids:

(a) the bundle's ``QueryEncoder`` (in a subprocess that never imports torch, so its RSS is
    honest): tokenization (HF ``encode_batch`` / ``encode_batch_fast`` for reference; ours
    without the word cache, with it cold and warm), the dense bag mean, the sparse counts,
    and the whole ``encode_batch`` (1 and 2 threads), plus the word cache on never-seen
    text (fresh encoder, unique queries only), and ``--unique-n`` distinct pseudo-queries cut
    from the collections' documents (4-16 words), each encoded once: the figure for query
    streams that rarely repeat. It also checks that the word cache gives
    the tokenizer's ids for every query and that every query encodes end to end.
(b) the same backbone's full forward (transformers ``AutoModel`` of the bundle's doc
    encoder on CPU, 2 threads, batch 256, the bundle's pooling) with its tokenizer, on
    ``--forward-n`` queries taken evenly from the repeated list (same mix), batched in
    length order with at most 256 x 32 padded tokens per batch so that padding is small;
(c) torch's ``embedding_bag`` (mean) over the same ids and float32 table, the
    memory-bandwidth reference for the lookup, alternating rounds with our ``bag_mean``.

Timings are the best of ``--repeats`` runs (wall clock) with the process CPU time beside
them: the machine is shared, so the load average is recorded too. Labels say which
figures use a cache. Without ``--bundle`` it uses results/bundles/minilm, building it
with ``lr bundle build`` if absent. Writes results/bench/query_encode.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_BUNDLE = REPO / "results" / "bundles" / "minilm"
DEFAULT_DATA = REPO.parent / "shared" / "data"


def pseudo_queries(data: Path, n: int, seed: int = 0) -> list[str]:
    """``n`` distinct texts of 4-16 words cut from the documents of every collection under
    ``data``: query-like text the word cache has not seen (unlike the repeated test set)."""
    import random

    docs: list[list[str]] = []
    for path in sorted(data.glob("*/corpus.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            docs += [w for w in (json.loads(line).get("text", "").split() for line in f) if len(w) >= 20]
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n and docs:
        words = rng.choice(docs)
        k = rng.randint(4, 16)
        start = rng.randint(0, len(words) - k)
        out[" ".join(words[start : start + k])] = None
    return list(out)


def load_queries(data: Path) -> tuple[list[str], dict[str, int]]:
    """All query texts of every collection (in name order) and the count per collection."""
    texts: list[str] = []
    counts: dict[str, int] = {}
    for path in sorted(data.glob("*/queries.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            batch = [json.loads(line)["text"] for line in f if line.strip()]
        counts[path.parent.name] = len(batch)
        texts += batch
    if not texts:
        raise SystemExit(f"no */queries.jsonl.gz under {data}; pass --data")
    return texts, counts


def timed(fn: Callable[[], Any], repeats: int, n: int) -> tuple[Any, dict[str, float]]:
    """Best-of-``repeats`` wall time of fn(); q/s for n queries, CPU microseconds per query."""
    best_wall, best_cpu, result = float("inf"), float("inf"), None
    for _ in range(repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        result = fn()
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return result, {"qps": n / best_wall, "seconds": best_wall, "cpu_us_per_query": 1e6 * best_cpu / n}


def rss_mb() -> dict[str, float]:
    """Current and peak resident set size of this process (MB), from /proc/self/status."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                out["rss_mb" if line.startswith("VmRSS") else "peak_rss_mb"] = int(line.split()[1]) / 1024
    return out


# ----------------------------------------------------------------------- query side (no torch)


def worker(args: argparse.Namespace) -> None:
    """The query-side measurements; prints one JSON line; saves ids and dense for checks."""
    memory = {"after_imports": rss_mb()}
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.query import QueryEncoder, bag_mean
    from lr_opensearch.query.tokens import plain_copy

    unique, _ = load_queries(args.data)
    data = (unique * (args.n // len(unique) + 1))[: args.n]
    bundle = load_bundle(args.bundle)
    memory["after_bundle_load"] = rss_mb()
    serving = QueryEncoder(bundle)
    serving.encode_batch(unique)  # float32 table copy + key table + word cache of every query
    memory["serving_encoder_warm"] = rss_mb()
    del serving
    n, r = len(data), args.repeats
    out: dict[str, Any] = {"n": n, "unique_queries": len(unique)}
    tok = plain_copy(bundle.tokenizer)
    tk: dict[str, Any] = {}
    _, tk["hf_encode_batch"] = timed(lambda: [e.ids for e in tok.encode_batch(data, add_special_tokens=False)], r, n)
    _, tk["hf_encode_batch_fast"] = timed(lambda: [e.ids for e in tok.encode_batch_fast(data, add_special_tokens=False)], r, n)
    uncached = QueryEncoder(bundle, cache_size=0)
    _, tk["ours_no_word_cache"] = timed(lambda: uncached.tokenize(data), r, n)
    cold_runs = [timed(lambda: QueryEncoder(bundle).tokenize(data), 1, n)[1] for _ in range(r)]
    tk["ours_word_cache_cold_start"] = max(cold_runs, key=lambda x: x["qps"])
    enc = QueryEncoder(bundle, threads=1)
    enc.tokenize(data)
    (flat, lengths), tk["ours_word_cache_warm"] = timed(lambda: enc.tokenize(data), r, n)
    unseen = [timed(lambda: QueryEncoder(bundle).tokenize(unique), 1, len(unique))[1] for _ in range(r)]
    tk["ours_word_cache_unseen_text"] = max(unseen, key=lambda x: x["qps"])
    tk["word_cache_chunks"] = len(enc.tokenizer._cache)
    out["tokenize"] = tk
    # unique text: pseudo-queries from the documents, each seen once
    fresh_text = pseudo_queries(args.data, args.unique_n)
    uq: dict[str, Any] = {"n": len(fresh_text),
                          "tokens_per_query": float(enc.tokenize(fresh_text[:2000])[1].mean())}
    _, uq["hf_encode_batch_fast"] = timed(
        lambda: [e.ids for e in tok.encode_batch_fast(fresh_text, add_special_tokens=False)], r,
        len(fresh_text))

    def started() -> Any:  # an encoder that has served other queries: one-time costs paid
        e = QueryEncoder(bundle, threads=2)
        e.encode_batch(unique)
        return e

    runs = []
    for _ in range(r):
        e = started()
        runs.append(timed(lambda e=e: e.encode_batch(fresh_text), 1, len(fresh_text))[1])
    uq["encode_batch_started_encoder"] = max(runs, key=lambda x: x["qps"])
    runs = [timed(lambda: QueryEncoder(bundle, threads=2).encode_batch(fresh_text), 1,
                  len(fresh_text))[1] for _ in range(r)]
    uq["encode_batch_fresh_encoder"] = max(runs, key=lambda x: x["qps"])
    e = started()
    e.encode_batch(fresh_text)
    _, uq["encode_batch_second_pass"] = timed(lambda: e.encode_batch(fresh_text), r,
                                              len(fresh_text))
    out["unique_text"] = uq
    table = enc.table()
    dense, out["dense_bag_mean"] = timed(lambda: bag_mean(table, flat, lengths), r, n)
    rows, out["sparse_counts"] = timed(lambda: enc.sparse(flat, lengths), r, n)
    _, out["sparse_dicts_read"] = timed(lambda: list(rows), r, n)  # every {key: count} built
    total: dict[str, Any] = {}
    _, total["threads1_word_cache_warm"] = timed(lambda: enc.encode_batch(data), r, n)
    enc2 = QueryEncoder(bundle, threads=2)
    enc2.encode_batch(data)
    _, total["threads2_word_cache_warm"] = timed(lambda: enc2.encode_batch(data), r, n)
    _, total["threads2_word_cache_cold_start"] = timed(lambda: QueryEncoder(bundle).encode_batch(data), r, n)
    _, total["threads2_no_word_cache"] = timed(lambda: QueryEncoder(bundle, cache_size=0).encode_batch(data), r, n)
    _, total["threads2_word_cache_warm_every_dict_read"] = timed(
        lambda: list(enc2.encode_batch(data).sparse), r, n)
    out["total_encode_batch"] = total
    sample = unique[:: max(1, len(unique) // 500)]
    _, out["single_query_encode_warm"] = timed(lambda: [enc2.encode(t) for t in sample], r, len(sample))
    out["checks"] = checks(bundle, enc, tok, unique)
    memory[f"after_benchmarks_{args.n}_query_batches"] = rss_mb()
    out["memory"] = memory
    out["heavy_modules_loaded"] = [m for m in ("torch", "transformers") if m in sys.modules]
    out["tokens_per_query"] = float(lengths.mean())
    np.savez(args.ids_out, flat=flat, lengths=lengths, dense=dense)
    print(json.dumps(out))


def checks(bundle: Any, enc: Any, tok: Any, unique: list[str]) -> dict[str, Any]:
    """Word cache == tokenizer ids; every query encodes (finite dense, non-empty sparse)."""
    specials = bundle.special_token_ids
    expected = [[i for i in e.ids if i not in specials][: enc.max_tokens]
                for e in tok.encode_batch(unique, add_special_tokens=False)]
    flat, lengths = enc.tokenize(unique)
    got = [part.tolist() for part in np.split(flat, np.cumsum(lengths)[:-1])]
    batch = enc.encode_batch(unique)
    return {
        "word_cache_id_mismatches": sum(a != b for a, b in zip(got, expected, strict=True)),
        "queries_encoded": len(batch),
        "all_dense_finite": bool(np.isfinite(batch.dense).all()),
        "all_sparse_nonempty": all(len(s) > 0 for s in batch.sparse),
        "served_dim": int(batch.dense.shape[1]),
    }


# ----------------------------------------------------------------------- torch side


def embedding_bag_reference(bundle: Any, ids: dict[str, np.ndarray], repeats: int) -> dict[str, Any]:
    """torch embedding_bag (mean) vs our bag_mean on the same ids and float32 table.

    Rounds alternate (ours, torch 1 thread, torch 2 threads) so that load changes on the
    shared machine hit all three alike; best round of each is kept.
    """
    import torch

    from lr_opensearch.query import bag_mean

    served = bundle.config.served_dim
    table_np = np.ascontiguousarray(bundle.table()[:, :served], dtype=np.float32)
    table = torch.from_numpy(table_np)
    flat = torch.from_numpy(ids["flat"])
    offsets = torch.from_numpy(np.cumsum(ids["lengths"]) - ids["lengths"])
    n = len(ids["lengths"])

    def bag(threads: int) -> Callable[[], Any]:
        def run() -> Any:
            torch.set_num_threads(threads)
            return torch.nn.functional.embedding_bag(flat, table, offsets, mode="mean")
        return run

    runs: dict[str, list[dict[str, float]]] = {"ours_bag_mean": [], "threads1": [], "threads2": []}
    res = None
    for _ in range(max(3, repeats)):
        runs["ours_bag_mean"].append(timed(lambda: bag_mean(table_np, ids["flat"], ids["lengths"]), 1, n)[1])
        res, m = timed(bag(1), 1, n)
        runs["threads1"].append(m)
        runs["threads2"].append(timed(bag(2), 1, n)[1])
    out: dict[str, Any] = {k: max(v, key=lambda x: x["qps"]) for k, v in runs.items()}
    out["max_abs_diff_vs_ours"] = float(np.abs(res.numpy() - ids["dense"]).max())
    out["table_bytes"] = int(table_np.nbytes)
    out["gathered_bytes_per_query"] = float(ids["lengths"].mean() * served * 4)
    return out


def full_forward(bundle: Any, texts: list[str], batch: int) -> dict[str, Any]:
    """The backbone's full forward on the queries: HF tokenizer + AutoModel + pooling."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel

    torch.set_num_threads(2)
    cfg = bundle.config
    model = AutoModel.from_pretrained(str(bundle.doc_encoder_dir), dtype=torch.float32).eval()
    tok = bundle.tokenizer.__class__.from_str(bundle.tokenizer.to_str())
    tok.no_padding()
    tok.enable_truncation(max_length=cfg.max_length)
    # length-bucketed batches (sorted by token count), as a throughput-minded baseline would,
    # of up to `batch` queries and at most `batch` x 32 padded tokens: one 256-token query
    # must not pad 255 short ones to its length
    lengths = [len(e.ids) for e in tok.encode_batch(texts)]
    order = np.argsort(lengths, kind="stable")
    texts = [texts[i] for i in order]
    budget = batch * 32
    bounds, start = [], 0
    for i in range(1, len(texts) + 1):
        if i == len(texts) or i - start >= batch or (i + 1 - start) * lengths[order[i]] > budget:
            bounds.append((start, i))
            start = i
    tok.enable_padding(pad_id=0)
    t_tok = t_fwd = 0.0
    padded = 0
    cpu0 = time.process_time()
    with torch.inference_mode():
        warm = tok.encode_batch(texts[:8])
        model(input_ids=torch.tensor([e.ids for e in warm]),
              attention_mask=torch.tensor([e.attention_mask for e in warm]))
        for s, e in bounds:
            t0 = time.perf_counter()
            enc = tok.encode_batch(texts[s:e])
            ids = torch.tensor([e.ids for e in enc])
            mask = torch.tensor([e.attention_mask for e in enc])
            padded += ids.numel()
            t1 = time.perf_counter()
            hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
            if cfg.pooling == "mean":
                pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
            elif cfg.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                pooled = hidden[torch.arange(len(ids)), mask.sum(1) - 1]
            if cfg.normalize:
                pooled = torch.nn.functional.normalize(pooled, dim=-1)
            t_fwd += time.perf_counter() - t1
            t_tok += t1 - t0
    n = len(texts)
    return {"n": n, "batch": batch, "tokenize_qps": n / t_tok, "forward_qps": n / t_fwd,
            "total_qps": n / (t_tok + t_fwd), "cpu_us_per_query": 1e6 * (time.process_time() - cpu0) / n,
            "tokens_per_query": float(np.mean(lengths)), "batches": len(bounds),
            "padded_tokens_per_query": padded / n}


# ----------------------------------------------------------------------- driver


def machine_info() -> dict[str, Any]:
    import numpy
    import safetensors
    import tokenizers

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    info = {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "numpy": numpy.__version__,
            "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__,
            "git_commit": commit}
    try:
        import torch
        import transformers

        info.update(torch=torch.__version__, transformers=transformers.__version__)
    except ImportError:
        pass
    return info


def ensure_bundle(path: Path | None) -> Path:
    if path is not None:
        return path
    if not (DEFAULT_BUNDLE / "lightretriever.json").is_file():
        print(f"building {DEFAULT_BUNDLE} with `lr bundle build` (packaged MiniLM)...", flush=True)
        subprocess.run([sys.executable, "-m", "lr_opensearch.cli", "bundle", "build", "--out",
                        str(DEFAULT_BUNDLE), "--overwrite"], check=True, cwd=REPO)
    return DEFAULT_BUNDLE


def run_worker(args: argparse.Namespace, ids_out: Path) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", "--bundle", str(args.bundle), "--data", str(args.data),
           "--n", str(args.n), "--unique-n", str(args.unique_n), "--repeats", str(args.repeats),
           "--ids-out", str(ids_out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"query-side worker failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ratios(q: dict[str, Any], fwd: dict[str, Any], eb: dict[str, Any]) -> dict[str, float]:
    """Speed-ups of the query encoder over the full forward, and lookup vs embedding_bag."""
    lookup_qps = 1.0 / (1.0 / q["dense_bag_mean"]["qps"] + 1.0 / q["sparse_counts"]["qps"])
    total = q["total_encode_batch"]
    return {
        "encode_step_forward_over_lookup": lookup_qps / fwd["forward_qps"],
        "whole_forward_over_ours_uncached": total["threads2_no_word_cache"]["qps"] / fwd["total_qps"],
        "whole_forward_over_ours_word_cache_warm": total["threads2_word_cache_warm"]["qps"] / fwd["total_qps"],
        "dense_time_over_embedding_bag_1thread": eb["threads1"]["qps"] / eb["ours_bag_mean"]["qps"],
        "dense_time_over_embedding_bag_best": max(eb["threads1"]["qps"], eb["threads2"]["qps"])
        / eb["ours_bag_mean"]["qps"],
    }


def report(res: dict[str, Any]) -> None:
    q, fwd, eb, rt = res["query_side"], res["full_forward"], res["embedding_bag"], res["ratios"]
    row = "  {:<52s} {:>11,.0f} q/s  {:>7.2f} cpu-us/q"
    print(f"queries: {q['unique_queries']} unique from {res['collections']}, repeated to {q['n']}; "
          f"{q['tokens_per_query']:.1f} tokens/query; load average {res['load_average']}")
    print("(a) query encoder (no torch in the process):")
    for name, m in q["tokenize"].items():
        if isinstance(m, dict):
            print(row.format(f"tokenize: {name}", m["qps"], m["cpu_us_per_query"]))
    print(row.format("dense: bag mean (gather + segment mean, 1 thread)", q["dense_bag_mean"]["qps"],
                     q["dense_bag_mean"]["cpu_us_per_query"]))
    print(row.format("sparse: counts (CSR arrays)", q["sparse_counts"]["qps"], q["sparse_counts"]["cpu_us_per_query"]))
    print(row.format("sparse: every {key: count} dict built", q["sparse_dicts_read"]["qps"],
                     q["sparse_dicts_read"]["cpu_us_per_query"]))
    for name, m in q["total_encode_batch"].items():
        print(row.format(f"total encode_batch: {name}", m["qps"], m["cpu_us_per_query"]))
    u = q["unique_text"]
    print(f"  on {u['n']:,} unique pseudo-queries cut from the documents ({u['tokens_per_query']:.1f} "
          "tokens/query), each seen once:")
    for name in ("hf_encode_batch_fast", "encode_batch_started_encoder",
                 "encode_batch_fresh_encoder", "encode_batch_second_pass"):
        print(row.format(f"unique: {name}", u[name]["qps"], u[name]["cpu_us_per_query"]))
    m = q["single_query_encode_warm"]
    print(row.format("encode(): one query at a time, word cache warm", m["qps"], m["cpu_us_per_query"]))
    print(f"  word cache: {q['tokenize']['word_cache_chunks']} chunks; checks {q['checks']}")
    mem = q["memory"]
    last = mem[f"after_benchmarks_{q['n']}_query_batches"]
    print(f"  query-side RSS: {mem['after_imports']['rss_mb']:.0f} MB after imports, "
          f"{mem['after_bundle_load']['rss_mb']:.0f} MB after bundle load, "
          f"{mem['serving_encoder_warm']['rss_mb']:.0f} MB with a warm encoder (serving), peak "
          f"{last['peak_rss_mb']:.0f} MB while benchmarking {q['n']}-query batches; "
          f"torch/transformers loaded: {q['heavy_modules_loaded'] or 'no'}")
    print(f"(b) full forward ({fwd['n']} queries, batch {fwd['batch']}, 2 threads): tokenize "
          f"{fwd['tokenize_qps']:,.0f} q/s, forward {fwd['forward_qps']:,.0f} q/s, total {fwd['total_qps']:,.0f} q/s "
          f"({fwd['cpu_us_per_query']:,.0f} cpu-us/q, {fwd['tokens_per_query']:.1f} tokens/query, "
          f"{fwd['padded_tokens_per_query']:.1f} with padding, {fwd['batches']} batches)")
    gbps = eb["gathered_bytes_per_query"] / 1e9
    print(f"(c) same ids, rounds interleaved: torch embedding_bag mean 1 thread {eb['threads1']['qps']:,.0f} q/s "
          f"({eb['threads1']['qps'] * gbps:.1f} GB/s of rows), 2 threads {eb['threads2']['qps']:,.0f} q/s; "
          f"our bag_mean {eb['ours_bag_mean']['qps']:,.0f} q/s ({eb['ours_bag_mean']['qps'] * gbps:.1f} GB/s); "
          f"max |diff| {eb['max_abs_diff_vs_ours']:.1e}")
    print("ratios:")
    for name, value in rt.items():
        print(f"  {name:<45s} {value:8.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", type=Path, default=None)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--n", type=int, default=65536)
    parser.add_argument("--unique-n", type=int, default=65536,
                        help="unique pseudo-queries cut from the documents (default 65536)")
    parser.add_argument("--forward-n", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "query_encode.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--ids-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    args.bundle = ensure_bundle(args.bundle)
    unique, counts = load_queries(args.data)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        ids_file = Path(tmp) / "ids.npz"
        query_side = run_worker(args, ids_file)
        ids = dict(np.load(ids_file))
    from lr_opensearch.bundle import load_bundle

    bundle = load_bundle(args.bundle)
    eb = embedding_bag_reference(bundle, ids, args.repeats)
    data = (unique * (args.n // len(unique) + 1))[: args.n]
    fwd = full_forward(bundle, data[:: max(1, args.n // args.forward_n)][: args.forward_n], args.batch)
    res = {"bundle": str(args.bundle), "bundle_id": bundle.bundle_id, "collections": counts,
           "load_average": [round(x, 2) for x in load_before], "machine": machine_info(),
           "query_side": query_side, "embedding_bag": eb, "full_forward": fwd}
    res["ratios"] = ratios(query_side, fwd, eb)
    res["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report(res)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
