"""LoRA adapters (peft) on the retriever's backbone, and merging them back.

Target modules are chosen per architecture: every linear layer of the transformer
blocks (attention and MLP), never the embeddings or the LM / MLM head, which is the
sparse projection (tied to the input embeddings in most models).
"""

from __future__ import annotations

import logging
from typing import Any

from lr_opensearch.errors import ConfigError
from trainer.config import LoraSettings

logger = logging.getLogger(__name__)

_BERT_LAYERS = (r".*encoder\.layer\.\d+\.(attention\.self\.(query|key|value)"
                r"|attention\.output\.dense|intermediate\.dense|output\.dense)")
_LLAMA_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

#: model_type -> peft target_modules (a regex string or module-name suffixes)
TARGET_MODULES: dict[str, Any] = {
    "bert": _BERT_LAYERS,
    "roberta": _BERT_LAYERS,
    "xlm-roberta": _BERT_LAYERS,
    "llama": list(_LLAMA_LINEARS),
    "mistral": list(_LLAMA_LINEARS),
    "qwen2": list(_LLAMA_LINEARS),
    "qwen3": list(_LLAMA_LINEARS),
    "gemma": list(_LLAMA_LINEARS),
    "gemma2": list(_LLAMA_LINEARS),
}


def target_modules(model_type: str, settings: LoraSettings) -> Any:
    """The peft ``target_modules`` for a backbone (the settings' own list wins)."""
    if settings.target_modules:
        return list(settings.target_modules)
    if model_type not in TARGET_MODULES:
        raise ConfigError(f"no default LoRA target modules for model_type {model_type!r} "
                          f"(known: {', '.join(sorted(TARGET_MODULES))}); set lora.target_modules")
    return TARGET_MODULES[model_type]


def apply_lora(model: Any, settings: LoraSettings) -> None:
    """Wrap ``model.hf`` (a LightRetrieverModel's backbone) with LoRA adapters in place.

    With ``settings.enabled`` false every parameter stays trainable (full fine-tuning).
    """
    if not settings.enabled:
        return
    from peft import LoraConfig, get_peft_model

    model_type = model.hf.config.model_type
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=target_modules(model_type, settings), bias="none")
    model.hf = get_peft_model(model.hf, config)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    logger.info("LoRA r=%d alpha=%d dropout=%.2f on %s: %d of %d parameters trainable (%.2f%%)",
                settings.r, settings.alpha, settings.dropout, model_type, trainable, total,
                100.0 * trainable / max(1, total))


def merge_lora(model: Any) -> None:
    """Fold LoRA adapters into the base weights and drop the peft wrapper (no-op without)."""
    merge = getattr(model.hf, "merge_and_unload", None)
    if callable(merge):
        model.hf = merge()
        logger.info("merged the LoRA adapters into the backbone")
