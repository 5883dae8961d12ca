"""The listwise distillation step of the table fit (lr_opensearch.fit.distill)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from tiny_artifacts import SENTENCES

from lr_opensearch.bundle import load_bundle
from lr_opensearch.errors import ConfigError
from lr_opensearch.fit import distill as distill_mod
from lr_opensearch.fit.distill import DEFAULT_DISTILL, DistillConfig, distill_table, teacher_top
from lr_opensearch.fit.ridge import RidgeSolve, fit_table, token_bags


def _problem(seed: int = 0, vocab: int = 80, dim: int = 12, n: int = 2000, m: int = 200):  # noqa: ANN202
    """Queries whose teacher vectors are a non-linear function of their tokens (a ridge
    table cannot match them exactly), and unit document vectors."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 7, n)
    flat = rng.integers(0, vocab - 5, int(lengths.sum()))
    bags = token_bags(flat, lengths, vocab)
    lin = bags @ rng.standard_normal((vocab, dim))
    teacher = np.tanh(2 * lin) + 0.5 * lin ** 2 - 0.5
    teacher /= np.linalg.norm(teacher, axis=1, keepdims=True)
    docs = rng.standard_normal((m, dim))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    e0 = rng.standard_normal((vocab, dim)).astype(np.float32)
    return bags, teacher, docs, e0


def _kl(table: np.ndarray, bags: sp.csr_matrix, teacher: np.ndarray, docs: np.ndarray,
        tau: float) -> float:
    """Mean KL(teacher || student) over all documents (not only the candidates)."""
    t, s = teacher @ docs.T / tau, np.asarray(bags @ table) @ docs.T / tau
    lt = t - np.logaddexp.reduce(t, axis=1, keepdims=True)
    ls = s - np.logaddexp.reduce(s, axis=1, keepdims=True)
    return float(np.mean(np.sum(np.exp(lt) * (lt - ls), axis=1)))


def test_distillation_brings_held_out_rankings_closer_to_the_teacher() -> None:
    bags, teacher, docs, e0 = _problem()
    # a strong prior leaves the ridge table far from the teacher: room for the step
    ridge, _ = fit_table(e0, bags[:1500], teacher[:1500], solve=RidgeSolve(lams=(3.0,)))
    config = DistillConfig(epochs=4, tau=0.1, top=16, random=16, lr=3e-3, batch=64, holdout=0.1)
    out, stats = distill_table(ridge, bags[:1500], teacher[:1500], docs, config)
    held = (bags[1500:], teacher[1500:])
    assert _kl(out, *held, docs, 0.1) < 0.9 * _kl(ridge, *held, docs, 0.1)
    assert stats.top10_agreement_after > stats.top10_agreement_before
    assert stats.loss_last < stats.loss_first and stats.epochs == 4 and stats.candidates == 32
    assert stats.documents == 200 and stats.queries == 1500
    np.testing.assert_array_equal(out[75:], ridge[75:])  # rows of no query: untouched
    assert not np.allclose(out[:75], ridge[:75])
    assert out.dtype == np.float32 and not np.shares_memory(out, ridge)


def test_the_gradient_is_the_kl_gradient() -> None:
    """The sparse step's gradient equals the loss's finite difference, row by row."""
    bags, teacher, docs, _ = _problem(seed=3, n=6, m=30)
    bags, teacher, docs = sp.csr_matrix(bags, dtype=np.float32), teacher.astype(np.float32), docs.astype(np.float32)
    table = np.random.default_rng(1).standard_normal((80, 12)).astype(np.float32)
    cand = np.random.default_rng(2).integers(0, 30, (6, 9))

    class Capture:
        def step(self, _table: np.ndarray, rows: np.ndarray, grad: np.ndarray) -> None:
            self.rows, self.grad = rows, grad

    cap = Capture()
    distill_mod._step(table.copy(), bags, teacher, docs, cand, 0.5, cap)  # type: ignore[arg-type]
    row, col, eps = int(cap.rows[1]), 4, 1e-2
    losses = []
    for sign in (1, -1):
        t = table.astype(np.float64)
        t[row, col] += sign * eps
        losses.append(distill_mod._step(t, bags, teacher, docs, cand, 0.5, Capture()))  # type: ignore[arg-type]
    assert (losses[0] - losses[1]) / (2 * eps) == pytest.approx(cap.grad[1, col], rel=2e-2, abs=1e-5)


def test_teacher_top_is_the_best_k_in_order() -> None:
    rng = np.random.default_rng(0)
    q, d = rng.standard_normal((7, 5)), rng.standard_normal((40, 5))
    top = teacher_top(q, d, 6, chunk=3)
    np.testing.assert_array_equal(top, np.argsort(-(q @ d.T), axis=1)[:, :6])
    assert teacher_top(q, d[:4], 6).shape == (7, 4)


def test_shapes_are_checked() -> None:
    bags, teacher, docs, e0 = _problem(n=50)
    with pytest.raises(ValueError, match="shapes disagree"):
        distill_table(e0, bags, teacher[:10], docs)
    with pytest.raises(ValueError, match="need >= 2 documents"):
        distill_table(e0, bags, teacher, docs[:1])


def test_build_with_fit_distill_records_the_step_and_changes_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny model end to end: `lr bundle build --fit-distill N` refines the fitted table
    and the manifest records it; 0 turns it off; a negative count is refused."""
    from model_fixtures import save_model_dir, tiny_bert

    from lr_opensearch.cli import main
    from lr_opensearch.cli.bundle import distill_setting

    model, tok = tiny_bert()
    model_dir = save_model_dir(model, tok, tmp_path / "ckpt")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps({"_id": f"d{i}", "title": f"Note {i}", "text": s})
                                for i, s in enumerate(SENTENCES)) + "\n")
    tables = {}
    for epochs in (0, 2):
        out = tmp_path / f"b{epochs}"
        assert main(["-q", "bundle", "build", "--model", str(model_dir), "--out", str(out),
                     "--batch-size", "64", "--fit-corpus", str(corpus), "--fit-max-queries", "300",
                     "--fit-distill", str(epochs)]) == 0
        printed = capsys.readouterr().out
        assert ("distilled: 2 epochs" in printed) == (epochs == 2)
        bundle = load_bundle(out)
        tables[epochs] = bundle.table()
        record = bundle.fit["tables"]["default"]["distill"]  # type: ignore[index]
        if epochs == 0:
            assert record is None
        else:
            assert record["epochs"] == 2 and record["documents"] == len(SENTENCES)
            assert record["queries"] == sum(bundle.fit["queries"].values())  # type: ignore[index]
            assert 0 <= record["top10_agreement_after"] <= 1 and record["seconds"] > 0
    assert not np.allclose(tables[0], tables[2])
    with pytest.raises(ConfigError, match="--fit-distill must be >= 0"):
        distill_setting(-1)
    assert distill_setting(0) is None and distill_setting(None) is DEFAULT_DISTILL
    assert distill_setting(5).epochs == 5
