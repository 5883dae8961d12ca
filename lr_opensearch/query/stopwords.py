"""Stopword / punctuation tokens for the sparse query side (``BundleConfig.remove_stopwords``).

Used only when a bundle says its model was trained with stopwords and punctuation removed
from the sparse query vector; the dense side always uses every token.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import numpy as np

# English function words (articles, pronouns, auxiliaries, prepositions, conjunctions).
ENGLISH_STOPWORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being
below between both but by can could did do does doing down during each few for from further
had has have having he her here hers herself him himself his how i if in into is it its
itself just me more most my myself no nor not now of off on once only or other our ours
ourselves out over own same she should so some such than that the their theirs them
themselves then there these they this those through to too under until up very was we were
what when where which while who whom why will with would you your yours yourself yourselves
s t d ll m re ve
""".split())

_MARKERS = ("##", "\u0120", "\u2581")  # WordPiece continuation, byte-level space, SentencePiece space


def _bare(token: str) -> str:
    for marker in _MARKERS:
        if token.startswith(marker):
            token = token[len(marker):]
    return token.lower()


def is_punctuation(text: str) -> bool:
    """True when every character is punctuation or a symbol (Unicode P* / S*)."""
    return bool(text) and all(unicodedata.category(c)[0] in "PS" for c in text)


def sparse_stop_mask(tokenizer: Any, vocab_size: int) -> np.ndarray:
    """[V] bool: True for tokens dropped from the sparse query (stopwords, punctuation)."""
    mask = np.zeros(vocab_size, dtype=bool)
    for token, i in tokenizer.get_vocab(with_added_tokens=True).items():
        if i < vocab_size:
            bare = _bare(token)
            mask[i] = bare in ENGLISH_STOPWORDS or is_punctuation(bare)
    return mask
