"""The document encoder's numeric precision (``options.ENCODE_PRECISIONS``).

- ``fp32``: the model as loaded, float32 (the default). Where bfloat16 is fast (a CPU with
  AVX-512 BF16 or AMX) the sparse vector's vocabulary projection is screened in bfloat16
  and the weights a document keeps are computed again in float32, with a bound proving
  that none was missed (``fused.projection_max``'s ``exact_top``): the same vectors as
  float32 throughout, up to float rounding.
- ``mixed``: the backbone body's matrix products (linear layers, attention) in bfloat16
  under ``torch.autocast``; its weights stay float32 and are cast per batch, and the
  residual stream, LayerNorm, softmax and everything after the body (pooling, the
  sparse projection screened as above) stay float32. Approximate, closer to fp32 than
  ``bf16``.
- ``bf16``: the backbone body (embeddings, attention, feed-forward, LayerNorm) in
  bfloat16 on a copy of the model, its last hidden states returned to float32 for pooling
  and the heads; the sparse projection screened as above. Approximate: the vectors move by
  bfloat16's rounding (tied heads also project with the bfloat16 input embeddings), so
  near-tied sparse terms at a document's top-k boundary can trade places.

int8 dynamic quantization of the backbone's Linear layers (``quantize_dynamic``) was
measured too and left out: MiniLM's dense vectors fell to cosine 0.90 to fp32 and
nDCG@10 by 0.02 to 0.05 (docs/RESULTS.md). On ONNX Runtime (issue 47) both int8 graphs,
its dynamic quantisation and the LangChain4j ``-q`` jar's, moved LR hybrid, dense or sparse
nDCG@10 by more than 0.005 on ADI, CISI and Cranfield (docs/results/encoding.md): no int8
option.

The weights on disk never change: a precision is how vectors are computed, not what a
bundle holds, so an index written with one precision is searched with the same bundle.
``docs/RESULTS.md`` has the speed and the agreement with fp32 measured on a CPU, and
``bench/cpu_encode.py`` measures them against the machine's GEMM peak.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

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
        ConfigError: an unknown name, or bf16 on a device without bfloat16 (the message
            says what to use instead).
    """
    choice("--encode-precision", precision, ENCODE_PRECISIONS)
    if precision == "fp32":
        return precision
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ConfigError(f"--encode-precision {precision}: the GPU {device} has no bfloat16 "
                          "support; use --encode-precision fp32")
    if device.type == "cpu" and not bf16_is_fast(device):
        logger.warning("--encode-precision %s: this CPU has neither AVX-512 BF16 nor AMX, "
                       "so bfloat16 is emulated and likely slower than fp32", precision)
    return precision


def _float_output(module: nn.Module, args: Any, output: Any) -> Any:
    """Forward hook: the body's last hidden states back in float32 for the heads."""
    output.last_hidden_state = output.last_hidden_state.float()
    return output


def prepare(model: LightRetrieverModel, precision: str) -> LightRetrieverModel:
    """The model to run at ``precision``: ``model`` itself for fp32, a converted copy
    otherwise (``model`` is left as it was: ``lr bundle build`` saves it afterwards)."""
    if precision == "fp32":
        return model
    if precision == "mixed":  # nothing converted: the body runs under autocast
        mixed = copy.copy(model)
        mixed.body_autocast = torch.bfloat16
        logger.info("doc encoder: the backbone body's matrix products in bfloat16")
        return mixed
    converted = copy.deepcopy(model)
    body = unwrap(converted.hf).base_model
    body.to(torch.bfloat16)
    body.register_forward_hook(_float_output)
    logger.info("doc encoder: the backbone body in bfloat16")
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
    if precision != "fp32" or (device.type == "cpu" and bf16_is_fast(device)):
        return top_k + specials
    return None
