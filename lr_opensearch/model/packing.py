"""Packing many small "prompt + block" sequences into one sequence with a block attention mask.

LightRetriever encodes each query token t as its own sequence ``instruction + t``. Doing that
token by token wastes the shared prompt; instead all blocks of one query (or a slice of the
vocabulary, when caching the table) go into ONE sequence::

    [ shared prompt | block 1 | block 2 | ... | padding ]

- the shared prompt attends to itself (causally for decoders);
- every block attends to the shared prompt and to itself only (causally for decoders);
- the positions of every block start at ``len(shared)``, as if it directly followed it.

So each block's hidden states equal those of an independent pass over ``shared + block``.
For a bidirectional encoder the prompt's own states would depend on the block, so encoders
share nothing: each block carries its own full copy (``[CLS] prompt t [SEP]``) and the mask
is block-diagonal, which is the same as a batch of independent sequences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PackedBatch:
    """Model inputs for a batch of packed sequences.

    Attributes:
        input_ids: [N, T] token ids (padding id 0 after the last block).
        position_ids: [N, T].
        attention_mask: [N, 1, T, T] additive float mask (0 = may attend, -inf = may not).
        visible: [N, K, T] bool; visible[n, k] marks the positions that block k of sequence n
            sees (shared prompt + the block itself): pooling of block k reads these.
        block_count: [N] number of real blocks per sequence (K = max over sequences).
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor
    visible: torch.Tensor
    block_count: torch.Tensor


def _segments(shared_len: int, blocks: Sequence[Sequence[int]], length: int) -> list[int]:
    """Segment id per position: 0 = shared, k + 1 = block k, -1 = padding."""
    seg = [0] * shared_len
    for k, block in enumerate(blocks):
        seg.extend([k + 1] * len(block))
    seg.extend([-1] * (length - len(seg)))
    return seg


def pack_blocks(
    shared: Sequence[int],
    sequences: Sequence[Sequence[Sequence[int]]],
    *,
    causal: bool,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> PackedBatch:
    """Pack ``shared + blocks`` layouts into a batch with a block attention mask.

    Args:
        shared: ids of the prompt shared by every block (empty for encoders).
        sequences: per packed sequence, its blocks (each a list of ids, non-empty).
        causal: decoder-style causal attention inside the prompt and inside each block.
        dtype: dtype of the additive mask (must match the model's compute dtype).
        device: where to build the tensors.

    Returns:
        The packed batch; see ``PackedBatch``.
    """
    n_shared = len(shared)
    lengths = [n_shared + sum(len(b) for b in blocks) for blocks in sequences]
    length = max(lengths)
    max_blocks = max(len(blocks) for blocks in sequences)
    ids = torch.zeros(len(sequences), length, dtype=torch.long)
    pos = torch.zeros(len(sequences), length, dtype=torch.long)
    seg = torch.full((len(sequences), length), -1, dtype=torch.long)
    for n, blocks in enumerate(sequences):
        row = [*shared, *(t for b in blocks for t in b)]
        ids[n, : len(row)] = torch.tensor(row, dtype=torch.long)
        seg[n] = torch.tensor(_segments(n_shared, blocks, length))
        positions = list(range(n_shared)) + [n_shared + i for b in blocks for i in range(len(b))]
        pos[n, : len(positions)] = torch.tensor(positions, dtype=torch.long)
    seg_q, seg_k = seg.unsqueeze(2), seg.unsqueeze(1)  # [N, T, 1], [N, 1, T]
    allowed = (seg_q >= 0) & ((seg_k == seg_q) | ((seg_k == 0) & (seg_q > 0)))
    if causal:
        allowed &= torch.ones(length, length, dtype=torch.bool).tril()
    # padding rows attend to themselves only: no fully masked row, hence no NaN in softmax
    allowed |= torch.eye(length, dtype=torch.bool) & (seg_q < 0)
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, float("-inf"))
    block_ids = torch.arange(1, max_blocks + 1).view(1, max_blocks, 1)  # [1, K, 1]
    visible = (seg.unsqueeze(1) == block_ids) | (seg.unsqueeze(1) == 0)  # [N, K, T]
    counts = torch.tensor([len(blocks) for blocks in sequences], dtype=torch.long)
    visible &= (torch.arange(max_blocks).view(1, -1, 1) < counts.view(-1, 1, 1))
    return PackedBatch(
        input_ids=ids.to(device),
        position_ids=pos.to(device),
        attention_mask=mask.unsqueeze(1).to(device),
        visible=visible.to(device),
        block_count=counts.to(device),
    )
