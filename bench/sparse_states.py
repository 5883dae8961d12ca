"""Cache the sparse projection's inputs of a collection's documents (issue 48, 1b):
``W/<c>/states.npy`` (float16 [sum T_d, H]), ``tokens.npy`` (int32 [sum T_d]) and
``offsets.npy`` ([N + 1]), by the packaged MiniLM (``DocEncoder.encode_states``), in the
corpus's order; ``W/<c>/states.json`` records the seconds.

    python3 bench/sparse_states.py --work W --collection scifact
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from sparse_fit import DATA, load_encoder  # noqa: E402

from lr_opensearch.evaluation.beir import iter_jsonl  # noqa: E402
from lr_opensearch.instructions import document_text  # noqa: E402

logger = logging.getLogger("sparse_states")


def cache_states(encoder: object, name: str, work: Path, chunk: int = 256) -> None:
    corpus = next((DATA / name).glob("corpus.jsonl*"))
    texts = [document_text(r.get("title") or "", r.get("text") or "") for _, r in iter_jsonl(corpus)]
    t0 = time.perf_counter()
    states, tokens = [], []
    for s in range(0, len(texts), chunk):
        st, tk = encoder.encode_states(texts[s : s + chunk])  # type: ignore[attr-defined]
        states += st
        tokens += tk
        logger.info("%s: %d / %d documents, %.0f s", name, len(states), len(texts), time.perf_counter() - t0)
    out = work / name
    out.mkdir(parents=True, exist_ok=True)
    np.save(out / "states.npy", np.concatenate(states))
    np.save(out / "tokens.npy", np.concatenate(tokens))
    np.save(out / "offsets.npy", np.concatenate([[0], np.cumsum([len(t) for t in tokens])]).astype(np.int64))
    (out / "states.json").write_text(json.dumps({"seconds": time.perf_counter() - t0, "documents": len(texts)}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--collection", action="append", default=[])
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    encoder = load_encoder()
    for name in args.collection or ["scifact"]:
        cache_states(encoder, name, args.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
