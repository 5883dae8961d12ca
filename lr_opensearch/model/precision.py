"""The document encoder's numeric precision (``options.ENCODE_PRECISIONS``).

- ``fp32``: the model as loaded, float32 (the default). Where bfloat16 is fast (a CPU with
  AVX-512 BF16 or AMX) the sparse vector's vocabulary projection is screened in bfloat16
  and the weights a document keeps are computed again in float32, with a bound proving
  that none was missed (``fused.projection_max``'s ``exact_top``): the same vectors as
  float32 throughout, up to float rounding.
- ``bf16``: also the backbone's ``nn.Linear`` layers multiply in bfloat16 (weights stored
  in bfloat16, inputs cast, products accumulated in float32 and returned as float32, bias
  added in float32) on a copy of the model; the residual stream, attention, LayerNorm and
  pooling stay float32. Approximate: the vectors move by bfloat16's rounding, so near-tied
  sparse terms at a document's top-k boundary can trade places.
- ``int8``: the backbone's ``nn.Linear`` layers dynamically quantized to int8
  (``torch.ao.quantization.quantize_dynamic``: int8 weights, activations quantized per
  batch) on a copy of the model. CPU only.

The weights on disk never change: a precision is how vectors are computed, not what a
bundle holds, so an index written with one precision is searched with the same bundle.
``docs/RESULTS.md`` has the speed and the agreement with fp32 measured on a CPU.
"""

from __future__ import annotations

import copy
import logging

import torch
from torch import nn

from lr_opensearch.errors import ConfigError
from lr_opensearch.model.heads import unwrap
from lr_opensearch.model.lightretriever import LightRetrieverModel
from lr_opensearch.options import ENCODE_PRECISIONS, choice

logger = logging.getLogger(__name__)


def check_precision(precision: str, device: torch.device) -> str:
    """``precision`` if it is one of ``ENCODE_PRECISIONS`` and runs on ``device``.

    Raises:
        ConfigError: an unknown name, int8 on a GPU, or no int8 kernels in this torch.
    """
    choice("--encode-precision", precision, ENCODE_PRECISIONS)
    if precision == "int8":
        if device.type != "cpu":
            raise ConfigError(f"--encode-precision int8 runs on the CPU only, not {device}; "
                              "use --device cpu, or bf16 on a GPU")
        engines = torch.backends.quantized.supported_engines
        if not {"x86", "fbgemm", "onednn"} & set(engines):
            raise ConfigError("--encode-precision int8: this torch build has no x86 int8 "
                              f"kernels (quantized engines: {', '.join(engines)}); use fp32 "
                              "or bf16, or install the PyPI torch wheel")
    return precision


class Bf16Linear(nn.Module):
    """An ``nn.Linear`` that multiplies in bfloat16 and returns float32 (see the module doc)."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = nn.Parameter(linear.weight.detach().to(torch.bfloat16), requires_grad=False)
        bias = linear.bias
        self.bias = None if bias is None else nn.Parameter(bias.detach().float(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = nn.functional.linear(x.to(torch.bfloat16), self.weight).float()
        return out if self.bias is None else out + self.bias


def _swap_linears(module: nn.Module) -> int:
    """Replace every ``nn.Linear`` under ``module`` by a ``Bf16Linear``; returns how many."""
    count = 0
    for name, child in list(module.named_children()):
        if type(child) is nn.Linear:
            setattr(module, name, Bf16Linear(child))
            count += 1
        else:
            count += _swap_linears(child)
    return count


def prepare(model: LightRetrieverModel, precision: str) -> LightRetrieverModel:
    """The model to run at ``precision``: ``model`` itself for fp32, a converted copy
    otherwise (``model`` is left as it was: ``lr bundle build`` saves it afterwards). Only
    the backbone body changes: the vocabulary projection's weights stay as they are."""
    if precision == "fp32":
        return model
    converted = copy.deepcopy(model)
    body = unwrap(converted.hf).base_model
    if precision == "int8":
        torch.ao.quantization.quantize_dynamic(body, {nn.Linear}, dtype=torch.qint8, inplace=True)
        logger.info("doc encoder: the backbone's Linear layers quantized to int8 (dynamic)")
    else:
        logger.info("doc encoder: %d Linear layers of the backbone in bfloat16", _swap_linears(body))
    return converted


def bf16_is_fast(device: torch.device) -> bool:
    """Whether bfloat16 matmuls beat float32 on ``device``: a CPU with AVX-512 BF16 or
    AMX (oneDNN's check), or a CUDA GPU that supports bfloat16."""
    if device.type == "cpu":
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def sparse_exact_top(precision: str, device: torch.device, top_k: int, specials: int) -> int | None:
    """The ``exact_top`` of ``LightRetrieverModel.encode_documents`` for a ``DocEncoder``:
    the ``top_k`` weights a document keeps plus the ``specials`` dropped before the top-k,
    screened in bfloat16 where that is fast (at any precision: the kept weights are
    float32's, proved, see ``fused.projection_max``); None (float32 throughout) elsewhere."""
    if precision == "bf16" or (device.type == "cpu" and bf16_is_fast(device)):
        return top_k + specials
    return None
