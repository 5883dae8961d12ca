"""What both document runtimes share, without torch: the encoded batch and its length order.

``DocEncoder`` (torch) and ``OnnxDocEncoder`` (ONNX Runtime) return the same
:class:`DocBatch` and batch documents the same way (:func:`length_batches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DocBatch:
    """Encoded documents, in input order.

    Attributes:
        dense: [B, served_dim] float32.
        sparse: per document, {token_id: weight} with finite weights > max(min_weight, 0),
            at most top_k entries, special tokens excluded.
        truncated: per document, whether it was cut to the bundle's max_length.
    """

    dense: np.ndarray
    sparse: list[dict[int, float]]
    truncated: list[bool]


def length_batches(rows: Sequence[Sequence[int]], size: int) -> list[list[int]]:
    """Indices of ``rows`` in batches of ``size``, longest rows first (little padding)."""
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]), reverse=True)
    return [order[start:start + size] for start in range(0, len(order), size)]


def padded_numpy(rows: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Right-padded ids [b, T] int64 (0 after each row) and attention mask [b, T] int64."""
    length = max(len(r) for r in rows)
    input_ids = np.zeros((len(rows), length), dtype=np.int64)
    mask = np.zeros((len(rows), length), dtype=np.int64)
    for n, row in enumerate(rows):
        input_ids[n, : len(row)] = row
        mask[n, : len(row)] = 1
    return input_ids, mask
