"""``NumpyHead``'s sparse projection run by torch's ``fused.projection_max`` with its
bfloat16 screen (``OnnxDocEncoder(screen=True)``, opt-in): numpy has no bfloat16 GEMM, and
the screen keeps float32's weights for every kept term (proved per row), as ``DocEncoder``
computes them at fp32. Measured on ADI under load it was no faster than numpy's float32
(docs/RESULTS.md, issue 47), so it is off by default. Imports torch.
"""

from __future__ import annotations

import numpy as np
import torch

from lr_opensearch.model.fused import projection_max, sparse_activation
from lr_opensearch.model.numpy_head import NumpyHead


def screened_sparse(head: NumpyHead, hidden: np.ndarray, mask: np.ndarray, prefix: int) -> np.ndarray:
    """``head.sparse(hidden, mask, prefix)``'s values, the top (top_k + specials) of each
    row float32's exactly, the rest the bfloat16 pass's (never kept). With a fitted per-term
    scale and bias there is no screen (it proves the top of the raw maxima, not of theirs),
    as on torch (``LightRetrieverModel.encode_documents``)."""
    content = torch.from_numpy(head.content(mask, prefix))
    bias = None if head.bias is None else torch.from_numpy(head.bias)
    with torch.inference_mode():
        exact_top = None if head.term_scale is not None else head.top_k + len(head.excluded)
        maxima = projection_max(torch.from_numpy(hidden), content, torch.from_numpy(head.weight),
                                bias, exact_top=exact_top)
        if head.term_scale is not None:
            return head.activate(maxima.numpy())
        return sparse_activation(maxima).numpy()
