"""Cross-device negatives: 2 gloo processes compute the loss of the concatenated batch."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from trainer.config import LossSettings
from trainer.objective import Objective, Representations

B, G, H, V, WORLD = 2, 2, 8, 16, 2  # per-rank queries, docs per query, dims, vocabulary, ranks
SETTINGS = LossSettings(symmetric_weight=1.0, kl_weight=1.0, flops_max=1e-2, flops_warmup_steps=0)


def _global() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    n = B * WORLD
    return {"query_dense": torch.randn(n, H, generator=g), "query_counts": torch.rand(n, V, generator=g).round(),
            "query_symmetric": torch.randn(n, H, generator=g), "doc_dense": torch.randn(n * G, H, generator=g),
            "doc_sparse": torch.rand(n * G, V, generator=g)}


def _rows(name: str, rank: int) -> slice:
    per = B * G if name.startswith("doc") else B
    return slice(rank * per, (rank + 1) * per)


def _worker(rank: int, init: str, out: str) -> None:
    torch.distributed.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    full = _global()
    local = {k: v[_rows(k, rank)].clone().requires_grad_() for k, v in full.items()}
    loss, logs = Objective(SETTINGS, normalize=True)(Representations(**local), step=3)
    loss.backward()
    Path(out, f"rank{rank}.json").write_text(json.dumps({
        "loss": float(loss), "logged": logs["loss"],
        "grads": {k: v.grad.tolist() for k, v in local.items()}}))
    torch.distributed.destroy_process_group()


@pytest.mark.timeout(300)
def test_two_ranks_see_every_negative_and_match_the_single_process_loss(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(f"file://{tmp_path / 'init'}", str(tmp_path)), nprocs=WORLD, join=True)
    full = {k: v.clone().requires_grad_() for k, v in _global().items()}
    single = replace(SETTINGS, cross_device_negatives=False)
    ref, _ = Objective(single, normalize=True)(Representations(**full), step=3)
    ref.backward()
    # a rank alone (its own negatives only) gives another loss: the check can fail
    own = {k: v[_rows(k, 0)].detach() for k, v in _global().items()}
    alone, _ = Objective(single, normalize=True)(Representations(**own), step=3)
    assert abs(float(alone.detach()) - float(ref.detach())) > 1e-3
    for rank in range(WORLD):
        got = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert got["logged"] == pytest.approx(float(ref.detach()), rel=1e-5)
        assert got["loss"] == pytest.approx(WORLD * float(ref.detach()), rel=1e-5)
        for name, grad in got["grads"].items():
            # DDP averages over ranks: (world x loss) gradient / world = the global gradient
            expected = full[name].grad[_rows(name, rank)]
            torch.testing.assert_close(torch.tensor(grad) / WORLD, expected, rtol=1e-4, atol=1e-6)
