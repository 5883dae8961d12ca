"""The document forward after the backbone, in numpy: pooling, the sparse head, the kept terms.

The same arithmetic as the torch path (``LightRetrieverModel.encode_documents`` and
``DocEncoder``), for a backbone run elsewhere (ONNX Runtime, ``onnx_encoder``):

- dense: pool the last hidden states ("cls": the first real position, "mean": the mean
  over real positions, "last": the last real one), L2-normalise when the model does, keep
  the served prefix (normalised again when it is shorter: ``DocEncoder._serve``);
- sparse ("max" mode): ``log1p(relu(max_t (h_t . P_v + b_v)))`` over the content
  positions (real tokens minus the framing's special positions and the document prompt:
  ``LightRetrieverModel.content_mask``); the bias is added after the max, as the torch
  path does without gradients (``fused.projection_max``); a bundle's fitted sparse head
  (``sparse_fits``): P with its low-rank correction folded in (by the caller, once), and the
  per-term scale and bias on the maxima before ReLU (``term_scale``, ``term_bias``);
- kept terms: special and padded-vocabulary ids dropped, the top_k largest, finite weights
  above min_weight (``DocEncoder.select_terms``).

Only the "max" sparse mode is here; the Medusa modes run on torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lr_opensearch.model.sparse_fits import affine_maxima

#: logits of one document computed at once at most ([positions, vocabulary chunk]): 32 MiB
_BLOCK_ELEMENTS = 2**23


@dataclass(frozen=True)
class NumpyHead:
    """The projection and the settings of one encoder's head.

    Attributes:
        weight: [V, H] float32 projection (tied input embeddings, LM head, MLM decoder).
        bias: [V] float32 or None.
        pooling: "cls" | "mean" | "last".
        normalize: L2-normalise dense vectors.
        served_dim: leading dense dims kept.
        suffix: special positions after the content (the framing's suffix).
        excluded: [n] int64 special token ids, never kept.
        vocab_limit: ids at or above it (a padded model vocabulary) are never kept.
        top_k: sparse terms kept per document.
        min_weight: kept weights are strictly above it (and above 0).
        term_scale, term_bias: [V] float32 the fitted per-term affine of the maxima
            (``sparse_fits.affine_maxima``); None: the head as it is.
    """

    weight: np.ndarray
    bias: np.ndarray | None
    pooling: str
    normalize: bool
    served_dim: int
    suffix: int
    excluded: np.ndarray
    vocab_limit: int
    top_k: int
    min_weight: float = 0.0
    term_scale: np.ndarray | None = None
    term_bias: np.ndarray | None = None

    def dense(self, hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Served dense vectors [B, served_dim] of hidden [B, T, H] and mask [B, T]."""
        real = mask.astype(bool)
        if self.pooling == "mean":
            weights = real.astype(np.float32)
            weights /= np.maximum(weights.sum(-1, keepdims=True), 1.0)
            pooled = np.einsum("bt,bth->bh", weights, hidden)
        else:
            pos = np.argmax(real, axis=1) if self.pooling == "cls" else real.sum(-1) - 1
            pooled = hidden[np.arange(len(hidden)), np.maximum(pos, 0)]
        pooled = pooled.astype(np.float32)
        if self.normalize:
            pooled = _l2(pooled)
        cut = pooled[:, : self.served_dim]
        if self.normalize and self.served_dim < pooled.shape[1]:
            cut = _l2(cut)
        return np.ascontiguousarray(cut, dtype=np.float32)

    def content(self, mask: np.ndarray, prefix: int) -> np.ndarray:
        """[B, T] bool: real tokens minus the first ``prefix`` (the framing's prefix and a
        document prompt) and the last ``suffix`` of each row."""
        real = mask.astype(bool)
        pos = np.cumsum(real, axis=-1) - 1
        n = real.sum(-1, keepdims=True)
        return real & (pos >= prefix) & (pos < n - self.suffix)

    def sparse(self, hidden: np.ndarray, mask: np.ndarray, prefix: int) -> np.ndarray:
        """[B, V] sparse weights log1p(relu(max over content positions)) of hidden [B, T, H]
        (0 for a row without content: its max is -inf)."""
        content = self.content(mask, prefix)
        vocab = self.weight.shape[0]
        out = np.full((len(hidden), vocab), -np.inf, dtype=np.float32)
        for b in range(len(hidden)):
            rows = hidden[b][content[b]]
            if not len(rows):
                continue
            chunk = max(1, _BLOCK_ELEMENTS // len(rows))
            for start in range(0, vocab, chunk):
                block = rows @ self.weight[start:start + chunk].T
                out[b, start:start + chunk] = block.max(axis=0)
        if self.bias is not None:
            out += self.bias
        return self.activate(out)

    def activate(self, maxima: np.ndarray) -> np.ndarray:
        """[B, V] maxima (the projection's bias added) -> ``log1p(relu(.))`` of them, through
        the fitted per-term scale and bias first when there is one."""
        if self.term_scale is not None:
            maxima = affine_maxima(maxima, self.term_scale, self.term_bias)
        with np.errstate(invalid="ignore"):
            return np.log1p(np.maximum(maxima, 0.0))

    def select_terms(self, sparse: np.ndarray) -> list[dict[int, float]]:
        """Per document {token id: weight}: ``DocEncoder.select_terms`` for the "max" mode."""
        weights = np.array(sparse[:, : self.vocab_limit], dtype=np.float32)
        if len(self.excluded):
            weights[:, self.excluded[self.excluded < weights.shape[1]]] = 0.0
        k = min(self.top_k, weights.shape[1])
        top = np.argpartition(-weights, k - 1, axis=1)[:, :k]
        out = []
        for row, idx in zip(weights, top, strict=True):
            values = row[idx]
            ok = np.isfinite(values) & (values > self.min_weight)
            out.append({int(t): float(w) for t, w in zip(idx[ok], values[ok], strict=True)})
        return out


def _l2(x: np.ndarray) -> np.ndarray:
    """Rows divided by their L2 norm (at least 1e-12, as ``torch.nn.functional.normalize``)."""
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
