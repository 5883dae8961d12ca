"""Each training loss against a hand-computed case, plus the FLOPs warm-up schedule."""

from __future__ import annotations

import math

import pytest
import torch

from lr_opensearch.errors import ConfigError, TrainingError
from trainer.losses import (
    LOSSES,
    ContrastiveLoss,
    FlopsLoss,
    KLAlignmentLoss,
    MatryoshkaLoss,
    build_loss,
    flops,
    quadratic_warmup,
)

E = math.e


def t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_contrastive_in_batch_and_hard_negatives():
    # 2 queries x 2 docs each: q0 -> d0 (pos), d1 (hard neg); q1 -> d2 (pos), d3 (hard neg)
    q = t([[1, 0], [0, 1]])
    d = t([[1, 0], [0, 0], [0, 1], [1, 1]])
    out = ContrastiveLoss(temperature=0.5)(q, d)
    # q0 logits [2, 0, 0, 2] target 0; q1 logits [0, 0, 2, 2] target 2: both log(2e^2 + 2) - 2
    assert out.loss.item() == pytest.approx(math.log(2 * E**2 + 2) - 2, rel=1e-6)


def test_contrastive_uses_every_document_of_the_batch():
    # the other query's positive is an in-batch negative: moving it changes the loss
    q = t([[1, 0], [0, 1]])
    far = ContrastiveLoss(temperature=1.0)(q, t([[1, 0], [0, 1]])).loss.item()
    near = ContrastiveLoss(temperature=1.0)(q, t([[1, 0], [1, 0]])).loss.item()
    assert far == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)
    # q0: logits [1, 1] -> log 2; q1: logits [0, 0] -> log 2
    assert near == pytest.approx(math.log(2), rel=1e-6)


def test_contrastive_cosine_and_accuracy():
    q = t([[3, 4]])
    d = t([[3, 4], [4, -3]])  # cosines 1 and 0
    out = ContrastiveLoss(temperature=1.0, normalize=True)(q, d)
    assert out.loss.item() == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)
    assert out.logs["accuracy"] == 1.0


def test_contrastive_rejects_ragged_groups_and_bad_temperature():
    with pytest.raises(TrainingError, match="whole groups"):
        ContrastiveLoss()(t([[1, 0], [0, 1]]), t([[1, 0], [0, 1], [1, 1]]))
    with pytest.raises(ConfigError, match="temperature"):
        ContrastiveLoss(temperature=0)


def test_flops_penalty_and_gradient():
    w = t([[1, -2], [3, 0]]).requires_grad_()
    value = flops(w)  # mean |w| per column = [2, 1] -> 4 + 1
    assert value.item() == pytest.approx(5.0)
    value.backward()
    # d/dw[n, v] = 2 * mean_v / N * sign(w[n, v])
    assert torch.allclose(w.grad, t([[2.0, -1.0], [2.0, 0.0]]))


def test_flops_warmup_is_quadratic():
    sched = [quadratic_warmup(s, 1e-3, 4000) for s in (0, 1000, 2000, 3000, 4000, 12000)]
    assert sched == pytest.approx([0.0, 6.25e-5, 2.5e-4, 5.625e-4, 1e-3, 1e-3])
    assert quadratic_warmup(5, 0.5, 0) == 0.5


def test_flops_wraps_a_base_loss():
    q = t([[1, 0]])
    d = t([[1, -2], [3, 0]])
    base = ContrastiveLoss(temperature=1.0)
    wrapped = FlopsLoss(base, max_coef=1e-3, warmup_steps=4000)
    out = wrapped(q, d, step=2000)
    # base: logits [1, 3], target 0 -> log(1 + e^2); penalty 5 at coefficient 2.5e-4
    expected_base = math.log(1 + E**2)
    assert out.loss.item() == pytest.approx(expected_base + 2.5e-4 * 5.0, rel=1e-6)
    assert out.logs["base"] == pytest.approx(expected_base, rel=1e-6)
    assert out.logs["flops"] == pytest.approx(5.0)
    assert out.logs["flops_coef"] == pytest.approx(2.5e-4)
    assert wrapped(q, d, step=0).loss.item() == pytest.approx(expected_base, rel=1e-6)


def test_matryoshka_averages_the_prefix_losses():
    q = t([[1, 2]])
    d = t([[1, 0], [0, 1]])
    out = MatryoshkaLoss(ContrastiveLoss(temperature=1.0), dims=(1, None))(q, d)
    # width 1: logits [1, 0] -> log(1 + e^-1); full: logits [1, 2] -> log(1 + e)
    first, full = math.log(1 + math.exp(-1)), math.log(1 + E)
    assert out.loss.item() == pytest.approx((first + full) / 2, rel=1e-6)
    assert out.logs == pytest.approx({"dim1": first, "dim_full": full})


def test_matryoshka_renormalises_prefixes():
    q = t([[2, 0, 5]])
    d = t([[3, 9, 0], [-1, 0, 0]])
    out = MatryoshkaLoss(ContrastiveLoss(temperature=1.0, normalize=False), dims=(1,),
                         renormalize=True)(q, d)
    # prefixes [2] -> [1]; docs [3] -> [1], [-1] -> [-1]: logits [1, -1]
    assert out.loss.item() == pytest.approx(math.log(1 + math.exp(-2)), rel=1e-6)


def test_kl_alignment_matches_the_closed_form_and_spares_the_teacher():
    q = t([[1, 0]]).requires_grad_()
    teacher = t([[0, 1]]).requires_grad_()
    d = t([[1, 0], [0, 1]])
    out = KLAlignmentLoss(temperature=1.0)(q, d, teacher=teacher)
    # teacher softmax([0, 1]) vs student softmax([1, 0]): KL = (e - 1) / (e + 1)
    assert out.loss.item() == pytest.approx((E - 1) / (E + 1), rel=1e-6)
    out.loss.backward()
    assert q.grad is not None and q.grad.abs().sum() > 0
    assert teacher.grad is None
    same = KLAlignmentLoss(temperature=0.02)(t([[0.3, 0.1]]), d, teacher=t([[0.3, 0.1]]))
    assert same.loss.item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(TrainingError, match="teacher"):
        KLAlignmentLoss()(q, d)


def test_registry_lists_valid_names():
    assert {"contrastive", "flops", "matryoshka", "kl_alignment"} <= set(LOSSES)  # + later papers'
    assert isinstance(build_loss("contrastive", temperature=0.1), ContrastiveLoss)
    with pytest.raises(ConfigError, match="contrastive, flops, kl_alignment, matryoshka"):
        build_loss("triplet")
    with pytest.raises(ConfigError, match="bad arguments"):
        build_loss("contrastive", temp=1)
