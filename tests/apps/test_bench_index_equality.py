"""bench/index_equality.py: issue 47's equality read from two indexes' stored vectors, and
the engine's own resolution of a rank_features weight, on hand-computed cases."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from encode_checks import equal  # noqa: E402
from index_equality import compare, feature_value  # noqa: E402


@pytest.mark.parametrize(("weight", "engine"), [
    (1.0, 1.0),
    (1.0 + 2**-8, 1.0 + 2**-8),  # the 8th mantissa bit is kept
    (1.0 + 2**-9, 1.0),  # the 9th is not: truncated
    (1.0 + 2**-8 - 2**-20, 1.0),  # truncated, not rounded
    (3.0 + 3 * 2**-8, 3.0 + 2**-7),  # one step at 3.0 is 2^-7
])
def test_the_engine_keeps_nine_significant_bits_of_a_feature(weight: float, engine: float) -> None:
    assert feature_value(weight) == engine


def _docs(sparse: dict[str, float], dense: list[float]) -> tuple[list[float], dict[str, float]]:
    return dense, sparse


def test_compare_reads_the_criterion_and_the_engine_steps() -> None:
    ref = {"a": _docs({"x": 1.0, "y": 2.0}, [1.0, 0.0]), "b": _docs({"x": 0.5}, [0.0, 1.0]),
           "c": _docs({"z": 1.0}, [1.0, 1.0])}
    # "a": weights within 1e-6, but y straddles an engine step (2.0 - 1e-6 truncates to 2 - 2^-8)
    other = {"a": _docs({"x": 1.0, "y": 2.0 - 1e-6}, [1.0, 0.0]), "b": _docs({"x": 0.5}, [0.0, 1.0])}
    got = compare(ref, other)
    assert got["documents"] == 2 and got["only_in_reference"] == 1 and got["only_in_other"] == 0
    assert got["dense_bit_identical"] == 2 and got["dense_cos_min"] == pytest.approx(1.0)
    assert got["sparse_terms_differing"] == 0 and got["sparse_weight_gap_max"] == pytest.approx(1e-6)
    assert got["sparse_terms_common"] == 3 and got["engine_steps_differing"] == 1
    assert got["engine_gap_max"] == pytest.approx(2**-8)
    assert equal(got)

    other["b"] = _docs({"w": 0.3}, [0.0, 1.0])  # another term, 0.2 from the boundary: no tie
    moved = compare(ref, other)
    assert moved["sparse_terms_differing"] == 2 and moved["sparse_terms_beyond_ties"] == 2
    assert moved["documents_with_terms_differing"] == 1 and not equal(moved)
    other["b"] = _docs({"x": 0.5}, [0.1, 1.0])
    assert compare(ref, other)["dense_cos_min"] == pytest.approx(1 / np.sqrt(1.01))
    with pytest.raises(SystemExit, match="share no document"):
        compare(ref, {"q": _docs({}, [1.0, 0.0])})
