"""BRIDGE-Embed losses (issue 19): S-Matryoshka, RRF-shaped hybrid, self-distillation and
SoftTopK, each against values computed by hand on tiny cases."""

from __future__ import annotations

import math

import pytest
import torch

from lr_opensearch.errors import ConfigError, TrainingError
from lr_opensearch.model.medusa import soft_top_k, sparse_scores
from trainer.losses import LOSSES, build_loss, soft_rank

E = math.e


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_the_bridge_losses_are_registered_by_name():
    for name in ("s_matryoshka", "rrf_hybrid", "self_distill"):
        assert name in LOSSES
    with pytest.raises(ConfigError, match="s_matryoshka"):
        build_loss("s_matryoshka_typo")
    with pytest.raises(ConfigError, match="size_weights"):
        build_loss("s_matryoshka", sizes=(2, 4), size_weights=(1.0,))


def test_soft_top_k_keeps_the_k_largest_normalised_and_skips_excluded():
    w = torch.tensor([[0.1, 0.9, 0.3, 0.8, 0.5], [2.0, 1.0, 0.0, 3.0, -1.0]])
    values, indices = soft_top_k(w, 2, temperature=1.0)
    assert indices.tolist() == [[1, 3], [3, 0]]
    assert torch.allclose(values.norm(dim=-1), torch.ones(2))
    # softmax's denominator cancels under the L2 norm: values are exp(h) over their norm
    want = torch.tensor([math.exp(0.9), math.exp(0.8)])
    assert torch.allclose(values[0], want / want.norm())
    values, indices = soft_top_k(w, 3, temperature=0.5, excluded=[1, 3])
    assert indices.tolist() == [[4, 2, 0], [0, 2, 4]]
    assert (values > 0).all()
    values, _ = soft_top_k(w, 99, temperature=1.0, excluded=[0])
    assert values.shape == (2, 4)  # k is clipped to the vocabulary left


def test_soft_top_k_gradient_passes_gradcheck():
    torch.manual_seed(0)
    w = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: soft_top_k(x, 3, temperature=0.5)[0], (w,))


def test_s_matryoshka_by_hand():
    # V = 4, one query (tokens 0 and 2), G = 2; tau = 1, k = 2, T = 1, lambda = 0.1
    query = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    docs = torch.tensor([[2.0, 0.0, 1.0, 0.0],    # top 2: ids 0, 2 -> (e^2, e) / norm
                         [0.0, 3.0, 0.0, 1.0]])   # top 2: ids 1, 3 -> no query token
    pos = (E**2 + E) / math.sqrt(E**4 + E**2)
    l1 = (pos + (E**3 + E) / math.sqrt(E**6 + E**2)) / 2
    ce = math.log(1.0 + math.exp(-pos))
    loss = build_loss("s_matryoshka", sizes=(2,), tau=1.0, temperature=1.0, l1=0.1)
    out = loss(query, docs)
    assert out.loss.item() == pytest.approx(ce + 0.1 * l1, rel=1e-6)
    assert out.logs["k2"] == pytest.approx(ce, rel=1e-6)
    # two sizes, weighted: k = 1 keeps id 0 only (score 1) for the positive, id 1 for the negative
    two = build_loss("s_matryoshka", sizes=(1, 2), size_weights=(0.25, 0.75), tau=1.0,
                     temperature=1.0, l1=0.0)
    want = 0.25 * math.log(1.0 + math.exp(-1.0)) + 0.75 * ce
    assert two(query, docs).loss.item() == pytest.approx(want, rel=1e-6)
    assert loss.scores(query, docs).tolist()[0] == pytest.approx([pos, 0.0], rel=1e-6)


def test_sparse_scores_equal_the_dense_dot_product():
    torch.manual_seed(1)
    q, d = torch.rand(3, 20), torch.rand(5, 20)
    values, indices = soft_top_k(d, 6, temperature=0.2)
    dense = torch.zeros(5, 20).scatter(1, indices, values)
    assert torch.allclose(sparse_scores(q, values, indices), q @ dense.T, atol=1e-6)


def test_soft_rank_tends_to_the_hard_rank():
    scores = torch.tensor([[0.3, 0.9, 0.1, 0.5]])
    assert soft_rank(scores, 1e-4).tolist() == [[3.0, 1.0, 4.0, 2.0]]
    r = soft_rank(torch.tensor([[1.0, 0.0]]), 1.0)
    assert r.tolist()[0] == pytest.approx([1 + _sigmoid(-1.0), 1 + _sigmoid(1.0)])


def test_rrf_hybrid_by_hand():
    loss = build_loss("rrf_hybrid", temperature=1.0, rank_constant=60.0, margin=0.01)
    # legs disagree symmetrically: equal RRF for positive and negative -> the margin
    out = loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]]), group=2)
    assert out.loss.item() == pytest.approx(0.01, rel=1e-5)
    # sparse prefers the positive by 1, dense the negative by 2
    rp = 1 / (60 + 1 + _sigmoid(-1.0)) + 1 / (60 + 1 + _sigmoid(2.0))
    rn = 1 / (60 + 1 + _sigmoid(1.0)) + 1 / (60 + 1 + _sigmoid(-2.0))
    out = loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 2.0]]), group=2)
    assert out.loss.item() == pytest.approx(max(0.0, rn - rp + 0.01), rel=1e-5)
    # both legs put the positive far ahead: RRF gap 2 (1/61 - 1/62) > margin 1e-4, no loss
    small = build_loss("rrf_hybrid", temperature=1.0, margin=1e-4)
    far = small(torch.tensor([[50.0, 0.0]]), torch.tensor([[50.0, 0.0]]), group=2)
    assert far.loss.item() == 0.0 and far.logs["violations"] == 0.0
    with pytest.raises(TrainingError, match="one shape"):
        loss(torch.zeros(1, 2), torch.zeros(1, 3), group=2)


def test_rrf_hybrid_gradient_raises_the_positive():
    sparse = torch.tensor([[0.2, 0.5, 0.1, 0.4]], requires_grad=True)
    dense = torch.tensor([[0.1, 0.3, 0.2, 0.0]], requires_grad=True)
    build_loss("rrf_hybrid", temperature=0.1)(sparse, dense, group=2).loss.backward()
    assert sparse.grad is not None and dense.grad is not None
    assert sparse.grad[0, 0] < 0 and dense.grad[0, 0] < 0  # descent raises the positive's score


def test_self_distill_by_hand_and_zero_for_equal_heads():
    loss = build_loss("self_distill")
    student = torch.tensor([[0.0, 0.0]])
    teacher = torch.tensor([[math.log(3.0), 0.0]])
    want = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert loss(student, teacher).loss.item() == pytest.approx(want, rel=1e-6)
    same = torch.randn(3, 11)
    assert loss(same, same.clone()).loss.item() == pytest.approx(0.0, abs=1e-7)
    with pytest.raises(TrainingError, match="teacher"):
        loss(student, None)
