"""Loading HF backbones from local directories (safetensors only, no remote code, offline).

Also reads the defaults a sentence-transformers directory records (pooling, normalisation,
maximum sequence length), so a packaged model is used the way it was trained.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lr_opensearch.errors import ConfigError

logger = logging.getLogger(__name__)

# model_type values of decoder-only families we know (others are inferred from the
# architecture name: "...ForCausalLM" is a decoder).
DECODER_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma",
    "gemma2", "gemma3_text", "phi", "phi3", "olmo", "olmo2", "granite", "smollm3", "gpt2",
})


def default_architecture(config: Any) -> str:
    """The architecture to build: the config's own, else a sensible one for its model_type."""
    archs = getattr(config, "architectures", None) or []
    if archs:
        return str(archs[0])
    if config.model_type in DECODER_MODEL_TYPES:
        return "ForCausalLM"
    return "Model"


def infer_kind(config: Any, architecture: str) -> str:
    """"decoder" for causal LMs and known decoder families, else "encoder"."""
    if architecture.endswith("ForCausalLM") or config.model_type in DECODER_MODEL_TYPES:
        return "decoder"
    return "encoder"


def _auto_class(architecture: str) -> Any:
    import transformers

    if architecture.endswith("ForCausalLM"):
        return transformers.AutoModelForCausalLM
    if architecture.endswith("ForMaskedLM"):
        return transformers.AutoModelForMaskedLM
    if architecture.endswith("ForConditionalGeneration"):  # T5 / monoT5 (the UR²N reranker)
        return transformers.AutoModelForSeq2SeqLM
    return transformers.AutoModel


def load_hf(model_dir: Path, dtype: torch.dtype) -> tuple[nn.Module, str]:
    """Load the HF model in ``model_dir``; returns (model, architecture name).

    Raises:
        ConfigError: no config.json, no safetensors weights, or the load failed.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import transformers

    from lr_opensearch.progress import is_terminal

    if not is_terminal():  # its weight-loading bar would redraw itself into a log
        transformers.utils.logging.disable_progress_bar()
    if not (model_dir / "config.json").is_file():
        raise ConfigError(f"{model_dir}: no config.json; pass an HF save_pretrained directory")
    if not any(model_dir.glob("*.safetensors")):
        raise ConfigError(f"{model_dir}: no *.safetensors weights (pickled .bin weights are "
                          "never loaded); convert the checkpoint to safetensors first")
    config = transformers.AutoConfig.from_pretrained(model_dir, local_files_only=True)
    architecture = default_architecture(config)
    try:
        hf = _auto_class(architecture).from_pretrained(
            model_dir, local_files_only=True, use_safetensors=True, trust_remote_code=False,
            dtype=dtype)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{model_dir}: cannot load {architecture}: {exc}") from exc
    return hf, architecture


def build_hf(config: Any, architecture: str | None = None) -> tuple[nn.Module, str]:
    """A randomly initialised HF model for ``config`` (tests, tiny demo models)."""
    architecture = architecture or default_architecture(config)
    auto = _auto_class(architecture)
    return auto.from_config(config), architecture


def sentence_transformers_settings(model_dir: Path) -> dict[str, Any]:
    """Pooling / normalize / max_length / prompts recorded by a sentence-transformers directory.

    Returns a dict with any of "pooling" ("cls" | "mean" | "last"), "normalize" (bool),
    "max_length" (int), "query_prompt" and "document_prompt" (non-empty str: the
    ``prompts`` of config_sentence_transformers.json named "query" and "document" or
    "passage"); empty for a plain HF directory.
    """
    found: dict[str, Any] = {}
    st_prompts = model_dir / "config_sentence_transformers.json"
    if st_prompts.is_file():
        prompts = json.loads(st_prompts.read_text()).get("prompts") or {}
        for key, names in (("query_prompt", ("query",)), ("document_prompt", ("document", "passage"))):
            text = next((prompts[n] for n in names if prompts.get(n)), "")
            if text:
                found[key] = str(text)
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return found
    modules = json.loads(modules_file.read_text())
    found["normalize"] = any(m.get("type", "").endswith("Normalize") for m in modules)
    for module in modules:
        if not module.get("type", "").endswith("Pooling"):
            continue
        pooling_file = model_dir / module.get("path", "") / "config.json"
        if pooling_file.is_file():
            pooling = json.loads(pooling_file.read_text())
            for key, name in (("pooling_mode_cls_token", "cls"),
                              ("pooling_mode_mean_tokens", "mean"),
                              ("pooling_mode_lasttoken", "last")):
                if pooling.get(key):
                    found["pooling"] = name
                    break
    st_config = model_dir / "sentence_bert_config.json"
    if st_config.is_file():
        max_len = json.loads(st_config.read_text()).get("max_seq_length")
        if max_len:
            found["max_length"] = int(max_len)
    return found


def eos_token_id(config: Any) -> int | None:
    """The first EOS id of an HF config (some configs hold a list)."""
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return None if eos is None else int(eos)
