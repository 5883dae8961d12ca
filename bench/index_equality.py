"""Issue 47's equality on two indexes of one corpus: every document's stored vectors.

    python bench/index_equality.py --url URL --index A --index B [--out FILE]

Reads ``lr_dense`` and ``lr_sparse`` of every document of each index (``_source``, scanned)
and compares B with A (the reference: torch's index) by ``encode_checks``' criterion: dense
cosine >= ``EQUAL_COSINE``, the same kept sparse terms except boundary ties, weights within
``EQUAL_WEIGHT_GAP``. The ``_source`` values are the float32 weights as written.

The engine scores with coarser ones: a ``rank_features`` weight is a Lucene ``FeatureField``,
indexed as the top 17 bits of its float32 (sign, exponent and 8 mantissa bits: 9 significant
bits, a step of 2^-8 of the weight's power of two; 0.0039 at 1.0, truncated, not rounded).
So two weights within 1e-6 can still score one step apart when they straddle a step; the
bench counts those (``engine_steps_differing``) and the largest gap in engine values.
Writes JSON (``--out``) and prints one line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _sibling(name: str) -> Any:
    """A sibling module, by name so that mypy sees one module, not two names of it."""
    try:
        return importlib.import_module(name)  # run as a script: bench/ on sys.path
    except ImportError:  # imported as bench.index_equality
        return importlib.import_module(f"bench.{name}")


_checks = _sibling("encode_checks")

FEATURE_DROPPED_BITS = 15  # Lucene FeatureField: the term frequency is the float's bits >>> 15


def feature_value(weight: float) -> float:
    """The value the engine scores a ``rank_features`` weight with (module doc)."""
    bits = np.float32(weight).view(np.uint32) >> np.uint32(FEATURE_DROPPED_BITS)
    return float((bits << np.uint32(FEATURE_DROPPED_BITS)).view(np.float32))


def read_vectors(client: Any, index: str) -> dict[str, tuple[list[float], dict[str, float]]]:
    """Document id -> (dense, sparse {key: weight}) of every document of ``index``."""
    from opensearchpy import helpers

    from lr_opensearch.engine.adapter import DENSE_FIELD, SPARSE_FIELD

    out = {}
    for hit in helpers.scan(client, index=index, size=500, _source=[DENSE_FIELD, SPARSE_FIELD],
                            query={"query": {"match_all": {}}}):
        src = hit["_source"]
        out[hit["_id"]] = (src[DENSE_FIELD], src.get(SPARSE_FIELD) or {})
    return out


def compare(ref: dict[str, tuple[list[float], dict[str, float]]],
            other: dict[str, tuple[list[float], dict[str, float]]]) -> dict[str, Any]:
    """``other``'s vectors against ``ref``'s on the documents both hold (sorted ids)."""
    ids = sorted(ref.keys() & other.keys())
    if not ids:
        raise SystemExit("the two indexes share no document id: are they of the same corpus?")
    dense = np.asarray([other[i][0] for i in ids], np.float32)
    base_dense = np.asarray([ref[i][0] for i in ids], np.float32)
    sparse, base_sparse = [other[i][1] for i in ids], [ref[i][1] for i in ids]
    gaps = _checks.vector_gaps(dense, base_dense, sparse, base_sparse)
    engine = [(feature_value(a[t]), feature_value(b[t]))
              for a, b in zip(sparse, base_sparse, strict=True) for t in a.keys() & b.keys()]
    return {
        "documents": len(ids), "only_in_reference": len(ref.keys() - other.keys()),
        "only_in_other": len(other.keys() - ref.keys()),
        "dense_bit_identical": int(sum(np.array_equal(a, b) for a, b in zip(dense, base_dense, strict=True))),
        **gaps,
        "documents_with_terms_differing": sum(1 for a, b in zip(sparse, base_sparse, strict=True)
                                              if a.keys() != b.keys()),
        "sparse_terms_common": len(engine),
        "engine_steps_differing": sum(1 for x, y in engine if x != y),
        "engine_gap_max": max((abs(x - y) for x, y in engine), default=0.0),
    }


def main(argv: list[str] | None = None) -> int:
    from lr_opensearch.engine.client import connect

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--url", required=True)
    p.add_argument("--index", action="append", required=True,
                   help="twice: the reference (torch) index, then the other (ONNX Runtime)")
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = p.parse_args(argv)
    if len(args.index) != 2:
        p.error(f"--index takes two indexes (the reference, then the other), got {len(args.index)}")
    client = connect(args.url, timeout=300)
    ref, other = (read_vectors(client, i) for i in args.index)
    result = {"reference": args.index[0], "other": args.index[1], **compare(ref, other)}
    result["equal"] = (_checks.equal(result) and result["only_in_reference"] == 0
                       and result["only_in_other"] == 0)
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{args.index[1]} against {args.index[0]}: {result['documents']} documents, equal "
          f"{'yes' if result['equal'] else 'NO'}; dense cos min {result['dense_cos_min']:.10f} "
          f"({result['dense_bit_identical']} bit-identical); sparse terms differing "
          f"{result['sparse_terms_differing']} in {result['documents_with_terms_differing']} documents "
          f"({result['sparse_terms_beyond_ties']} beyond boundary ties); max weight gap "
          f"{result['sparse_weight_gap_max']:.2e}; engine values one step apart "
          f"{result['engine_steps_differing']} of {result['sparse_terms_common']} (max gap "
          f"{result['engine_gap_max']:.2e})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
