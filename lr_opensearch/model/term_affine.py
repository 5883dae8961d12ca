"""A per-term scale and bias on the sparse head's maxima (the fitted document side, issue 48).

The ``max`` sparse vector is ``s_t = log1p(relu(z_t))`` with ``z_t`` the max over positions of
the projection's logit of term t. ``TermAffine`` makes it ``log1p(relu(a_t * z_t + c_t))``
with ``a_t > 0``: since ``a_t x + c_t`` is increasing in x, it is the same as applying the
affine map to every position's logit before the max, so the max over positions (and the
fused projection) are untouched and a document's cached maxima suffice to fit ``a`` and
``c`` (``fit.sparse``). ``a = 1, c = 0`` is the head as it was.

Saved as ``doc_encoder/sparse_term_affine.safetensors``: tensors ``scale`` and ``bias``
([V] float32) and metadata ``format`` / ``format_version``, which loading checks. The file,
its reader and the arithmetic are ``model.sparse_fits``'s (torch-free: ONNX Runtime's numpy
head applies the same).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from lr_opensearch.errors import BundleError
from lr_opensearch.model.sparse_fits import (
    TERM_AFFINE_FORMAT,
    TERM_AFFINE_VERSION,
    affine_maxima,
    check_term_affine,
    read_term_affine,
    write_checked,
)


class TermAffine(nn.Module):
    """``z -> scale * z + bias`` per vocabulary term.

    Args:
        scale: [V] positive factors.
        bias: [V] offsets.
    """

    scale: torch.Tensor
    bias: torch.Tensor

    def __init__(self, scale: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        scale, bias = torch.as_tensor(scale).float(), torch.as_tensor(bias).float()
        check_term_affine(scale.detach().cpu().numpy(), bias.detach().cpu().numpy(), "term affine")
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias)

    @property
    def vocab_size(self) -> int:
        return int(self.scale.shape[0])

    def forward(self, maxima: torch.Tensor) -> torch.Tensor:
        """[B, V] maxima (``-inf`` stays ``-inf``) -> [B, V] ``scale * maxima + bias``."""
        return affine_maxima(maxima, self.scale.to(maxima.dtype), self.bias.to(maxima.dtype))

    def save(self, path: str | Path) -> Path:
        """Write the safetensors file with its format name and version."""
        tensors = {"scale": self.scale.detach().cpu().numpy(), "bias": self.bias.detach().cpu().numpy()}
        return write_checked(path, TERM_AFFINE_FORMAT, TERM_AFFINE_VERSION, tensors)

    @classmethod
    def load(cls, path: str | Path, vocab_size: int) -> TermAffine:
        """Read a file :meth:`save` wrote for a head of ``vocab_size`` terms.

        Raises:
            BundleError: a foreign or newer file, or one of another vocabulary size.
        """
        scale, bias = read_term_affine(path)
        head = cls(torch.from_numpy(scale), torch.from_numpy(bias))
        if head.vocab_size != vocab_size:
            raise BundleError(f"{path}: {head.vocab_size} terms, but the sparse head has {vocab_size}")
        return head

