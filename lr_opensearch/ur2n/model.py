"""UR²N: one model that retrieves with XTR token embeddings and reranks as monoT5 does.

The backbone is an unchanged reranker; retrieval adds an **XTR layer**: a clone of the
backbone's last layer, run in parallel to it on the same input (the hidden state entering
the last layer, with that layer's own masks and position terms), followed by the model's
final norm (cloned too) and a linear projection to ``token_dim``:
``E = normalize(W · Norm(Layer_xtr(X_{L-1})))``. Only the XTR layer, its norm and the
projection are trained; the backbone is frozen, so reranking is unchanged.

Two backbone kinds (``UR2NConfig.kind``):

- ``t5`` (any HF ``T5ForConditionalGeneration``, e.g. monoT5): the XTR layer clones the
  encoder's last block and its ``final_layer_norm``; the reranker feeds
  ``Query: q Document: d Relevant:`` to the encoder and reads the decoder's first step.
- ``decoder`` (a causal LM such as SmolLM2 / Llama): the XTR layer clones the last decoder
  layer and the final norm; the reranker reads the next-token logits after the same prompt.

A rerank score is ``log P(true)`` with the softmax taken over the two answer tokens
``{true, false}`` (monoT5's score; the log keeps float resolution where P(true) nears 1).
Token embeddings are L2-normalised rows, one per token of the query / document text (the
template's own tokens, special tokens and padding are dropped).
"""

from __future__ import annotations

import copy
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lr_opensearch.errors import BundleError, ConfigError
from lr_opensearch.ur2n.bundle import (
    BACKBONE_DIR,
    HEAD_FILE,
    UR2NBundle,
    UR2NConfig,
    load_ur2n_bundle,
    save_ur2n_bundle,
)
from lr_opensearch.ur2n.text import Framed, answer_token_id, frame_template, pad_batch

logger = logging.getLogger(__name__)

KINDS_OF_TEXT = ("query", "document")


@dataclass
class TokenBatch:
    """Framed texts as tensors: ids, attention mask and content mask, all [B, T]."""

    ids: torch.Tensor
    attention_mask: torch.Tensor
    content_mask: torch.Tensor


@dataclass
class LayerInputs:
    """What the backbone passes its last layer (hidden state first, then masks / positions).

    Captured once from the frozen backbone; the XTR layer is called with exactly these, so
    it sees what the last layer sees. Holding them is what lets training cache them.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]


class _Captured(Exception):
    """Raised by the capture hook to stop the frozen forward at the last layer."""


class XTRHead(nn.Module):
    """The XTR layer (a clone of the last layer and of the final norm) and the projection."""

    def __init__(self, layer: nn.Module, norm: nn.Module, hidden_size: int, token_dim: int):
        super().__init__()
        self.layer = copy.deepcopy(layer)
        self.norm = copy.deepcopy(norm)
        self.proj = nn.Linear(hidden_size, token_dim, bias=False)
        self.requires_grad_(True)

    def forward(self, inputs: LayerInputs) -> torch.Tensor:  # type: ignore[override]
        """[B, T, token_dim] L2-normalised token embeddings of every position."""
        out = self.layer(*inputs.args, **inputs.kwargs)
        hidden = out[0] if isinstance(out, tuple) else out
        return F.normalize(self.proj(self.norm(hidden)).float(), p=2, dim=-1)


class UR2NModel(nn.Module):
    """A frozen reranker backbone with a trainable XTR head (see the module docstring).

    Build with :meth:`from_pretrained` (any HF T5 or causal-LM directory), :meth:`from_hf`
    (a model in memory, e.g. a tiny random one) or :meth:`from_bundle`.
    """

    def __init__(self, hf: nn.Module, tokenizer: Any, config: UR2NConfig, head: XTRHead | None = None):
        super().__init__()
        self.hf = hf.eval().requires_grad_(False)
        self.tokenizer = tokenizer
        self.config = config
        last, norm = self._last_layer_and_norm()
        self.head = head if head is not None else XTRHead(last, norm, config.hidden_size, config.token_dim)
        self.pad_id = int(getattr(hf.config, "pad_token_id", None) or 0)

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_hf(cls, hf: nn.Module, tokenizer: Any, *, name: str = "in-memory", token_dim: int = 128,
                max_length: int = 256, query_max_length: int = 64, seed: int = 0,
                **templates: str) -> UR2NModel:
        """Wrap an HF T5ForConditionalGeneration or causal LM; the projection is seeded."""
        hf_config: Any = hf.config
        kind = "t5" if hf_config.is_encoder_decoder else "decoder"
        if kind == "t5" and hf_config.model_type not in ("t5", "mt5", "umt5"):
            raise ConfigError(f"{name}: encoder-decoder model_type {hf_config.model_type!r} is not "
                              "supported; UR²N takes T5-family checkpoints or causal LMs")
        config = UR2NConfig(
            backbone_name=name, architecture=type(hf).__name__, kind=kind,
            hidden_size=int(getattr(hf_config, "d_model", None) or hf_config.hidden_size),
            token_dim=token_dim, max_length=max_length, query_max_length=query_max_length,
            true_token_id=answer_token_id(tokenizer, "true", kind),
            false_token_id=answer_token_id(tokenizer, "false", kind), **templates)
        model = cls(hf, tokenizer, config)
        generator = torch.Generator().manual_seed(seed)  # the projection's init, reproducibly
        with torch.no_grad():
            weight = torch.empty(model.head.proj.weight.shape)
            nn.init.kaiming_uniform_(weight, a=math.sqrt(5), generator=generator)  # nn.Linear's init
            model.head.proj.weight.copy_(weight)
        return model

    @classmethod
    def from_pretrained(cls, path: str | Path, *, dtype: torch.dtype = torch.float32,
                        **kwargs: Any) -> UR2NModel:
        """Load an HF directory (or ``packaged:smollm2``) with a fresh XTR head (see from_hf)."""
        from tokenizers import Tokenizer

        from lr_opensearch.model.loading import load_hf
        from lr_opensearch.packaged import resolve_model

        model_dir, display = resolve_model(str(path))
        if not (model_dir / "tokenizer.json").is_file():
            raise ConfigError(f"{model_dir}: no tokenizer.json (UR²N reads the fast tokenizer file); "
                              "save the tokenizer with a recent transformers first")
        hf, _ = load_hf(model_dir, dtype)
        tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        return cls.from_hf(hf, tokenizer, name=display or str(path), **kwargs)

    @classmethod
    def from_bundle(cls, bundle: UR2NBundle | str | Path, *, dtype: torch.dtype = torch.float32) -> UR2NModel:
        """Load a UR²N bundle: the backbone, the tokenizer and the trained XTR head."""
        from safetensors.torch import load_file

        from lr_opensearch.model.loading import load_hf

        b = bundle if isinstance(bundle, UR2NBundle) else load_ur2n_bundle(bundle)
        hf, _ = load_hf(b.backbone_dir, dtype)
        model = cls(hf, b.tokenizer, b.config)
        state = load_file(str(b.head_file))
        try:
            model.head.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise BundleError(f"{b.head_file}: does not fit the backbone's last layer: {exc}") from None
        model.head.to(dtype)
        return model.eval()

    def save(self, out: str | Path, *, overwrite: bool = False,
             training: dict[str, Any] | None = None) -> Path:
        """Write a UR²N bundle (backbone, tokenizer, XTR head, manifest)."""
        from safetensors.torch import save_file

        hf: Any = self.hf

        def write(root: Path) -> None:
            hf.save_pretrained(root / BACKBONE_DIR, safe_serialization=True)
            state = {k: v.detach().contiguous().cpu() for k, v in self.head.state_dict().items()}
            save_file(state, str(root / HEAD_FILE), metadata={"format": "ur2n-xtr-head"})

        return save_ur2n_bundle(out, self.config, tokenizer=self.tokenizer, write_parts=write,
                                overwrite=overwrite, training=training)

    def train(self, mode: bool = True) -> UR2NModel:
        """Only the head trains; the frozen backbone stays in eval mode (no dropout)."""
        super().train(mode)
        self.hf.eval()
        return self

    # ------------------------------------------------------------------ backbone parts

    def _stack(self) -> nn.Module:
        hf: Any = self.hf
        return hf.encoder if self.config.kind == "t5" else hf.base_model

    def _last_layer_and_norm(self) -> tuple[nn.Module, nn.Module]:
        stack: Any = self._stack()
        layers = getattr(stack, "block", None) if self.config.kind == "t5" else getattr(stack, "layers", None)
        norm = getattr(stack, "final_layer_norm" if self.config.kind == "t5" else "norm", None)
        if layers is None or norm is None:
            raise ConfigError(f"{type(self.hf).__name__}: cannot find the layer list and final norm "
                              "the XTR layer clones (T5 encoder.block / final_layer_norm, or a "
                              "causal LM's model.layers / model.norm)")
        return layers[-1], norm

    @property
    def device(self) -> torch.device:
        return next(self.hf.parameters()).device

    # ------------------------------------------------------------------ retrieval side

    def frame(self, texts: Sequence[str], *, kind: str) -> list[Framed]:
        """Frame queries or documents with their template (see ``ur2n_text``)."""
        if kind not in KINDS_OF_TEXT:
            raise ConfigError(f"unknown kind {kind!r}; valid: {', '.join(KINDS_OF_TEXT)}")
        c = self.config
        template, limit = ((c.query_template, c.query_max_length) if kind == "query"
                           else (c.document_template, c.max_length))
        return [frame_template(self.tokenizer, template, {"text": t}, "text", limit,
                               suffix=c.kind == "t5") for t in texts]

    def batch(self, framed: Sequence[Framed]) -> TokenBatch:
        """Pad framed texts into tensors on the model's device."""
        ids, attn, slot = pad_batch(framed, self.pad_id)
        dev = self.device
        return TokenBatch(torch.tensor(ids, device=dev), torch.tensor(attn, device=dev),
                          torch.tensor(slot, dtype=torch.bool, device=dev))

    @torch.no_grad()
    def layer_inputs(self, batch: TokenBatch) -> LayerInputs:
        """Run the frozen backbone up to its last layer and capture that layer's inputs."""
        last, _ = self._last_layer_and_norm()
        box: dict[str, Any] = {}

        def hook(_module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            box["inputs"] = LayerInputs(tuple(args), dict(kwargs))
            raise _Captured

        handle = last.register_forward_pre_hook(hook, with_kwargs=True)
        try:
            self._stack()(input_ids=batch.ids, attention_mask=batch.attention_mask, use_cache=False)
        except _Captured:
            pass
        finally:
            handle.remove()
        if "inputs" not in box:
            raise ConfigError(f"{type(self.hf).__name__}: the backbone never called its last layer")
        return box["inputs"]

    def token_tensor(self, inputs: LayerInputs) -> torch.Tensor:
        """[B, T, token_dim] token embeddings of every position (differentiable in the head)."""
        return self.head(inputs)

    @torch.no_grad()
    def token_embeddings(self, texts: Sequence[str], *, kind: str, batch_size: int = 16) -> list[np.ndarray]:
        """One ``[T_i, token_dim]`` float32 array of L2-normalised rows per text (its own tokens)."""
        framed = self.frame(texts, kind=kind)
        out: list[np.ndarray] = []
        for start in range(0, len(framed), batch_size):
            batch = self.batch(framed[start : start + batch_size])
            emb = self.token_tensor(self.layer_inputs(batch)).cpu().numpy()
            mask = batch.content_mask.cpu().numpy()
            out += [np.ascontiguousarray(emb[i][mask[i]], dtype=np.float32) for i in range(len(emb))]
        return out

    # ------------------------------------------------------------------ reranker side

    @torch.no_grad()
    def answer_logits(self, batch: TokenBatch) -> torch.Tensor:
        """[B, 2] logits of (false, true) for framed rerank prompts (the unchanged backbone)."""
        hf: Any = self.hf
        pair = [self.config.false_token_id, self.config.true_token_id]
        if self.config.kind == "t5":
            start = torch.full((batch.ids.shape[0], 1), int(hf.config.decoder_start_token_id),
                               dtype=torch.long, device=batch.ids.device)
            logits = hf(input_ids=batch.ids, attention_mask=batch.attention_mask,
                        decoder_input_ids=start, use_cache=False).logits
            return logits[:, 0, pair].float()
        hidden = hf.base_model(input_ids=batch.ids, attention_mask=batch.attention_mask,
                               use_cache=False).last_hidden_state
        last = batch.attention_mask.sum(dim=1) - 1
        state = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
        head = hf.get_output_embeddings()
        logits = state @ head.weight[pair].T  # only the two answer columns of the LM head
        if getattr(head, "bias", None) is not None:
            logits = logits + head.bias[pair]
        return logits.float()

    def rerank_scores(self, query: str, texts: Sequence[str], *, batch_size: int = 16,
                      max_length: int | None = None) -> list[float]:
        """``log P(true)`` over {true, false} for each text, read with ``query``; the prompt
        is cut to ``max_length`` tokens (default the bundle's ``max_length``)."""
        c = self.config
        limit = max_length or c.max_length
        framed = [frame_template(self.tokenizer, c.rerank_template, {"query": query, "document": t},
                                 "document", limit, suffix=c.kind == "t5") for t in texts]
        scores: list[float] = []
        for start in range(0, len(framed), batch_size):
            logits = self.answer_logits(self.batch(framed[start : start + batch_size]))
            scores += torch.log_softmax(logits, dim=-1)[:, 1].tolist()
        return scores


class UR2NReranker:
    """The UR²N backbone as a rerank stage's scorer (``lr_opensearch.search.rerank.Reranker``)."""

    name = "ur2n"

    def __init__(self, bundle_or_model: UR2NModel | UR2NBundle | str | Path, *, batch_size: int = 16,
                 max_length: int | None = None):
        self.model = (bundle_or_model if isinstance(bundle_or_model, UR2NModel)
                      else UR2NModel.from_bundle(bundle_or_model))
        self.batch_size = batch_size
        self.max_length = max_length

    def score(self, query: str, texts: Sequence[str]) -> list[float]:
        return self.model.rerank_scores(query, list(texts), batch_size=self.batch_size,
                                        max_length=self.max_length)
