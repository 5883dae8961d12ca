"""The corpus set-ups of the tests, in one place: the vocabulary of the tiny tokenizer and
random documents (dense vectors, sparse maps of that vocabulary) that each test turns into
its own bodies, so that every expected score can be computed independently with numpy.

Two draw orders exist because tests were written against them and their expectations were
checked on those draws: ``vectors_first`` draws every dense vector, then each document's
tokens and weights; otherwise each document draws its tokens, its vector, then its weights.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

WEIGHT_RANGE = (0.1, 3.0)  # a sparse term's weight, uniform


@dataclass(frozen=True)
class RandomDoc:
    """One random document: its tokens, dense vector and sparse map (encoded keys)."""

    tokens: list[str]
    dense: np.ndarray
    sparse: dict[str, float]


def tiny_vocab(tokenizer: Any) -> list[str]:
    """The sorted tokens the tiny tokenizer gives the tiny sentences."""
    from tiny_artifacts import SENTENCES

    return sorted({t for s in SENTENCES
                   for t in tokenizer.encode(s, add_special_tokens=False).tokens})


def random_docs(seed: int, n: int, vocab: list[str], *, tokens: int = 8, dim: int = 16,
                vectors_first: bool = False,
                weights: tuple[float, float] = WEIGHT_RANGE) -> list[RandomDoc]:
    """``n`` random documents of ``tokens`` distinct tokens of ``vocab`` each (seeded), their
    sparse weights uniform in ``weights``."""
    from lr_opensearch.bundle.keys import encode_key

    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, dim)).astype(np.float32) if vectors_first else None
    out = []
    for i in range(n):
        picked = [str(t) for t in rng.choice(vocab, size=tokens, replace=False)]
        dense = vectors[i] if vectors is not None else \
            rng.standard_normal(dim).astype(np.float32)
        sparse = {encode_key(t): float(rng.uniform(*weights)) for t in picked}
        out.append(RandomDoc(picked, dense, sparse))
    return out
