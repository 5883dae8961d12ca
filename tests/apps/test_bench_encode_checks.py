"""Issue 47's checks in the CPU encoding bench (bench/encode_checks.py, bench/onnx_variants.py):
an int8 graph is trusted only when it quantises the float32 graph's own weights; the sparse
scores, the equality and the int8 gate on hand-computed cases."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from encode_checks import beyond_ties, equal, int8_gate, sparse_scores  # noqa: E402
from onnx_variants import check_int8_graph  # noqa: E402


def _graph(path: Path, weight: np.ndarray, bias: np.ndarray) -> Path:
    """A float32 ``x @ weight + bias`` graph, large enough for ``quantize_dynamic``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, weight.shape[1]])],
        [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(bias, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, str(path))
    return path


def test_an_int8_graph_is_checked_against_the_float32_weights(tmp_path: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 32)).astype(np.float32)
    bias = rng.standard_normal(32).astype(np.float32)
    fp32 = _graph(tmp_path / "fp32.onnx", weight, bias)
    int8 = tmp_path / "int8.onnx"
    quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)

    ours = check_int8_graph(int8, fp32)
    assert ours["mismatched"] == [] and ours["equal"] == 1 and ours["quantized"] == 1
    assert ours["max_gap_steps"] <= 0.5 + 1e-3

    other = _graph(tmp_path / "other.onnx", weight + 0.05, bias)  # another model's weights
    assert check_int8_graph(int8, other)["mismatched"] == ["w"]
    moved = _graph(tmp_path / "moved.onnx", weight, bias + 1.0)  # an unquantised tensor differs
    assert check_int8_graph(int8, moved)["mismatched"] == ["b"]


def test_sparse_scores_are_the_inner_products() -> None:
    queries = [{"a": 1.0, "b": 2.0}, {"z": 1.0}]
    docs = [{"a": 3.0}, {"b": 0.5, "c": 9.0}, {}]
    assert sparse_scores(queries, docs).tolist() == [[3.0, 1.0, 0.0], [0.0, 0.0, 0.0]]


def _variant(cos: float, terms: int, gap: float, **ndcg: float) -> dict:
    base = {"lr-dense": 0.4, "lr-sparse": 0.5, "lr-hybrid": 0.6, "full-dense": 0.7}
    return {"dense_cos_min": cos, "sparse_terms_differing": terms, "sparse_weight_gap_max": gap,
            "ndcg@10_by_split": {"test": {**base, **ndcg}, "train": dict(base)}}


@pytest.mark.parametrize(("cos", "terms", "gap", "expected"), [
    (0.999995, 0, 1e-4, True), (0.99998, 0, 0.0, False), (1.0, 1, 0.0, False), (1.0, 0, 2e-4, False)])
def test_equality_needs_every_criterion(cos: float, terms: int, gap: float, expected: bool) -> None:
    assert equal(_variant(cos, terms, gap)) is expected


def test_a_swap_at_the_full_top_k_boundary_inside_the_weight_gap_is_a_tie() -> None:
    """SciFact 1286352: the 128th term is 7730 at 1.4780086 on torch, 20932 at 1.4780083 on
    ONNX Runtime; a swap inside the float noise at the last place is a tie, nothing else is."""
    torch_side = {1: 3.0, 2: 2.0, 7730: 1.4780086}
    onnx_side = {1: 3.0, 2: 2.0, 20932: 1.4780083}
    assert beyond_ties(torch_side, onnx_side) == 0
    assert equal({**_variant(1.0, 2, 3e-7), "sparse_terms_beyond_ties": 0})
    assert beyond_ties(torch_side, {1: 3.0, 2: 2.0, 20932: 1.47}) == 2  # apart by more than the gap
    assert beyond_ties({1: 3.0, 2: 2.0, 7: 1.0}, {1: 3.0, 9: 2.0, 7: 1.0}) == 2  # not at the boundary
    assert beyond_ties({1: 3.0, 2: 2.0}, {1: 3.0, 2: 2.0, 20932: 2.0}) == 1  # the top-k is not full
    assert not equal({**_variant(1.0, 2, 3e-7), "sparse_terms_beyond_ties": 2})


def test_the_int8_gate_takes_the_worst_gap_of_every_split_and_run() -> None:
    ref = _variant(1.0, 0, 0.0)
    near = int8_gate(_variant(0.9, 9, 0.1, **{"lr-sparse": 0.504}), ref)
    assert near["option"] and near["default"] and near["option_gap_max"] == pytest.approx(0.004)
    dense_leg = int8_gate(_variant(0.9, 9, 0.1, **{"full-dense": 0.69}), ref)
    assert dense_leg["option"] and not dense_leg["default"]
    assert dense_leg["default_gap_max"] == pytest.approx(0.01)
    hybrid = int8_gate(_variant(0.9, 9, 0.1, **{"lr-hybrid": 0.594}), ref)
    assert not hybrid["option"] and not hybrid["default"]
