"""Fuzzed queries through the model-free query encoder: 100,000 by default.

    python bench/fuzz_queries.py [--bundle DIR] [--n 100000] [--seed 0]

Texts are drawn from seven kinds (random code points of every class, surrogates and
control characters included; very long texts; only stopwords / punctuation; emoji and
mixed scripts; real queries with random characters spliced in; whitespace only; the
empty text). Every text goes through ``QueryEncoder.encode`` and, in batches of 256,
``encode_batch`` (a batch with a bad text is refused as a whole with a typed error naming
it; its texts are then counted one by one). Reports per kind: encoded, typed errors
(``QueryError``), failures (any other exception: 0 allowed) and non-finite outputs
(0 allowed), and the throughput. Without ``--bundle`` it uses results/bundles/minilm
(built with ``lr bundle build`` if absent, as bench/query_encode.py does). Writes
results/bench/fuzz_queries.json; exit status 1 if anything failed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

KINDS = ("codepoints", "long", "stop_punct", "emoji_scripts", "spliced", "whitespace", "empty")
EMOJI = ["\U0001f600", "\U0001f680", "\u2764\ufe0f", "\U0001f44d\U0001f3fd", "\U0001f1e9\U0001f1ea",
         "\U0001f9d1\u200d\U0001f4bb"]
SCRIPTS = ["boundary layer", "Grenzschicht", "пограничный слой", "境界層", "طبقة حدية", "סף",
           "परत", "경계층", "ขอบเขต", "Ωμέγα"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»—–…·•§¶")


def real_queries(data: Path) -> list[str]:
    out: list[str] = []
    for path in sorted(data.glob("*/queries.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            out += [json.loads(line)["text"] for line in f if line.strip()]
    return out or ["what causes tides", "boundary layer heat transfer"]


def random_char(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.05:
        return chr(rng.randint(0xD800, 0xDFFF))  # lone surrogate
    if pick < 0.15:
        return chr(rng.randint(0, 0x1F))  # control
    if pick < 0.45:
        return chr(rng.randint(0x20, 0x7E))
    return chr(rng.randint(0x80, 0x10FFFF))


def make_text(kind: str, rng: random.Random, real: list[str], stop: list[str]) -> str:
    if kind == "codepoints":
        return "".join(random_char(rng) for _ in range(rng.randint(1, 80)))
    if kind == "long":
        return " ".join(rng.choice(real) for _ in range(rng.randint(100, 400)))
    if kind == "stop_punct":
        return " ".join(rng.choice(stop + PUNCT) for _ in range(rng.randint(1, 20)))
    if kind == "emoji_scripts":
        return "".join(rng.choice(EMOJI + SCRIPTS + PUNCT) for _ in range(rng.randint(1, 15)))
    if kind == "spliced":
        text = list(rng.choice(real))
        for _ in range(rng.randint(1, 5)):
            text.insert(rng.randint(0, len(text)), random_char(rng))
        return "".join(text)
    if kind == "whitespace":
        return "".join(rng.choice(" \t\n\r\x0b\x0c\u00a0\u2003\u3000") for _ in range(rng.randint(1, 10)))
    return ""


def finite(q: Any) -> bool:
    return bool(np.all(np.isfinite(np.asarray(q.dense)))) and all(
        math.isfinite(w) and w > 0 for w in q.sparse.values())


def main(argv: list[str] | None = None) -> int:
    from query_encode import DEFAULT_DATA, ensure_bundle

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.errors import QueryError
    from lr_opensearch.query import QueryEncoder
    from lr_opensearch.query.stopwords import ENGLISH_STOPWORDS

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", type=Path, default=None)
    p.add_argument("--data", type=Path, default=DEFAULT_DATA)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "fuzz_queries.json")
    args = p.parse_args(argv)
    bundle = load_bundle(ensure_bundle(args.bundle))
    encoder = QueryEncoder(bundle)
    rng = random.Random(args.seed)
    real, stop = real_queries(args.data), sorted(ENGLISH_STOPWORDS)
    items = [(kind, make_text(kind, rng, real, stop))
             for kind in (rng.choice(KINDS) for _ in range(args.n))]
    counts: dict[str, Counter[str]] = {k: Counter() for k in KINDS}
    failures: list[dict[str, str]] = []
    t0 = time.perf_counter()
    for kind, text in items:
        try:
            q = encoder.encode(text)
        except QueryError:
            counts[kind]["typed"] += 1
            continue
        except Exception as exc:  # noqa: BLE001 - what this bench exists to find
            counts[kind]["failed"] += 1
            failures.append({"kind": kind, "text": repr(text[:200]), "error": repr(exc)})
            continue
        counts[kind]["encoded" if finite(q) else "non_finite"] += 1
    single_s = time.perf_counter() - t0
    batch_typed = batch_failed = 0
    t0 = time.perf_counter()
    texts = [t for _, t in items]
    for s in range(0, len(texts), 256):
        try:
            batch = encoder.encode_batch(texts[s : s + 256])
            if not np.all(np.isfinite(batch.dense)):
                batch_failed += 1
        except QueryError:
            batch_typed += 1
        except Exception as exc:  # noqa: BLE001
            batch_failed += 1
            failures.append({"kind": "batch", "text": f"batch at {s}", "error": repr(exc)})
    batch_s = time.perf_counter() - t0
    total = Counter()
    for c in counts.values():
        total.update(c)
    report = {
        "bundle": str(bundle.path), "n": args.n, "seed": args.seed,
        "per_kind": {k: dict(c) for k, c in counts.items()}, "total": dict(total),
        "encode_s": single_s, "encode_qps": args.n / single_s,
        "batches": math.ceil(args.n / 256), "batches_refused_typed": batch_typed,
        "batch_failures": batch_failed, "encode_batch_s": batch_s,
        "failures": failures[:20],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"{args.n} fuzzed queries through QueryEncoder.encode ({bundle.path.name}): "
          f"{total['encoded']} encoded, {total['typed']} typed errors (QueryError), "
          f"{total['failed']} failures, {total['non_finite']} non-finite; "
          f"{args.n / single_s:,.0f} queries/s")
    for kind in KINDS:
        c = counts[kind]
        print(f"  {kind:<14} encoded {c['encoded']:>6}  typed {c['typed']:>6}  "
              f"failed {c['failed']}  non-finite {c['non_finite']}")
    print(f"encode_batch (256 per batch): {report['batches']} batches, {batch_typed} refused "
          f"with a typed error naming the bad text, {batch_failed} failures; {batch_s:.1f} s")
    for f in failures[:5]:
        print("FAILURE", f)
    print(f"wrote {args.out}")
    return 1 if (total["failed"] or total["non_finite"] or batch_failed) else 0


if __name__ == "__main__":
    sys.exit(main())
