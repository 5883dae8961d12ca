"""``NumpyHead``'s sparse projection run by torch's ``fused.projection_max`` with its
bfloat16 screen, for the ONNX Runtime encoder where torch is installed and bfloat16 is
fast on the CPU (AVX-512 BF16 or AMX): the projection is most of a long document's cost,
numpy has no bfloat16 GEMM, and the screen keeps float32's weights for every kept term
(proved per row, ``fused.projection_max``), as ``DocEncoder`` computes them at fp32.
Imports torch: ``OnnxDocEncoder`` loads this module only when it chooses the screen.
"""

from __future__ import annotations

import numpy as np
import torch

from lr_opensearch.model.fused import projection_max, sparse_activation
from lr_opensearch.model.numpy_head import NumpyHead
from lr_opensearch.model.precision import bf16_is_fast


def screen_is_fast() -> bool:
    return bf16_is_fast(torch.device("cpu"))


def screened_sparse(head: NumpyHead, hidden: np.ndarray, mask: np.ndarray, prefix: int) -> np.ndarray:
    """``head.sparse(hidden, mask, prefix)``'s values, the top (top_k + specials) of each
    row float32's exactly, the rest the bfloat16 pass's (never kept)."""
    content = torch.from_numpy(head.content(mask, prefix))
    bias = None if head.bias is None else torch.from_numpy(head.bias)
    with torch.inference_mode():
        maxima = projection_max(torch.from_numpy(hidden), content, torch.from_numpy(head.weight),
                                bias, exact_top=head.top_k + len(head.excluded))
        return sparse_activation(maxima).numpy()
