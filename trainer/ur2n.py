"""UR²N training: the XTR layer and projection on a frozen reranker backbone.

``python -m trainer.ur2n --config trainer/configs/ur2n-cpu.yaml [--set section.key=value ...]``

Only the XTR head (``lr_opensearch.ur2n.model.XTRHead``: the clone of the last layer, its
norm and the projection) has gradients; the backbone, hence the reranker, is untouched.
The loss is XTR's in-batch token alignment (``trainer.losses.xtr``).

Because the backbone is frozen, what enters its last layer never changes: with
``run.cache`` (default) every batch's last-layer inputs are computed once and reused in
every epoch, so a step costs one layer instead of the whole model (what makes CPU training
of a 135M-parameter backbone take minutes). Batches are fixed groups of examples drawn
once from ``(run.seed)``; each epoch visits them in a seeded order.

The run directory gets ``config.json``, ``metrics.jsonl`` (loss, accuracy, lr, grad norm
per logged step) and ``summary.json``; ``export.out`` writes the UR²N bundle at the end.
A run is minutes long and keeps no resumable checkpoints.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lr_opensearch.errors import ConfigError, LRError, TrainingError
from lr_opensearch.ur2n.model import LayerInputs, TokenBatch, UR2NModel
from trainer.config import OptimSettings, SourceSettings
from trainer.config_io import build_settings, plain, read_config_data
from trainer.data import TrainRecord, read_records
from trainer.losses import build_loss

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UR2NModelSettings:
    """The backbone and the XTR head's shape.

    Attributes:
        path: an HF T5 / causal-LM directory or ``packaged:smollm2``.
        token_dim: width of the token embeddings.
        max_length: tokens of a framed document (and of a rerank prompt).
        query_max_length: tokens of a framed query.
    """

    path: str | None = None
    token_dim: int = 128
    max_length: int = 256
    query_max_length: int = 64


@dataclass(frozen=True)
class UR2NDataSettings:
    """Training examples: ``(query, positive, negatives)`` from JSONL records (``trainer.pairs``).

    Attributes:
        sources: the record files; ``weight`` sets each one's share of ``max_examples``.
        negatives: hard negatives per query from the record (topped up with other records'
            positives when a record has fewer); 0 = in-batch negatives only.
        max_examples: examples kept over all sources (None = every record once).
    """

    sources: tuple[SourceSettings, ...] = ()
    negatives: int = 0
    max_examples: int | None = None


@dataclass(frozen=True)
class XTRLossSettings:
    """``trainer.losses.xtr.XTRLoss``: softmax temperature and XTR's k_train."""

    temperature: float = 0.05
    top_k: int = 32


@dataclass(frozen=True)
class UR2NRunSettings:
    """The loop (see the module docstring for ``cache``)."""

    output_dir: str = "runs/ur2n"
    steps: int = 200
    batch_size: int = 16
    cache: bool = True
    log_every: int = 10
    seed: int = 42
    threads: int | None = None
    max_wall_minutes: float | None = None


@dataclass(frozen=True)
class UR2NExportSettings:
    """``out``: write the UR²N bundle here when training ends (None = no bundle)."""

    out: str | None = None


@dataclass(frozen=True)
class UR2NTrainConfig:
    """A whole UR²N training run (sections ``model data loss optim run export``)."""

    model: UR2NModelSettings = UR2NModelSettings()
    data: UR2NDataSettings = UR2NDataSettings()
    loss: XTRLossSettings = XTRLossSettings()
    optim: OptimSettings = field(default_factory=lambda: OptimSettings(lr=1e-4, warmup_steps=10))
    run: UR2NRunSettings = UR2NRunSettings()
    export: UR2NExportSettings = UR2NExportSettings()

    def to_dict(self) -> dict[str, Any]:
        import dataclasses

        return plain(dataclasses.asdict(self))


def load_ur2n_config(path: str | Path | None, overrides: Sequence[str] = ()) -> UR2NTrainConfig:
    """Load a YAML/JSON UR²N config with ``key=value`` overrides (unknown keys are errors)."""
    config: UR2NTrainConfig = build_settings(UR2NTrainConfig, read_config_data(path, overrides), "")
    checks = [(config.model.path is not None, "model.path must name a backbone"),
              (bool(config.data.sources), "data.sources is empty"),
              (config.run.steps >= 1 and config.run.batch_size >= 2,
               "run.steps >= 1 and run.batch_size >= 2 (in-batch negatives)"),
              (config.data.negatives >= 0, "data.negatives must be >= 0"),
              (config.optim.schedule in ("cosine", "linear", "constant"),
               f"optim.schedule must be one of cosine, linear, constant; got {config.optim.schedule!r}")]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{path or 'config'}: {message}")
    return config


# ----------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Example:
    """A query, its positive and its negatives (``docs[0]`` is the positive)."""

    query: str
    docs: tuple[str, ...]


def build_examples(config: UR2NTrainConfig) -> list[Example]:
    """Examples from every source (each source's share by weight), shuffled by the seed."""
    data, rng = config.data, random.Random(config.run.seed)
    sources = [(s, read_records(s.path)) for s in data.sources]
    total_weight = sum(s.weight for s, _ in sources)
    examples: list[Example] = []
    for settings, records in sources:
        if not records:
            raise TrainingError(f"source {settings.name!r} ({settings.path}) has no records")
        share = len(records) if data.max_examples is None else round(data.max_examples * settings.weight / total_weight)
        picked = rng.sample(records, min(share, len(records)))
        examples += [_example(r, records, data.negatives, rng) for r in picked]
    rng.shuffle(examples)
    return examples


def _example(record: TrainRecord, pool: Sequence[TrainRecord], negatives: int, rng: random.Random) -> Example:
    docs = list(record.negatives[:negatives])
    while len(docs) < negatives:
        other = rng.choice(pool)
        if other is not record:
            docs.append(rng.choice(other.positives))
    return Example(record.query, (rng.choice(record.positives), *docs))


@dataclass
class PreparedBatch:
    """One batch's framed queries and documents and, once cached, their last-layer inputs."""

    queries: TokenBatch
    docs: TokenBatch
    query_inputs: LayerInputs | None = None
    doc_inputs: LayerInputs | None = None


# ----------------------------------------------------------------------------- training


class UR2NTrainer:
    """One UR²N training run (build with the config, then ``run()``)."""

    def __init__(self, config: UR2NTrainConfig, model: UR2NModel | None = None):
        self.config = config
        if config.run.threads:
            torch.set_num_threads(config.run.threads)
        m = config.model
        self.model = model if model is not None else UR2NModel.from_pretrained(
            str(m.path), token_dim=m.token_dim, max_length=m.max_length,
            query_max_length=m.query_max_length, seed=config.run.seed)
        self.model.train()
        self.loss = build_loss("xtr", temperature=config.loss.temperature, top_k=config.loss.top_k)
        self.params = [p for p in self.model.head.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=config.optim.lr,
                                           weight_decay=config.optim.weight_decay)
        examples = build_examples(config)
        size = config.run.batch_size
        if len(examples) < size:
            raise TrainingError(f"{len(examples)} examples are fewer than run.batch_size={size}")
        self.batches = [self._prepare(examples[i : i + size])
                        for i in range(0, len(examples) - size + 1, size)]
        self.step = 0

    def _prepare(self, examples: Sequence[Example]) -> PreparedBatch:
        queries = self.model.batch(self.model.frame([e.query for e in examples], kind="query"))
        docs = self.model.batch(self.model.frame([d for e in examples for d in e.docs], kind="document"))
        return PreparedBatch(queries, docs)

    def cache_inputs(self) -> None:
        """Compute every batch's last-layer inputs once (the frozen backbone's only work)."""
        from lr_opensearch.progress import progress_bar

        for batch in progress_bar(self.batches, desc="cache last-layer inputs", unit="batch"):
            batch.query_inputs = self.model.layer_inputs(batch.queries)
            batch.doc_inputs = self.model.layer_inputs(batch.docs)

    def train_step(self, batch: PreparedBatch) -> dict[str, float]:
        """One optimizer step on one batch; returns the logged values."""
        from trainer.train import lr_factor

        q_in = batch.query_inputs or self.model.layer_inputs(batch.queries)
        d_in = batch.doc_inputs or self.model.layer_inputs(batch.docs)
        out = self.loss(self.model.token_tensor(q_in), self.model.token_tensor(d_in),
                        query_mask=batch.queries.content_mask, doc_mask=batch.docs.content_mask)
        out.loss.backward()
        logs = {"loss": float(out.loss.detach()), **out.logs}
        if self.config.optim.max_grad_norm > 0:
            logs["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.params, self.config.optim.max_grad_norm))
        lr = self.config.optim.lr * lr_factor(self.step, self.config.optim, self.config.run.steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        return {**logs, "lr": lr}

    def _order(self) -> list[int]:
        """Batch indices for all steps: a seeded permutation per epoch."""
        order: list[int] = []
        epoch = 0
        while len(order) < self.config.run.steps:
            perm = list(range(len(self.batches)))
            random.Random(f"{self.config.run.seed}/{epoch}").shuffle(perm)
            order += perm
            epoch += 1
        return order[: self.config.run.steps]

    def run(self) -> dict[str, Any]:
        """Train (caching first if configured), log, export; returns the summary."""
        from lr_opensearch.progress import progress_bar

        run, out = self.config.run, Path(self.config.run.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")
        (out / "metrics.jsonl").write_text("")
        start = time.perf_counter()
        if run.cache:
            self.cache_inputs()
        cached_s = time.perf_counter() - start
        window: list[dict[str, float]] = []
        bar = progress_bar(total=run.steps, desc="train xtr", unit="step")
        for index in self._order():
            window.append(self.train_step(self.batches[index]))
            bar.update(1)
            out_of_time = (run.max_wall_minutes is not None
                           and time.perf_counter() - start > 60 * run.max_wall_minutes)
            if self.step % run.log_every == 0 or self.step == run.steps or out_of_time:
                self._log(out, window, time.perf_counter() - start)
                window = []
            if out_of_time:
                logger.warning("wall-clock budget of %.1f min reached: stopping at step %d of %d",
                               run.max_wall_minutes, self.step, run.steps)
                break
        bar.close()
        summary = {"steps": self.step, "planned_steps": run.steps, "batches": len(self.batches),
                   "examples": len(self.batches) * run.batch_size,
                   "cache_seconds": round(cached_s, 1),
                   "wall_seconds": round(time.perf_counter() - start, 1),
                   "backbone": self.model.config.backbone_name}
        (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        if self.config.export.out:
            curve = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
            self.model.save(self.config.export.out, overwrite=True,
                            training={**summary, "config": self.config.to_dict(),
                                      "loss_curve": [[r["step"], round(r["loss"], 4)] for r in curve]})
        return summary

    def _log(self, out: Path, window: list[dict[str, float]], elapsed: float) -> None:
        means = {k: sum(w[k] for w in window) / len(window) for k in window[0]}
        record = {"step": self.step, "elapsed_s": round(elapsed, 2), **means}
        with open(out / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        logger.info("step %d (%.0f s): %s", self.step, elapsed,
                    " ".join(f"{k}={v:.4g}" for k, v in sorted(means.items())))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.ur2n",
                                     description="Train the XTR layer of a UR²N model.")
    parser.add_argument("--config", help="YAML or JSON config (see trainer/configs/ur2n-cpu.yaml)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting, e.g. --set run.steps=50 (repeatable)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    from tqdm.contrib.logging import logging_redirect_tqdm

    try:
        config = load_ur2n_config(args.config, args.set)
        with logging_redirect_tqdm():
            summary = UR2NTrainer(config).run()
    except LRError as exc:
        logging.getLogger("trainer").error("%s", exc)
        return 1
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
