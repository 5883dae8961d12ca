"""The one-time torch export of an encoder's backbone to ONNX (``onnx_graph`` caches it).

The exported function is THE document forward's body (``LightRetrieverModel.body``, with
its position ids ``cumsum(mask) - 1``), with eager attention (the implementation whose
masking exports exactly; SDPA's fused kernels do not export on every torch), and for an
MLM sparse head also the head's transform of the hidden states. The projection weights go
beside it (``head.safetensors``). Before it is cached the graph is run against torch on a
probe batch: a graph that differs by more than ``EXPORT_TOLERANCE`` is refused.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from lr_opensearch.errors import ConfigError
from lr_opensearch.model.lightretriever import LightRetrieverModel
from lr_opensearch.model.onnx_session import graph_inputs
from lr_opensearch.model.settings import RetrieverSettings

logger = logging.getLogger(__name__)

OPSET = 17
#: the largest |hidden state| difference accepted between the export and torch on the probe
EXPORT_TOLERANCE = 1e-4


class _Body(nn.Module):
    """input_ids, attention_mask [B, T] -> hidden [B, T, H] (and the MLM transform of it)."""

    def __init__(self, model: LightRetrieverModel) -> None:
        super().__init__()
        self.model = model
        self.head_hidden = model.head.transform_path is not None

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):  # type: ignore[override]
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        hidden = self.model.body(input_ids, attention_mask, position_ids)
        if self.head_hidden:
            return hidden, self.model.head.transform(self.model.hf, hidden)
        return hidden


def export_graph(model_dir: Path, sparse_head: str, work: Path, tokenizer: Any = None,
                 ) -> dict[str, Any]:
    """Export the encoder in ``model_dir``: ``onnx_graph.write_graph``'s arguments (the
    graph as a file in the directory ``work``, which write_graph moves into the cache).

    ``tokenizer`` (the bundle's) stands in for a missing tokenizer.json in ``model_dir``.

    Raises:
        ConfigError: a decoder backbone (runs on torch), or an export that disagrees with torch.
    """
    model = LightRetrieverModel.from_pretrained(model_dir, RetrieverSettings(sparse_head=sparse_head),
                                                tokenizer=tokenizer).eval()
    if model.kind != "encoder":
        raise ConfigError(f"{model_dir} is a decoder ({model.architecture}); its document "
                          "forward runs on torch only: use --runtime torch")
    setter = getattr(model.hf, "set_attn_implementation", None)
    if callable(setter):
        setter("eager")
    else:
        model.hf.config._attn_implementation = "eager"
    body = _Body(model).eval()
    probe = _probe(model.vocab_size)
    names = ["hidden", "head_hidden"] if body.head_hidden else ["hidden"]
    logger.info("exporting %s to ONNX once (torch %s, opset %d)", model_dir, torch.__version__, OPSET)
    path = work / "model.onnx"
    axes = {n: {0: "batch", 1: "length"} for n in ("input_ids", "attention_mask", *names)}
    with torch.inference_mode():
        torch.onnx.export(body, probe, str(path), input_names=["input_ids", "attention_mask"],
                          output_names=names, dynamic_axes=axes, opset_version=OPSET, dynamo=False)
        expected = body(*probe)
    _check_export(path, probe, expected if body.head_hidden else (expected,))
    weight, bias = model.head.projection(model.hf)
    head = {"weight": weight.detach().float().numpy()}
    if bias is not None:
        head["bias"] = bias.detach().float().numpy()
    return {"onnx_bytes": path, "source": f"export torch {torch.__version__}", "head": head,
            "head_hidden": body.head_hidden}


def _probe(vocab: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of different lengths (right padding), ids spread over the vocabulary."""
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (2, 11), generator=gen)
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 7:] = 0
    return ids, mask


def _check_export(path: Path, probe: tuple[torch.Tensor, torch.Tensor],
                  expected: tuple[torch.Tensor, ...]) -> None:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids, mask = (t.numpy() for t in probe)
    got = session.run(None, graph_inputs(session, ids, mask))
    real = mask.astype(bool)
    for name, ours, theirs in zip(("hidden", "head_hidden"), got, expected, strict=False):
        gap = float(np.abs(ours[real] - theirs.float().numpy()[real]).max())
        if not gap <= EXPORT_TOLERANCE:
            raise ConfigError(f"the ONNX export of the encoder differs from torch by {gap:.2e} in "
                              f"its {name} (tolerance {EXPORT_TOLERANCE}); use --runtime torch")
