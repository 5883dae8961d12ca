"""2-process DDP (torchrun, gloo on CPU): two steps, and both ranks hold the same parameters.

The ranks draw different micro-batches (and different dropout masks), so without the
gradient all-reduce their LoRA weights would diverge after the first step. This file is
also the worker script torchrun runs (``--worker``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]  # tests/, where the support modules are


def _worker(argv: list[str]) -> None:
    from safetensors.torch import save_file
    from trainer_support import TINY_CONFIG, tiny_overrides

    from trainer.checkpoint import trainable_parameters
    from trainer.config import load_config
    from trainer.train import Trainer

    parser = argparse.ArgumentParser()
    parser.add_argument("--model")
    parser.add_argument("--records")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    out = Path(args.out)
    config = load_config(TINY_CONFIG, tiny_overrides(
        Path(args.model), Path(args.records), out / "run",
        **{"run.steps": 2, "run.batch_size": 4, "run.save_every": 0, "lora.dropout": 0.1}))
    trainer = Trainer(config)
    assert trainer.world == 2 and trainer.micro == 2
    seen = [e.query for e in trainer.sampler.batch(trainer.rank)]  # step 0 of this rank
    trainer.run()
    params = {k: v.detach().contiguous() for k, v in trainable_parameters(trainer.model).items()}
    save_file(params, str(out / f"rank{trainer.rank}.safetensors"))
    (out / f"rank{trainer.rank}.json").write_text(json.dumps({"step": trainer.step, "queries": seen}))


def test_two_process_gloo_ddp_keeps_ranks_in_sync(tmp_path):
    import torch
    from safetensors.torch import load_file
    from trainer_support import tiny_bert_dir, write_tiny_records

    model = tiny_bert_dir(tmp_path)
    records = write_tiny_records(tmp_path / "r.jsonl")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(
        [str(TESTS.parent), str(TESTS), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           str(Path(__file__).resolve()), "--worker", "--model", str(model), "--records", str(records),
           "--out", str(tmp_path)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["step"] == r1["step"] == 2
    assert r0["queries"] != r1["queries"]  # the ranks trained on different data
    p0, p1 = load_file(str(tmp_path / "rank0.safetensors")), load_file(str(tmp_path / "rank1.safetensors"))
    assert p0.keys() == p1.keys() and len(p0) > 0
    for name in p0:
        assert torch.equal(p0[name], p1[name]), name
    moved = [n for n in p0 if "lora_B" in n and p0[n].abs().max() > 0]
    assert moved, "LoRA B matrices start at zero and must have been updated"
    assert (tmp_path / "run" / "checkpoints" / "step-2" / "weights.safetensors").is_file()


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.argv.remove("--worker")
        _worker(sys.argv[1:])
    else:
        sys.exit(pytest.main([__file__, "-q"]))
