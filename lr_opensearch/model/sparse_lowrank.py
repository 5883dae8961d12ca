"""A low-rank correction to the sparse head's projection (the fitted document side, issue 48 1b).

The ``max`` sparse vector is ``s_t = log1p(relu(max_p h_p . W_t + b_t))`` (``W`` [V, H]: for
the packaged encoders the input embeddings, ``tied``). ``LowRankCorrection`` makes the
projection ``W + up @ down^T`` (``up`` [V, r], ``down`` [H, r]): every document position
can raise or lower any term through r shared directions of the hidden state, so the
correction can add a term to one document and not to another (a per-term scale and bias,
``model.term_affine``, cannot). ``up = 0`` is the head as it was.

Saved as ``doc_encoder/sparse_lowrank.safetensors``: tensors ``up`` and ``down`` (float32)
and metadata ``format`` / ``format_version``, which loading checks. The file, its reader and
the arithmetic are ``model.sparse_fits``'s (torch-free: ONNX Runtime's numpy head folds the
same correction into its projection at load).
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from lr_opensearch.errors import BundleError
from lr_opensearch.model.sparse_fits import (
    LOWRANK_FORMAT,
    LOWRANK_VERSION,
    check_lowrank,
    corrected_projection,
    read_lowrank,
    write_checked,
)


class LowRankCorrection(nn.Module):
    """``W -> W + up @ down^T`` on the sparse projection.

    Args:
        up: [V, r] per-term factors.
        down: [H, r] hidden-state directions.
    """

    up: torch.Tensor
    down: torch.Tensor

    def __init__(self, up: torch.Tensor, down: torch.Tensor) -> None:
        super().__init__()
        up, down = torch.as_tensor(up).float(), torch.as_tensor(down).float()
        check_lowrank(up.detach().cpu().numpy(), down.detach().cpu().numpy(), "sparse low-rank correction")
        self.register_buffer("up", up)
        self.register_buffer("down", down)

    @property
    def rank(self) -> int:
        return int(self.up.shape[1])

    def corrected(self, weight: torch.Tensor) -> torch.Tensor:
        """[V, H] projection weight -> [V, H] ``weight + up @ down^T`` (in weight's dtype)."""
        if weight.shape != (self.up.shape[0], self.down.shape[0]):
            raise BundleError(f"sparse low-rank correction of [{self.up.shape[0]}, {self.down.shape[0]}] "
                              f"applied to a projection of {list(weight.shape)}")
        return corrected_projection(weight.float(), self.up, self.down).to(weight.dtype)

    def save(self, path: str | Path) -> Path:
        """Write the safetensors file with its format name and version."""
        tensors = {"up": self.up.detach().cpu().numpy(), "down": self.down.detach().cpu().numpy()}
        return write_checked(path, LOWRANK_FORMAT, LOWRANK_VERSION, tensors)

    @classmethod
    def load(cls, path: str | Path, vocab_size: int, hidden_size: int) -> LowRankCorrection:
        """Read a file :meth:`save` wrote for a projection of [vocab_size, hidden_size].

        Raises:
            BundleError: a foreign or newer file, or one of other sizes.
        """
        up, down = read_lowrank(path)
        head = cls(torch.from_numpy(up), torch.from_numpy(down))
        if head.up.shape[0] != vocab_size or head.down.shape[0] != hidden_size:
            raise BundleError(f"{path}: a correction of [{head.up.shape[0]}, {head.down.shape[0]}], but "
                              f"the sparse projection is [{vocab_size}, {hidden_size}]")
        return head
