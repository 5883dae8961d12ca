"""BRIDGE-Embed's sparse document side: Medusa heads, logit aggregation and SoftTopK.

BRIDGE-Embed (Ning, Wu, Liu, "A Novel LLM-based Document and Sentence Retrieval Method")
reads the sparse vector from N extra heads on the last hidden state ``h_t``::

    p_t^(n) = softmax(W2^(n) (SiLU(W1^(n) h_t) + h_t))      W1: [d, d], W2: [V, d]

W2 starts as a copy of the backbone's sparse projection (its LM head; bias too), W1 of
head 0 starts at zero (head 0 is then exactly the original head, which the
self-distillation term keeps it close to) and W1 of the other heads small and random (with
equal starts, equal gradients would keep the heads equal forever). On an MLM head the
residual block acts on the head's transformed state, so head 0 again equals the head.

Aggregation (:func:`aggregate`)::

    medusa_last: h = sum_n (1 - p_eos,-1^(n)) * p_-1^(n)          (the paper: last position)
    medusa_max:  h = sum_n (1 - p_eos,-1^(n)) * log(1 + relu(max_t z_t^(n)))

``-1`` is the last real position (a decoder's EOS, an encoder's [SEP]); ``medusa_max``
max-pools each head's logits over the content positions as LightRetriever does (fused, see
``fused.projection_max``), weighting each head by the same "does not end" probability.

The served vector (:func:`soft_top_k`) is ``Norm(SoftTopK(h, k, tau))``: softmax(h / tau),
only the k largest entries kept (as (values, indices) pairs, not a dense [N, V] mask), L2
normalised. Training's S-Matryoshka loss and ingest (``DocEncoder``) call the same function,
so the index holds exactly what was trained at the bundle's k: positive, finite weights of
at most 1 (rank_features needs positive finite floats).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from lr_opensearch.errors import ConfigError
from lr_opensearch.model.fused import projection_max, sparse_activation

MEDUSA_FILE = "medusa.safetensors"
#: std of the random W1 of heads 1..N-1 (head 0 starts at zero, equal to the original head)
W1_INIT_STD = 0.02


@dataclass(frozen=True)
class MedusaOutput:
    """What the Medusa side of the document forward gives.

    Attributes:
        sparse: [B, V] aggregated non-negative vocabulary weights (``h`` above).
        head_logits: [B, V] head 0's logits at the last position (self-distillation student).
        base_logits: [B, V] the original head's logits there (self-distillation teacher).
    """

    sparse: torch.Tensor
    head_logits: torch.Tensor
    base_logits: torch.Tensor


class MedusaHeads(nn.Module):
    """N residual heads ``W2^(n) (SiLU(W1^(n) h) + h) + b2^(n)``.

    Args:
        weight: [V, d] the sparse projection the W2 copies start from.
        bias: [V] its bias, or None.
        heads: N (>= 1).
        seed: seeds the random W1 of heads 1..N-1 (reproducible starts).
    """

    w1: nn.ModuleList
    w2: nn.ModuleList

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, heads: int, seed: int = 0):
        super().__init__()
        if heads < 1:
            raise ConfigError(f"medusa heads must be >= 1, got {heads}")
        vocab, hidden = weight.shape
        generator = torch.Generator().manual_seed(seed)
        self.w1 = nn.ModuleList(nn.Linear(hidden, hidden) for _ in range(heads))
        self.w2 = nn.ModuleList(nn.Linear(hidden, vocab, bias=bias is not None) for _ in range(heads))
        with torch.no_grad():
            for n in range(heads):
                w1, w2 = cast(nn.Linear, self.w1[n]), self.projection(n)
                w1.bias.zero_()
                if n == 0:
                    w1.weight.zero_()
                else:
                    w1.weight.copy_(torch.randn(hidden, hidden, generator=generator) * W1_INIT_STD)
                w2.weight.copy_(weight.detach())
                if bias is not None:
                    w2.bias.copy_(bias.detach())
        self.to(weight.dtype)

    @property
    def heads(self) -> int:
        return len(self.w1)

    def projection(self, n: int) -> nn.Linear:
        """Head n's W2 (weight [V, d], bias [V] or None)."""
        return cast(nn.Linear, self.w2[n])

    def residual(self, n: int, hidden: torch.Tensor) -> torch.Tensor:
        """``SiLU(W1^(n) h) + h`` for hidden [..., d] -> [..., d]."""
        return F.silu(cast(nn.Linear, self.w1[n])(hidden)) + hidden

    def logits(self, n: int, hidden: torch.Tensor) -> torch.Tensor:
        """Head n's vocabulary logits for hidden [B, d] -> [B, V] (the pre-softmax p^(n))."""
        return self.projection(n)(self.residual(n, hidden))

    def save(self, path: str | Path) -> None:
        """Write the head weights as safetensors (tensor names = state_dict keys)."""
        from safetensors.torch import save_file

        save_file({k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}, str(path))

    def load(self, path: str | Path) -> None:
        """Read weights written by :meth:`save`; the head count and shapes must match."""
        from safetensors.torch import load_file

        saved = load_file(str(path))
        own = self.state_dict()
        if set(saved) != set(own) or any(saved[k].shape != own[k].shape for k in own):
            raise ConfigError(f"{path}: Medusa head weights do not fit {self.heads} heads of shape "
                              f"{tuple(own['w2.0.weight'].shape)}; the bundle's medusa_heads or "
                              "backbone disagree with the file - rebuild the bundle")
        self.load_state_dict({k: v.to(own[k].dtype) for k, v in saved.items()})


def last_positions(mask: torch.Tensor) -> torch.Tensor:
    """[B] index of each row's last real position (any padding side); mask [B, T]."""
    m = mask.long()
    return ((m.cumsum(-1) == m.sum(-1, keepdim=True)) & mask.bool()).long().argmax(-1)


def aggregate(heads: MedusaHeads, hidden: torch.Tensor, mask: torch.Tensor, content: torch.Tensor,
              base: tuple[torch.Tensor, torch.Tensor | None], eos_id: int, mode: str) -> MedusaOutput:
    """The Medusa sparse vector of a batch.

    Args:
        heads: the Medusa heads.
        hidden: [B, T, d] hidden states (after the sparse head's transform, if any).
        mask: [B, T] real tokens; the last one is where p_eos (and ``medusa_last``) is read.
        content: [B, T] the positions ``medusa_max`` pools over (framing tokens excluded).
        base: (weight [V, d], bias [V] or None) of the original sparse projection.
        eos_id: the token whose probability ends the sequence (the framing's last suffix id).
        mode: "medusa_last" | "medusa_max".

    Returns:
        MedusaOutput (sparse [B, V], head 0's and the original head's last-position logits).
    """
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    last = hidden[rows, last_positions(mask)]  # [B, d]
    total: torch.Tensor | None = None
    head0 = last
    for n in range(heads.heads):
        logits = heads.logits(n, last)
        if n == 0:
            head0 = logits
        probs = torch.softmax(logits.float(), dim=-1)
        keep = 1.0 - probs[:, eos_id : eos_id + 1]  # [B, 1]
        if mode == "medusa_last":
            part = keep * probs
        else:
            w2 = heads.projection(n)
            maxima = projection_max(heads.residual(n, hidden), content, w2.weight, w2.bias)
            part = keep * sparse_activation(maxima).float()
        total = part if total is None else total + part
    assert total is not None
    weight, bias = base
    original = F.linear(last, weight, bias)
    return MedusaOutput(sparse=total.to(hidden.dtype), head_logits=head0, base_logits=original)


def soft_top_k(weights: torch.Tensor, k: int, temperature: float,
               excluded: Sequence[int] | torch.Tensor = ()) -> tuple[torch.Tensor, torch.Tensor]:
    """``Norm(SoftTopK(weights, k, tau))`` as sparse (values, indices) pairs.

    softmax(weights / tau) over the vocabulary, the k largest entries kept (the rest are 0),
    then L2-normalised. ``excluded`` ids (special tokens, padded vocabulary) never enter the
    top k. Differentiable in the kept values (the mask is piecewise constant).

    Args:
        weights: [N, V] aggregated sparse vectors.
        k: entries kept (clipped to V minus the excluded).
        temperature: tau (> 0).
        excluded: token ids to leave out.

    Returns:
        (values [N, k'] >= 0 with unit L2 norm per row, indices [N, k'] long), k' = min(k, V').
    """
    if not temperature > 0:
        raise ConfigError(f"soft top-k temperature must be > 0, got {temperature}")
    logits = weights.to(torch.promote_types(weights.dtype, torch.float32)) / temperature
    ids = torch.as_tensor(excluded, dtype=torch.long, device=weights.device)
    if ids.numel():
        logits = logits.index_fill(1, ids, float("-inf"))
    kept = max(1, min(int(k), weights.shape[1] - int(ids.unique().numel())))
    probs = torch.softmax(logits, dim=-1)
    values, indices = torch.topk(probs, kept, dim=1)
    return F.normalize(values, p=2, dim=-1), indices


def sparse_scores(query: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Dot products of dense queries [B, V] with sparse documents (values/indices [N, k]) -> [B, N].

    The same sum ``rank_features`` computes over a document's stored terms, without building
    the [N, V] document matrix.
    """
    gathered = query.float()[:, indices]  # [B, N, k]
    return (gathered * values.float().unsqueeze(0)).sum(-1)
