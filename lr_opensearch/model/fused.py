"""The fused vocabulary projection + max over positions (the sparse document side).

The sparse document vector of LightRetriever (as in SPLADE) is

    s_v = log(1 + relu(max_t (h_t . P_v + b_v)))      over non-padding positions t.

Computed naively this materialises the logits tensor ``[B, T, V]`` (128 x 512 x 150k floats
is 39 GB for a Llama-3 vocabulary). Because relu and log1p are monotone, the max can be
taken first, and the max only needs a running value and its argmax. ``FusedProjectionMax``
walks over vocabulary chunks, keeps ``[B, V]`` maxima and argmaxes, and in the backward
pass scatters each output gradient to the one position where its max was taken, so no
more than ``[B, T, chunk]`` is ever alive.

Without gradients (ingest, the table fit's documents) ``projection_max`` takes a cheaper
path with the same values: no argmax (``amax`` reduces several times faster than ``max``
with indices), no additive padding mask over every logit (each non-content position gets
a copy of a content position of its row, which cannot change a max) and the bias added
after the max (``max_t(x_t + b) = max_t(x_t) + b``, also in floating point: rounding is
monotone).
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

# Elements of one [B, T, chunk] logits block; 2**25 floats = 128 MiB in float32.
DEFAULT_BLOCK_ELEMENTS = 2**25


def _chunk_size(batch: int, length: int, vocab: int, block_elements: int) -> int:
    return max(1, min(vocab, block_elements // max(1, batch * length)))


class FusedProjectionMax(torch.autograd.Function):
    """max over masked positions of ``hidden @ weight.T + bias``, without the [B, T, V] tensor.

    Forward inputs: hidden [B, T, H], mask [B, T] (bool, True = real token), weight [V, H],
    bias [V] or None, chunk (int). Output: [B, V] maxima (``-inf`` where a row has no real
    token). Backward: gradients for hidden, weight and bias, nonzero only at the argmax.
    """

    @staticmethod
    def forward(ctx, hidden, mask, weight, bias, chunk):  # type: ignore[override]
        batch, length, _ = hidden.shape
        vocab = weight.shape[0]
        values = hidden.new_empty(batch, vocab)
        argmax = torch.empty(batch, vocab, dtype=torch.long, device=hidden.device)
        # additive mask: 0 at real tokens, -inf at padding; [B, T, 1]
        pad = torch.zeros(batch, length, 1, dtype=hidden.dtype, device=hidden.device)
        pad.masked_fill_(~mask.unsqueeze(-1), float("-inf"))
        for start in range(0, vocab, chunk):
            stop = min(start + chunk, vocab)
            logits = torch.matmul(hidden, weight[start:stop].t())  # [B, T, c], fresh
            if bias is not None:
                logits.add_(bias[start:stop])
            logits.add_(pad)
            values[:, start:stop], argmax[:, start:stop] = logits.max(dim=1)
            del logits
        ctx.save_for_backward(hidden, weight, argmax)
        ctx.has_bias = bias is not None
        ctx.chunk = chunk
        return values

    @staticmethod
    def backward(ctx, grad_values):  # type: ignore[override]
        hidden, weight, argmax = ctx.saved_tensors
        chunk = ctx.chunk
        need_h, _, need_w, need_b, _ = ctx.needs_input_grad
        grad_values = grad_values.contiguous()
        grad_hidden = torch.zeros_like(hidden) if need_h else None
        grad_weight = torch.zeros_like(weight) if need_w else None
        vocab = weight.shape[0]
        batch, length, _ = hidden.shape
        for start in range(0, vocab, chunk):
            stop = min(start + chunk, vocab)
            # routing[b, t, v] = grad[b, v] if t is the argmax of (b, v), else 0: [B, T, c]
            routing = hidden.new_zeros(batch, length, stop - start)
            routing.scatter_(1, argmax[:, start:stop].unsqueeze(1),
                             grad_values[:, start:stop].unsqueeze(1))
            if grad_hidden is not None:
                grad_hidden += torch.matmul(routing, weight[start:stop])
            if grad_weight is not None:  # sum over (b, t) of routing^T hidden: [c, H]
                grad_weight[start:stop] = torch.matmul(
                    routing.reshape(batch * length, -1).t(), hidden.reshape(batch * length, -1))
            del routing
        grad_bias = grad_values.sum(0) if (ctx.has_bias and need_b) else None
        return grad_hidden, None, grad_weight, grad_bias, None


def projection_max(
    hidden: torch.Tensor,
    mask: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    chunk: int | None = None,
    block_elements: int = DEFAULT_BLOCK_ELEMENTS,
    exact_top: int | None = None,
) -> torch.Tensor:
    """Max over real positions of the vocabulary logits, fused (no [B, T, V] tensor).

    Args:
        hidden: [B, T, H] hidden states (after the head's transform, if any).
        mask: [B, T] attention mask (nonzero = real token).
        weight: [V, H] projection (LM head / MLM decoder / input embeddings).
        bias: [V] or None.
        chunk: vocabulary entries per step; default sized so that one [B, T, chunk] block
            holds about ``block_elements`` elements.
        block_elements: the memory budget used when ``chunk`` is None.
        exact_top: without gradients only: a first pass in bfloat16 (about 3x faster
            than float32 on a CPU with AVX-512 BF16) screens ``8 x exact_top``
            candidates per row, which are computed again in float32; a bound on the
            bfloat16 error then proves that no other entry can reach the row's
            ``exact_top`` largest, else the row is computed in float32 throughout. The
            ``exact_top`` largest entries are thus float32's (other entries keep the
            first pass's values). None: float32 throughout.

    Returns:
        [B, V] maxima; ``-inf`` for a row without any real token.
    """
    batch, length, _ = hidden.shape
    if chunk is None:
        chunk = _chunk_size(batch, length, weight.shape[0], block_elements)
    wants_grad = any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    if not (torch.is_grad_enabled() and wants_grad):
        if not exact_top:
            return _projection_max_no_grad(hidden, mask.bool(), weight, bias, int(chunk))
        return _screened_max(hidden, mask.bool(), weight, bias, int(chunk), int(exact_top))
    return FusedProjectionMax.apply(hidden, mask.bool(), weight, bias, int(chunk))


def _projection_max_no_grad(hidden: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor,
                            bias: torch.Tensor | None, chunk: int) -> torch.Tensor:
    """``FusedProjectionMax.forward``'s values without its argmax and padding mask (see
    the module docstring): every masked position of a row holds a copy of the row's first
    real position, so the max over all positions is the max over the real ones."""
    batch, length, _ = hidden.shape
    filled = _fill_padding(hidden, mask)
    vocab = weight.shape[0]
    values: torch.Tensor | None = None
    for start in range(0, vocab, chunk):
        stop = min(start + chunk, vocab)
        block = torch.matmul(filled, weight[start:stop].t()).amax(dim=1)  # [B, c]
        if values is None:  # float32 at least (bias added exactly after a bf16 pass)
            values = block.new_empty(batch, vocab, dtype=torch.promote_types(block.dtype, torch.float32))
        values[:, start:stop] = block
        del block
    assert values is not None  # vocab >= 1
    if bias is not None:
        values = values + bias.to(values.dtype)
    return values.masked_fill(~mask.any(dim=1, keepdim=True), float("-inf"))


def _fill_padding(hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``hidden`` with every masked position holding a copy of its row's first real one."""
    batch, length, width = hidden.shape
    first = mask.to(torch.uint8).argmax(dim=1, keepdim=True)  # [B, 1]; 0 for an empty row
    positions = torch.arange(length, device=hidden.device).expand(batch, length)
    source = torch.where(mask, positions, first)
    return hidden.gather(1, source.unsqueeze(-1).expand(batch, length, width))


# Unit roundoff of bfloat16 (8 significant bits). A bf16 dot product of float32 vectors h
# and p (both rounded to bf16, products accumulated in float32, the sum rounded to bf16)
# is off by at most (3u + u^2 + H * 2^-24) * sum_i |h_i p_i| <= that * |h| * |p|;
# _SCREEN_SLACK doubles the factor to cover the float32 accumulation order.
_BF16_U = 2.0**-8
_SCREEN_SLACK = 2.0
# Candidates per kept entry computed again in float32: with MiniLM's documents the bound
# (about 0.3 in logit; the real bf16 error was under 0.02) is below the gap between the
# 133rd and the 1064th largest maxima (about 0.9), not the 266th (0.3): measured, see
# docs/RESULTS.md. The second pass costs about 3 % of the first.
_SCREEN_CANDIDATES = 8


def _screened_max(hidden: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor,
                  bias: torch.Tensor | None, chunk: int, top: int) -> torch.Tensor:
    """``projection_max`` with ``exact_top=top`` (see there): bf16 pass, float32 candidates,
    proof per row, float32 fallback for the rows without one."""
    hidden, weight = hidden.float(), weight.float()
    approx = _projection_max_no_grad(hidden.to(torch.bfloat16), mask, weight.to(torch.bfloat16),
                                     bias, chunk)
    vocab = approx.shape[1]
    k = min(_SCREEN_CANDIDATES * top, vocab)
    index = approx.topk(k, dim=1).indices  # [B, k]
    exact = torch.bmm(_fill_padding(hidden, mask), weight[index].transpose(1, 2)).amax(dim=1)
    if bias is not None:
        exact = exact + bias.float()[index]
    exact = exact.masked_fill(~mask.any(dim=1, keepdim=True), float("-inf"))
    out = approx.scatter(1, index, exact)
    if k == vocab:
        return out
    factor = _SCREEN_SLACK * (3 * _BF16_U + _BF16_U**2 + hidden.shape[-1] * 2.0**-24)
    h_norm = hidden.norm(dim=-1).masked_fill(~mask, 0).amax(dim=1, keepdim=True)  # [B, 1]
    ceiling = approx + factor * h_norm * weight.norm(dim=-1)  # [B, V]: no entry is above
    ceiling = ceiling.scatter(1, index, float("-inf")).amax(dim=1)  # best non-candidate
    floor = exact.topk(min(top, k), dim=1).values[:, -1]  # the row's top-th exact entry
    unproved = (ceiling > floor) & mask.any(dim=1)
    if unproved.any():
        rows = unproved.nonzero().squeeze(1)
        logger.debug("bf16 screen: %d of %d rows computed in float32", len(rows), len(out))
        out[rows] = _projection_max_no_grad(hidden[rows], mask[rows], weight, bias, chunk)
    return out


def naive_projection_max(
    hidden: torch.Tensor, mask: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Reference implementation that materialises [B, T, V]; for tests and benchmarks only."""
    logits = torch.matmul(hidden, weight.t())
    if bias is not None:
        logits = logits + bias
    logits = logits.masked_fill(~mask.bool().unsqueeze(-1), float("-inf"))
    return logits.max(dim=1).values


def sparse_activation(maxima: torch.Tensor) -> torch.Tensor:
    """log(1 + relu(x)): the SPLADE saturation applied after the max. Shape preserved."""
    return torch.log1p(torch.relu(maxima))
