"""The fitted sparse document heads (issue 48) without torch: their files, their math, and
what ONNX Runtime's numpy head reads of a bundle.

Two fits change the "max" sparse vector ``log1p(relu(max_p (h_p . W_t) + b_t))``:

- a low-rank correction of the projection, ``W' = W + up @ down^T`` (``up`` [V, r],
  ``down`` [H, r]; ``model.sparse_lowrank``), applied to every position's logit;
- a per-term scale and bias after the max, ``a_t * z_t + c_t`` with ``a_t > 0``
  (``model.term_affine``), before ReLU and log1p.

``corrected_projection`` and ``affine_maxima`` are that arithmetic once, for numpy arrays
and torch tensors alike: the torch modules (``TermAffine``, ``LowRankCorrection``) and the
numpy head (``numpy_head.NumpyHead``, which ``OnnxDocEncoder`` builds with ``W'`` folded once
at load) both call them. Each fit is saved beside the doc encoder's weights as a safetensors
file whose metadata names its format and version (``read_checked``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from lr_opensearch.errors import BundleError

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

TERM_AFFINE_FILE = "sparse_term_affine.safetensors"
TERM_AFFINE_FORMAT = "lr-sparse-term-affine"
TERM_AFFINE_VERSION = 1
LOWRANK_FILE = "sparse_lowrank.safetensors"
LOWRANK_FORMAT = "lr-sparse-lowrank"
LOWRANK_VERSION = 1
#: files a doc encoder directory holds beside the backbone's weights (not part of them)
SPARSE_FIT_FILES = (TERM_AFFINE_FILE, LOWRANK_FILE)

T = TypeVar("T")


def corrected_projection(weight: T, up: Any, down: Any) -> T:
    """[V, H] ``weight + up @ down^T`` (``up`` [V, r], ``down`` [H, r]); numpy or torch."""
    return weight + up @ down.T  # type: ignore[operator, no-any-return]


def affine_maxima(maxima: T, scale: Any, bias: Any) -> T:
    """[B, V] ``scale * maxima + bias`` per term (``-inf``, a document without content,
    stays ``-inf``: ``scale > 0``); numpy or torch."""
    return maxima * scale + bias  # type: ignore[operator, no-any-return]


def write_checked(path: str | Path, fmt: str, version: int, tensors: dict[str, np.ndarray]) -> Path:
    """Write ``tensors`` (float32) as a safetensors file whose metadata names ``fmt`` and
    ``version``: the file ``read_checked`` reads back."""
    from safetensors.numpy import save_file

    save_file({n: np.ascontiguousarray(t, np.float32) for n, t in tensors.items()}, str(path),
              metadata={"format": fmt, "format_version": str(version)})
    return Path(path)


def read_checked(path: str | Path, fmt: str, version: int, names: tuple[str, ...], what: str,
                 ) -> dict[str, np.ndarray]:
    """The tensors ``names`` (numpy) of a safetensors file whose metadata names ``fmt`` at a
    version up to ``version``.

    Raises:
        BundleError: a foreign or newer file, or one without a tensor named.
    """
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
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


def check_term_affine(scale: np.ndarray, bias: np.ndarray, where: str) -> None:
    """BundleError unless scale and bias are two finite vectors of one size, scale > 0."""
    if scale.ndim != 1 or scale.shape != bias.shape:
        raise BundleError(f"{where}: scale {list(scale.shape)} and bias {list(bias.shape)} must be "
                          "two vectors of the vocabulary's size")
    if not (np.isfinite(scale).all() and np.isfinite(bias).all() and (scale > 0).all()):
        raise BundleError(f"{where}: scale must be finite and > 0 and bias finite")


def check_lowrank(up: np.ndarray, down: np.ndarray, where: str) -> None:
    """BundleError unless up [V, r] and down [H, r] are finite matrices of one rank."""
    if up.ndim != 2 or down.ndim != 2 or up.shape[1] != down.shape[1]:
        raise BundleError(f"{where}: up {list(up.shape)} and down {list(down.shape)} must be "
                          "[V, r] and [H, r]")
    if not (np.isfinite(up).all() and np.isfinite(down).all()):
        raise BundleError(f"{where}: up and down must be finite")


def read_term_affine(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(scale [V], bias [V]) float32 of a term affine file, checked: finite, scale > 0."""
    return _read_pair(path, TERM_AFFINE_FORMAT, TERM_AFFINE_VERSION, ("scale", "bias"),
                      "a sparse term affine file", check_term_affine)


def read_lowrank(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(up [V, r], down [H, r]) float32 of a low-rank correction file, checked: finite."""
    return _read_pair(path, LOWRANK_FORMAT, LOWRANK_VERSION, ("up", "down"),
                      "a sparse low-rank correction file", check_lowrank)


def _read_pair(path: str | Path, fmt: str, version: int, names: tuple[str, str], what: str,
               check: Callable[[np.ndarray, np.ndarray, str], None]) -> tuple[np.ndarray, np.ndarray]:
    tensors = read_checked(path, fmt, version, names, what)
    first, second = (np.asarray(tensors[n], np.float32) for n in names)
    check(first, second, str(path))
    return first, second


@dataclass(frozen=True)
class SparseFits:
    """A bundle's fitted sparse head, numpy float32 (None: that fit is absent).

    Attributes:
        scale, bias: [V] the per-term affine after the max.
        up, down: [V, r] and [H, r] the low-rank correction of the projection.
    """

    scale: np.ndarray | None = None
    bias: np.ndarray | None = None
    up: np.ndarray | None = None
    down: np.ndarray | None = None

    @classmethod
    def of_bundle(cls, bundle: Bundle) -> SparseFits:
        """The fits ``bundle.config`` names, read from its ``doc_encoder/`` (a stray file the
        config does not name is not read).

        Raises:
            BundleError: a named file missing or broken (it says to rebuild the bundle).
        """
        cfg, doc_dir = bundle.config, bundle.doc_encoder_dir
        for named, name in ((cfg.sparse_term_affine, TERM_AFFINE_FILE), (cfg.sparse_lowrank, LOWRANK_FILE)):
            if named and not (doc_dir / name).is_file():
                raise BundleError(f"bundle {bundle.path}: its config names a fitted sparse head but "
                                  f"doc_encoder/{name} is missing; rebuild the bundle")
        scale, bias = read_term_affine(doc_dir / TERM_AFFINE_FILE) if cfg.sparse_term_affine else (None, None)
        up, down = read_lowrank(doc_dir / LOWRANK_FILE) if cfg.sparse_lowrank else (None, None)
        if up is not None and up.shape[1] != cfg.sparse_lowrank:
            raise BundleError(f"bundle {bundle.path}: doc_encoder/{LOWRANK_FILE} has rank {up.shape[1]}, "
                              f"the config names {cfg.sparse_lowrank}; rebuild the bundle")
        return cls(scale, bias, up, down)

    def check_sizes(self, vocab: int, hidden: int, where: str) -> None:
        """BundleError unless the fits are of a [vocab, hidden] projection (``where``'s)."""
        if self.scale is not None and self.scale.shape[0] != vocab:
            raise BundleError(f"{where}: the fitted sparse scale has {self.scale.shape[0]} terms, the "
                              f"projection {vocab}; rebuild the bundle")
        if self.up is not None and self.down is not None and (
                self.up.shape[0], self.down.shape[0]) != (vocab, hidden):
            raise BundleError(f"{where}: a sparse low-rank correction of [{self.up.shape[0]}, "
                              f"{self.down.shape[0]}] for a projection of [{vocab}, {hidden}]; "
                              "rebuild the bundle")

    def projection(self, weight: np.ndarray) -> np.ndarray:
        """[V, H] float32: ``weight`` with the low-rank correction folded in (once, at load)."""
        vocab, hidden = weight.shape
        self.check_sizes(vocab, hidden, "the sparse projection")
        if self.up is None or self.down is None:
            return weight
        return np.ascontiguousarray(corrected_projection(weight.astype(np.float32), self.up, self.down))
