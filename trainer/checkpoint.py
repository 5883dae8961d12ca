"""Training checkpoints: safetensors for tensors, JSON for everything else (no pickle).

Layout of ``<output_dir>/checkpoints/step-<N>/``::

    weights.safetensors     the trainable parameters (LoRA adapters, or all weights)
    optimizer.safetensors   AdamW moments, "<param name>::<key>"
    state.json              format + version, step, optimizer param groups, last logs
    config.json             the resolved TrainConfig (export rebuilds the model from it)

A checkpoint is written to a temporary folder and renamed, so a killed run never leaves
a half-written ``step-N``.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from lr_opensearch.errors import TrainingError
from trainer.config import TrainConfig, config_from_dict, save_config

logger = logging.getLogger(__name__)

FORMAT = "lr-trainer-checkpoint"
VERSION = 1
_STEP_DIR = re.compile(r"^step-(\d+)$")


def trainable_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """Name -> parameter of everything that trains, in a stable order."""
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def checkpoint_dirs(output_dir: str | Path) -> list[Path]:
    """Existing step checkpoints of a run, oldest first."""
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return [p for _, p in sorted(found)]


def resolve_checkpoint(path: str | Path) -> Path:
    """A step directory itself, or the newest checkpoint of a run directory."""
    p = Path(path)
    if (p / "state.json").is_file():
        return p
    dirs = checkpoint_dirs(p)
    if not dirs:
        raise TrainingError(f"{p} is neither a checkpoint (no state.json) nor a run directory "
                            "with checkpoints/step-N inside")
    return dirs[-1]


def save_checkpoint(output_dir: str | Path, step: int, model: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, config: TrainConfig,
                    logs: dict[str, float] | None = None, keep: int = 2) -> Path:
    """Write ``checkpoints/step-<step>`` and prune older ones beyond ``keep``."""
    params = trainable_parameters(model)
    index = {id(p): n for n, p in params.items()}
    moments: dict[str, torch.Tensor] = {}
    for p, state in optimizer.state.items():
        name = index.get(id(p))
        if name is None:
            raise TrainingError("the optimizer holds a parameter that is not trainable in the model")
        for key, value in state.items():
            if torch.is_tensor(value):
                moments[f"{name}::{key}"] = value.detach().cpu().contiguous()
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items() if k != "params"}
              for g in optimizer.param_groups]
    root = Path(output_dir) / "checkpoints"
    final = root / f"step-{step}"
    tmp = root / f".step-{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file({n: p.detach().cpu().contiguous() for n, p in params.items()}, str(tmp / "weights.safetensors"))
    save_file(moments, str(tmp / "optimizer.safetensors"))
    state = {"format": FORMAT, "version": VERSION, "step": step, "param_groups": groups,
             "parameters": list(params), "logs": logs or {}}
    (tmp / "state.json").write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
    save_config(config, tmp / "config.json")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in checkpoint_dirs(output_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    logger.info("checkpoint saved: %s", final)
    return final


def read_state(ckpt: str | Path) -> dict[str, Any]:
    """The checkpoint's state.json, checked for format and version."""
    path = Path(ckpt) / "state.json"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TrainingError(f"cannot read checkpoint state {path}: {exc}") from None
    if state.get("format") != FORMAT or state.get("version") != VERSION:
        raise TrainingError(f"{path}: not a {FORMAT} v{VERSION} checkpoint "
                            f"(format={state.get('format')!r}, version={state.get('version')!r})")
    return state


def read_config(ckpt: str | Path) -> TrainConfig:
    """The TrainConfig saved with a checkpoint."""
    path = Path(ckpt) / "config.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TrainingError(f"cannot read checkpoint config {path}: {exc}") from None
    model = data.get("model")
    if isinstance(model, dict) and "query_norm" not in model:
        data = {**data, "model": {**model, "query_norm": "rows"}}  # trained before the setting
    return config_from_dict(data, source=str(path))


def load_weights(ckpt: str | Path, model: torch.nn.Module) -> None:
    """Copy the checkpoint's trainable parameters into ``model`` (names must match exactly)."""
    saved = load_file(str(Path(ckpt) / "weights.safetensors"))
    params = trainable_parameters(model)
    missing, unexpected = sorted(set(params) - set(saved)), sorted(set(saved) - set(params))
    if missing or unexpected:
        raise TrainingError(f"{ckpt}: checkpoint weights do not fit the model (missing {missing[:3]}, "
                            f"unexpected {unexpected[:3]}); was it trained with other lora/model settings?")
    with torch.no_grad():
        for name, p in params.items():
            if saved[name].shape != p.shape:
                raise TrainingError(f"{ckpt}: {name} has shape {tuple(saved[name].shape)}, "
                                    f"the model expects {tuple(p.shape)}")
            p.copy_(saved[name].to(p.dtype))


def load_optimizer(ckpt: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore AdamW moments and param groups; returns the checkpoint's step."""
    state = read_state(ckpt)
    moments = load_file(str(Path(ckpt) / "optimizer.safetensors"))
    params = trainable_parameters(model)
    per_param: dict[str, dict[str, torch.Tensor]] = {}
    for key, value in moments.items():
        name, _, field = key.partition("::")
        per_param.setdefault(name, {})[field] = value
    order = [n for g in optimizer.param_groups for n in _names(g["params"], params)]
    groups: list[dict[str, Any]] = []
    sd: dict[str, Any] = {"state": {i: per_param[n] for i, n in enumerate(order) if n in per_param},
                          "param_groups": groups}
    start = 0
    for saved_group, group in zip(state["param_groups"], optimizer.param_groups, strict=True):
        ids = list(range(start, start + len(group["params"])))
        start += len(ids)
        groups.append({**saved_group, "params": ids})
    optimizer.load_state_dict(sd)
    return int(state["step"])


def _names(group_params: list[torch.Tensor], params: dict[str, torch.nn.Parameter]) -> list[str]:
    index = {id(p): n for n, p in params.items()}
    return [index[id(p)] for p in group_params]
