"""Building the model a training run starts from: the backbone (a local HF directory or a
packaged catalogue name) wrapped as a ``LightRetrieverModel``, with LoRA and gradient
checkpointing applied. Used by ``trainer.train`` and by ``trainer.export`` (which rebuilds
the run's model to load its weights)."""

from __future__ import annotations

from typing import Any

from lr_opensearch.packaged import resolve_model
from trainer.config import ModelSettings, TrainConfig
from trainer.lora import apply_lora


def load_backbone(settings: ModelSettings) -> tuple[Any, Any]:
    """(LightRetrieverModel in float32, its tokenizers.Tokenizer) for the model settings."""
    from tokenizers import Tokenizer

    from lr_opensearch.model import LightRetrieverModel, RetrieverSettings

    model_dir, name = resolve_model(settings.path)
    model = LightRetrieverModel.from_pretrained(model_dir, RetrieverSettings(
        kind=settings.kind, pooling=settings.pooling, normalize=settings.normalize,
        sparse_head=settings.sparse_head, query_norm=settings.query_norm,
        sparse_mode=settings.sparse_mode, medusa_heads=settings.medusa_heads,
        soft_top_k_temperature=settings.soft_top_k_temperature), name=name)
    return model, Tokenizer.from_file(str(model_dir / "tokenizer.json"))


def build_model(config: TrainConfig) -> tuple[Any, Any]:
    """The backbone with LoRA (per ``config.lora``) and gradient checkpointing applied."""
    model, tokenizer = load_backbone(config.model)
    apply_lora(model, config.lora)
    if config.run.gradient_checkpointing:
        from lr_opensearch.model.heads import unwrap

        unwrap(model.hf).gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model, tokenizer
