"""The sparse projection: which weights map hidden states onto the vocabulary.

- ``lm``: a causal LM head (decoders), ``hidden @ W.T (+ b)``.
- ``mlm``: a BERT-style masked-LM head: a transform (dense + activation + LayerNorm) applied
  to every hidden state, then the decoder ``W`` (tied to the input embeddings) and bias.
- ``tied``: the input embedding matrix itself (backbones saved without any head, e.g.
  all-MiniLM-L6-v2 as a ``BertModel``).

The head never owns parameters: it looks them up on the HF model on every call, so it stays
correct when peft wraps, or merges LoRA into, the modules it uses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from lr_opensearch.errors import ConfigError
from lr_opensearch.options import SPARSE_HEADS, choice


def unwrap(hf: Any) -> Any:
    """The plain HF model under a peft wrapper (or ``hf`` itself)."""
    get_base = getattr(hf, "get_base_model", None)
    return get_base() if callable(get_base) else hf


def _mlm_transform_path(model: Any) -> str | None:
    """Module path of the BERT-style head holding both ``transform`` and the decoder."""
    decoder = model.get_output_embeddings()
    for name, module in model.named_modules():
        if getattr(module, "decoder", None) is decoder and hasattr(module, "transform"):
            return f"{name}.transform"
    return None


@dataclass(frozen=True)
class SparseHead:
    """A handle on the projection weights of one of ``SPARSE_HEADS``.

    Attributes:
        kind: "lm" | "mlm" | "tied".
        transform_path: module path of the MLM transform (``mlm`` only).
    """

    kind: str
    transform_path: str | None = None

    @classmethod
    def detect(cls, hf: nn.Module, wanted: str | None = None) -> SparseHead:
        """Choose the head for ``hf``: ``wanted`` if given, else the best it has.

        Best = MLM head (with its transform) for masked-LM models, LM head for causal LMs,
        else the tied input embeddings.
        """
        model = unwrap(hf)
        if wanted is not None:
            choice("sparse head", wanted, SPARSE_HEADS)
        has_output = model.get_output_embeddings() is not None
        transform = _mlm_transform_path(model) if has_output else None
        if wanted is None:
            wanted = "tied" if not has_output else ("mlm" if transform else "lm")
        if wanted in ("lm", "mlm") and not has_output:
            raise ConfigError(f"sparse head {wanted!r} needs an LM/MLM head, but "
                              f"{type(model).__name__} has none; use sparse_head='tied'")
        if wanted == "mlm" and transform is None:
            raise ConfigError(f"{type(model).__name__} has no BERT-style MLM head "
                              "(transform + decoder); use sparse_head='lm' or 'tied'")
        return cls(kind=wanted, transform_path=transform if wanted == "mlm" else None)

    def transform(self, hf: nn.Module, hidden: torch.Tensor) -> torch.Tensor:
        """Apply the MLM transform to hidden states [B, T, H] (identity for lm / tied)."""
        if self.transform_path is None:
            return hidden
        return unwrap(hf).get_submodule(self.transform_path)(hidden)

    def projection(self, hf: nn.Module) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weight [V, H], bias [V] or None) of the projection."""
        model = unwrap(hf)
        if self.kind == "tied":
            return model.get_input_embeddings().weight, None
        out = model.get_output_embeddings()
        return out.weight, getattr(out, "bias", None)
