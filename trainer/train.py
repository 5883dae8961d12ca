"""The LightRetriever training loop.

``python -m trainer.train --config cfg.yaml [--set section.key=value ...]``; several
processes with ``torchrun --nproc_per_node N -m trainer.train ...`` (DDP; gloo on CPU).

Each optimizer step runs ``run.grad_accum`` micro-batches per rank. A micro-batch is
drawn deterministically from ``(run.seed, its global index)`` and dropout is seeded the
same way, so a run resumed from a checkpoint continues exactly as if it had not stopped.
Rank 0 logs every loss term every ``run.log_every`` steps (INFO and
``<output_dir>/metrics.jsonl``) and writes checkpoints (``trainer.checkpoint``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lr_opensearch.errors import LRError
from trainer.batching import Batch, Collator
from trainer.checkpoint import (
    checkpoint_dirs,
    load_optimizer,
    load_weights,
    save_checkpoint,
    trainable_parameters,
)
from trainer.config import (
    OptimSettings,
    TrainConfig,
    load_config,
    micro_batch_size,
    save_config,
)
from trainer.data import BatchSampler, Source, micro_batch_index, read_records
from trainer.modeling import build_model
from trainer.objective import Objective, Representations, sparse_excluded

logger = logging.getLogger(__name__)

def lr_factor(step: int, optim: OptimSettings, steps: int) -> float:
    """Learning-rate multiplier at optimizer step ``step`` (linear warm-up, then decay)."""
    if step < optim.warmup_steps:
        return (step + 1) / optim.warmup_steps
    progress = min(1.0, (step - optim.warmup_steps) / max(1, steps - optim.warmup_steps))
    floor = optim.min_lr_ratio
    if optim.schedule == "cosine":
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    if optim.schedule == "linear":
        return 1 - (1 - floor) * progress
    return 1.0


def _distributed() -> tuple[int, int]:
    """(rank, world size); initialises the process group under torchrun (gloo on CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not torch.distributed.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        torch.distributed.init_process_group(backend=backend)
    if torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


class TrainForward(nn.Module):
    """Everything the objective needs from the model for one batch (what DDP wraps).

    Args:
        model: the LightRetrieverModel.
        symmetric: "train" (full-model query pass with gradients), "teacher" (no
            gradients, eval mode) or "off".
    """

    def __init__(self, model: nn.Module, symmetric: str):
        super().__init__()
        self.model: Any = model
        self.symmetric = symmetric

    def query_dense(self, batch: Batch) -> torch.Tensor:
        """[B, H] LightRetriever dense queries; one block-masked pass per distinct prompt."""
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for i, prompt in enumerate(batch.prompts):
            groups[tuple(prompt)].append(i)
        parts, order = [], []
        for shared, rows in groups.items():
            parts.append(self.model.encode_query_dense(list(shared), [batch.query_tokens[i] for i in rows]))
            order.extend(rows)
        stacked = torch.cat(parts) if len(parts) > 1 else parts[0]
        return stacked[torch.argsort(torch.tensor(order, device=stacked.device))]

    def forward(self, batch: Batch) -> Representations:  # type: ignore[override]
        docs = self.model.encode_documents(batch.doc_ids, batch.doc_mask)
        symmetric = None
        if self.symmetric == "train":
            symmetric = self.model.encode_documents(batch.sym_ids, batch.sym_mask).dense
        elif self.symmetric == "teacher":
            was_training = self.model.training
            self.model.eval()
            with torch.no_grad():
                symmetric = self.model.encode_documents(batch.sym_ids, batch.sym_mask).dense
            self.model.train(was_training)
        return Representations(query_dense=self.query_dense(batch), query_counts=batch.counts,
                               query_symmetric=symmetric, doc_dense=docs.dense,
                               doc_sparse=docs.sparse, doc_head_logits=docs.head_logits,
                               doc_base_logits=docs.base_logits)


@dataclass
class TrainResult:
    """What a finished run left behind."""

    step: int
    output_dir: Path
    checkpoint: Path | None
    wall_seconds: float
    last_logs: dict[str, float]


# ----------------------------------------------------------------------------- the loop


class Trainer:
    """One training run (build with the config, then ``run()``)."""

    def __init__(self, config: TrainConfig):
        self.config = config
        self.rank, self.world = _distributed()
        if config.run.threads:
            torch.set_num_threads(config.run.threads)
        torch.manual_seed(config.run.seed)
        self.out = Path(config.run.output_dir)
        self.model: Any
        self.model, self.tokenizer = build_model(config)
        self.model.train()
        self.objective = Objective(config.loss, normalize=bool(self.model.normalize),
                                   excluded=sparse_excluded(self.tokenizer, self.model.vocab_size),
                                   soft_top_k_temperature=config.model.soft_top_k_temperature)
        self.micro = micro_batch_size(config, self.world)
        self.collator = Collator(self.tokenizer, self.model.framing, self.model.vocab_size,
                                 config.data.max_length, config.data.query_max_tokens)
        self.sampler = BatchSampler(
            [Source(s.name, read_records(s.path), s.weight, s.instruction) for s in config.data.sources],
            self.micro, config.data.negatives, seed=config.run.seed, homogeneous=config.data.homogeneous)
        self.params = list(trainable_parameters(self.model).values())
        self.optimizer = torch.optim.AdamW(self.params, lr=config.optim.lr,
                                           weight_decay=config.optim.weight_decay)
        symmetric = ("train" if config.loss.symmetric_weight > 0
                     else "teacher" if self.objective.needs_symmetric else "off")
        self.forward: Any = TrainForward(self.model, symmetric)
        if self.world > 1:
            self.forward = nn.parallel.DistributedDataParallel(
                self.forward, find_unused_parameters=not config.lora.enabled)
        self.step = 0
        self._resumed = False

    def maybe_resume(self) -> None:
        """Continue from the newest checkpoint of ``output_dir`` (if resume is on)."""
        dirs = checkpoint_dirs(self.out)
        if not (self.config.run.resume and dirs) or self._resumed:
            return
        self._resumed = True
        load_weights(dirs[-1], self.model)
        self.step = load_optimizer(dirs[-1], self.model, self.optimizer)
        logger.info("resumed from %s at step %d", dirs[-1], self.step)

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.config.run.precision == "bf16":
            return torch.autocast(device_type=self.model.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def train_step(self) -> dict[str, float]:
        """One optimizer step over ``grad_accum`` micro-batches; returns rank-averaged logs."""
        run = self.config.run
        sums: dict[str, float] = defaultdict(float)
        for micro in range(run.grad_accum):
            index = micro_batch_index(self.step, micro, self.rank, run.grad_accum, self.world)
            batch = self.collator(self.sampler.batch(index))
            torch.manual_seed(run.seed * 1_000_003 + index)
            last = micro == run.grad_accum - 1
            sync = self.forward.no_sync() if (self.world > 1 and not last) else contextlib.nullcontext()
            with sync:
                with self._autocast():
                    reps = self.forward(batch)
                loss, logs = self.objective(reps, self.step)
                (loss / run.grad_accum).backward()
            for k, v in logs.items():
                sums[k] += v / run.grad_accum
        if self.config.optim.max_grad_norm > 0:
            sums["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.params, self.config.optim.max_grad_norm))
        lr = self.config.optim.lr * lr_factor(self.step, self.config.optim, run.steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        sums["lr"] = lr
        return self._mean_over_ranks(sums)

    def _mean_over_ranks(self, logs: dict[str, float]) -> dict[str, float]:
        if self.world == 1:
            return dict(logs)
        keys = sorted(logs)
        values = torch.tensor([logs[k] for k in keys], dtype=torch.float64)
        torch.distributed.all_reduce(values)
        return {k: float(v) / self.world for k, v in zip(keys, values, strict=True)}

    def save(self, logs: dict[str, float]) -> Path | None:
        ckpt = None
        if self.rank == 0:
            ckpt = save_checkpoint(self.out, self.step, self.model, self.optimizer, self.config,
                                   logs, keep=self.config.run.keep_checkpoints)
        if self.world > 1:
            torch.distributed.barrier()
        return ckpt

    def run(self) -> TrainResult:
        """Train until ``run.steps``; checkpoint periodically and at the end."""
        from lr_opensearch.progress import progress_bar

        run = self.config.run
        self.maybe_resume()
        if self.rank == 0:
            self.out.mkdir(parents=True, exist_ok=True)
            save_config(self.config, self.out / "config.json")
        start, window, logs = time.perf_counter(), defaultdict(list), {}
        ckpt = None
        bar = progress_bar(total=run.steps, initial=self.step, desc="train", unit="step", disable=self.rank != 0)
        while self.step < run.steps:
            logs = self.train_step()
            for k, v in logs.items():
                window[k].append(v)
            bar.update(1)
            bar.set_postfix(loss=f"{logs['loss']:.4f}")
            if self.step % run.log_every == 0 or self.step == run.steps:
                self._log(window, time.perf_counter() - start)
                window.clear()
            out_of_time = self._out_of_time(start)
            if out_of_time and self.step % run.log_every:
                self._log(window, time.perf_counter() - start)
                window.clear()
            if (run.save_every and self.step % run.save_every == 0) or self.step == run.steps or out_of_time:
                ckpt = self.save(logs)
            if out_of_time:
                logger.warning("wall-clock budget of %.1f min reached: stopping at step %d of %d",
                               run.max_wall_minutes, self.step, run.steps)
                break
        bar.close()
        wall = time.perf_counter() - start
        if self.rank == 0:
            summary = {"steps": self.step, "planned_steps": run.steps, "wall_seconds": wall,
                       "world_size": self.world,
                       "last_logs": logs, "checkpoint": str(ckpt) if ckpt else None}
            (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        return TrainResult(self.step, self.out, ckpt, wall, logs)

    def _out_of_time(self, start: float) -> bool:
        """Whether the wall-clock budget is spent (decided on rank 0, shared with all ranks)."""
        limit = self.config.run.max_wall_minutes
        if limit is None:
            return False
        flag = torch.tensor([float(time.perf_counter() - start > 60.0 * limit)])
        if self.world > 1:
            torch.distributed.broadcast(flag, src=0)
        return bool(flag.item())

    def _log(self, window: dict[str, list[float]], elapsed: float) -> None:
        if self.rank != 0:
            return
        means = {k: sum(v) / len(v) for k, v in window.items()}
        record = {"step": self.step, "elapsed_s": round(elapsed, 2), **means}
        with open(self.out / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        terms = " ".join(f"{k}={v:.4g}" for k, v in sorted(means.items()))
        logger.info("step %d (%.0f s): %s", self.step, elapsed, terms)


def train(config: TrainConfig) -> TrainResult:
    """Run training (and the export configured in ``config.export.out``, on rank 0)."""
    trainer = Trainer(config)
    result = trainer.run()
    if config.export.out and trainer.rank == 0 and result.checkpoint is not None:
        from trainer.export import export_model

        export_model(trainer.model, trainer.tokenizer, config, config.export.out, overwrite=True)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.train", description="Train a LightRetriever model.")
    parser.add_argument("--config", help="YAML or JSON config (see trainer/configs/)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting, e.g. --set optim.lr=2e-4 (repeatable)")
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    logging.basicConfig(level=logging.INFO if rank == 0 else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    from tqdm.contrib.logging import logging_redirect_tqdm

    try:
        config = load_config(args.config, args.set)
        with logging_redirect_tqdm():
            result = train(config)
    except LRError as exc:
        logging.getLogger("trainer").error("%s", exc)
        return 1
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    if rank == 0:
        print(json.dumps({"steps": result.step, "wall_seconds": round(result.wall_seconds, 1),
                          "checkpoint": str(result.checkpoint), **result.last_logs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
