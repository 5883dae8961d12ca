"""Loading HF backbones from local directories (safetensors only, no remote code, offline).

The readers of config.json and of the defaults a sentence-transformers directory records
(pooling, normalisation, maximum sequence length: a packaged model is used the way it was
trained) live in the torch-free ``model.checkpoint``; they are imported here too.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lr_opensearch.errors import ConfigError
from lr_opensearch.model.checkpoint import (  # noqa: F401  (imported from here too)
    DECODER_MODEL_TYPES,
    default_architecture,
    eos_token_id,
    infer_kind,
    sentence_transformers_settings,
)

logger = logging.getLogger(__name__)

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
