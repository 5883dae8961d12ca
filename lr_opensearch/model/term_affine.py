"""A per-term scale and bias on the sparse head's maxima (the fitted document side, issue 48).

The ``max`` sparse vector is ``s_t = log1p(relu(z_t))`` with ``z_t`` the max over positions of
the projection's logit of term t. ``TermAffine`` makes it ``log1p(relu(a_t * z_t + c_t))``
with ``a_t > 0``: since ``a_t x + c_t`` is increasing in x, it is the same as applying the
affine map to every position's logit before the max, so the max over positions (and the
fused projection) are untouched and a document's cached maxima suffice to fit ``a`` and
``c`` (``fit.sparse``). ``a = 1, c = 0`` is the head as it was.

Saved as ``doc_encoder/sparse_term_affine.safetensors``: tensors ``scale`` and ``bias``
([V] float32) and metadata ``format`` / ``format_version``, which loading checks.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from lr_opensearch.errors import BundleError

TERM_AFFINE_FILE = "sparse_term_affine.safetensors"
TERM_AFFINE_FORMAT = "lr-sparse-term-affine"
TERM_AFFINE_VERSION = 1


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
        if scale.dim() != 1 or scale.shape != bias.shape:
            raise BundleError(f"term affine: scale {list(scale.shape)} and bias {list(bias.shape)} "
                              "must be two vectors of the vocabulary's size")
        if not (torch.isfinite(scale).all() and torch.isfinite(bias).all() and (scale > 0).all()):
            raise BundleError("term affine: scale must be finite and > 0 and bias finite")
        self.register_buffer("scale", scale)
        self.register_buffer("bias", bias)

    @property
    def vocab_size(self) -> int:
        return int(self.scale.shape[0])

    def forward(self, maxima: torch.Tensor) -> torch.Tensor:
        """[B, V] maxima (``-inf`` stays ``-inf``) -> [B, V] ``scale * maxima + bias``."""
        return maxima * self.scale.to(maxima.dtype) + self.bias.to(maxima.dtype)

    def save(self, path: str | Path) -> Path:
        """Write the safetensors file with its format name and version."""
        from safetensors.torch import save_file

        save_file({"scale": self.scale.detach().cpu().contiguous(),
                   "bias": self.bias.detach().cpu().contiguous()}, str(path),
                  metadata={"format": TERM_AFFINE_FORMAT, "format_version": str(TERM_AFFINE_VERSION)})
        return Path(path)

    @classmethod
    def load(cls, path: str | Path, vocab_size: int) -> TermAffine:
        """Read a file :meth:`save` wrote for a head of ``vocab_size`` terms.

        Raises:
            BundleError: a foreign or newer file, or one of another vocabulary size.
        """
        tensors = read_checked(path, TERM_AFFINE_FORMAT, TERM_AFFINE_VERSION, ("scale", "bias"),
                               "a sparse term affine file")
        head = cls(tensors["scale"], tensors["bias"])
        if head.vocab_size != vocab_size:
            raise BundleError(f"{path}: {head.vocab_size} terms, but the sparse head has {vocab_size}")
        return head


def read_checked(path: str | Path, fmt: str, version: int, names: tuple[str, ...], what: str,
                 ) -> dict[str, torch.Tensor]:
    """The tensors ``names`` of a safetensors file whose metadata names ``fmt`` at a version
    up to ``version`` (the fitted sparse heads' files).

    Raises:
        BundleError: a foreign or newer file, or one without a tensor named.
    """
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
        if meta.get("format") != fmt:
            raise BundleError(f"{path}: not {what} (format {meta.get('format')!r}, expected {fmt!r})")
        found = int(meta.get("format_version", "0"))
        if found > version:
            raise BundleError(f"{path}: format version {found} is newer than this library "
                              f"reads ({version}); upgrade lr-opensearch")
        missing = set(names) - set(f.keys())
        if missing:
            raise BundleError(f"{path}: tensors {sorted(missing)} are missing")
        return {n: f.get_tensor(n) for n in names}
