"""Query tokenization for the query side: ids without special tokens, fast and exact.

:class:`QueryTokenizer` turns a batch of texts into one flat id array plus per-query
lengths. Two paths give the same ids as ``tokenizer.encode(text, add_special_tokens=False)``
with the special tokens removed:

* **word cache** (tokenizers whose pipeline is local to whitespace-separated chunks:
  normalizers made of ``BertNormalizer`` / ``Lowercase`` / ``NFC|NFD|NFKC|NFKD`` /
  ``StripAccents`` / ``Strip``, pre-tokenizers made of ``BertPreTokenizer`` /
  ``Whitespace`` / ``WhitespaceSplit`` / ``Punctuation`` / ``Digits``, any model - e.g.
  BERT / MiniLM WordPiece). Each character is normalised on its own and every
  pre-token lies inside one whitespace chunk, so ``ids(text)`` is the concatenation of
  ``ids(chunk)`` over ``text.split()``. Chunk ids are cached in a dict; a repeated word
  costs one dict lookup instead of a trip through the Rust pipeline. A text falls back
  to the tokenizer when it contains an added token's text (``[CLS]`` ...) or one of the
  characters Python's ``str.split`` treats as whitespace while the BERT normaliser
  deletes them (``\\x0b \\x0c \\x1c-\\x1f \\x85``). The cache is cleared when it reaches
  ``cache_size`` entries.
* **tokenizer**: everything else (byte-level BPE, SentencePiece ...) goes through
  ``Tokenizer.encode_batch_fast`` (no offsets), with padding and truncation disabled, so
  the Rust thread pool tokenizes the batch in parallel.

Caps: a query keeps its first ``max_tokens`` tokens; before tokenization a text is cut
to ``max_tokens * 50`` characters. Both are logged once per tokenizer.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from itertools import chain
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

_LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents",
                      "Strip"}
_LOCAL_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation",
                         "Digits"}
# Whitespace for str.split() but deleted (not split on) by BertNormalizer(clean_text=True).
_SPLIT_MISMATCH = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
CHARS_PER_TOKEN_CAP = 50


def _components(node: dict[str, Any] | None, key: str) -> list[str] | None:
    """Flatten a (possibly Sequence) normalizer / pre-tokenizer JSON node to type names."""
    if node is None:
        return []
    if node.get("type") == "Sequence":
        out: list[str] = []
        for child in node.get(key, []):
            sub = _components(child, key)
            if sub is None:
                return None
            out.extend(sub)
        return out
    return [node.get("type", "?")]


def word_cache_eligible(tokenizer: Any) -> tuple[bool, str]:
    """Whether the tokenizer's pipeline is local to whitespace chunks, and why (not)."""
    spec = json.loads(tokenizer.to_str())
    norms = _components(spec.get("normalizer"), "normalizers") or []
    pres = _components(spec.get("pre_tokenizer"), "pretokenizers")
    bad = [n for n in norms if n not in _LOCAL_NORMALIZERS]
    if bad:
        return False, f"normalizer {bad} may act across whitespace"
    if not pres:
        return False, "no whitespace-splitting pre-tokenizer"
    bad = [p for p in pres if p not in _LOCAL_PRE_TOKENIZERS]
    if bad:
        return False, f"pre-tokenizer {bad} may act across whitespace"
    if not any(p in ("BertPreTokenizer", "Whitespace", "WhitespaceSplit") for p in pres):
        return False, "no whitespace-splitting pre-tokenizer"
    return True, "pipeline is local to whitespace chunks"


def plain_copy(tokenizer: Any) -> Any:
    """A copy of the tokenizer with padding and truncation switched off."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.no_padding()
    tok.no_truncation()
    return tok


class _ChunkCache(dict):  # type: ignore[type-arg]
    """chunk text -> tuple of ids; a miss asks the tokenizer."""

    def __init__(self, tokenizer: Any, limit: int):
        super().__init__()
        self._tok = tokenizer
        self._limit = limit

    def __missing__(self, chunk: str) -> tuple[int, ...]:
        if len(self) >= self._limit:
            self.clear()
        ids = self[chunk] = tuple(self._tok.encode(chunk, add_special_tokens=False).ids)
        return ids


class QueryTokenizer:
    """Tokenize query batches into (flat ids, lengths); special tokens dropped, length capped.

    Args:
        tokenizer: the bundle's ``tokenizers.Tokenizer`` (not modified; a copy is used).
        special_ids: ids never counted as query tokens.
        vocab_size: V; ids >= V (none in a consistent bundle) are dropped too.
        max_tokens: tokens kept per query.
        cache_size: word-cache entries (0 disables the word-cache path).
    """

    def __init__(self, tokenizer: Any, special_ids: Sequence[int], vocab_size: int,
                 max_tokens: int = 512, cache_size: int = 1 << 20):
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self._tok = plain_copy(tokenizer)
        self.max_tokens = int(max_tokens)
        self.max_chars = self.max_tokens * CHARS_PER_TOKEN_CAP
        self._keep = np.ones(vocab_size, dtype=bool)
        self._keep[[i for i in special_ids if 0 <= i < vocab_size]] = False
        self._vocab_size = vocab_size
        eligible, why = word_cache_eligible(self._tok)
        self.word_cache = eligible and cache_size > 0
        logger.debug("query tokenizer: word cache %s (%s)", self.word_cache, why)
        self._cache = _ChunkCache(self._tok, max(1, cache_size))
        added = [t.content for t in self._tok.get_added_tokens_decoder().values() if t.content.strip()]
        self._added = (re.compile("|".join(re.escape(a) for a in sorted(added, key=len, reverse=True)),
                                  re.IGNORECASE) if added else None)
        self._batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        self._warned: set[str] = set()

    def _warn_once(self, what: str, message: str, *args: object) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning(message, *args)

    def _cut(self, text: str) -> str:
        if len(text) > self.max_chars:
            self._warn_once("chars", "query of %d characters cut to %d before tokenization "
                            "(max_tokens=%d x %d); further cuts are not logged",
                            len(text), self.max_chars, self.max_tokens, CHARS_PER_TOKEN_CAP)
            return text[: self.max_chars]
        return text

    def _fast_ok(self, text: str) -> bool:
        return not _SPLIT_MISMATCH.search(text) and not (self._added and self._added.search(text))

    def raw_ids(self, texts: Sequence[str]) -> list[Sequence[int]]:
        """Token ids per text as the tokenizer gives them (no special tokens added)."""
        texts = [self._cut(t) for t in texts]
        out: list[Sequence[int]] = [()] * len(texts)
        slow: list[int] = []
        if self.word_cache:
            get = self._cache.__getitem__
            for i, text in enumerate(texts):
                if self._fast_ok(text):
                    out[i] = tuple(chain.from_iterable(map(get, text.split())))
                else:
                    slow.append(i)
        else:
            slow = list(range(len(texts)))
        if slow:
            encodings = self._batch([texts[i] for i in slow], add_special_tokens=False)
            for i, enc in zip(slow, encodings, strict=True):
                out[i] = enc.ids
        return out

    def __call__(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize a batch.

        Returns:
            ``flat`` [N] int64 ids of all queries back to back, and ``lengths`` [n] int64
            tokens per query (0 when a text has no tokens).
        """
        per_query = self.raw_ids(texts)
        n = len(per_query)
        lengths = np.fromiter(map(len, per_query), dtype=np.int64, count=n)
        flat = np.fromiter(chain.from_iterable(per_query), dtype=np.int64, count=int(lengths.sum()))
        inside = flat < self._vocab_size
        keep = self._keep[np.where(inside, flat, 0)] & inside
        if not keep.all() or (n and lengths.max() > self.max_tokens):
            flat, lengths = self._filter(flat, lengths, keep)
        return flat, lengths

    def _filter(self, flat: np.ndarray, lengths: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        n = len(lengths)
        owner = np.repeat(np.arange(n), lengths)
        flat, owner = flat[keep], owner[keep]
        lengths = np.bincount(owner, minlength=n).astype(np.int64)
        if lengths.max(initial=0) > self.max_tokens:
            self._warn_once("tokens", "query of %d tokens capped at max_tokens=%d; further caps "
                            "are not logged", int(lengths.max()), self.max_tokens)
            starts = np.cumsum(lengths) - lengths
            position = np.arange(len(flat)) - np.repeat(starts, lengths)
            short = position < self.max_tokens
            flat, owner = flat[short], owner[short]
            lengths = np.minimum(lengths, self.max_tokens)
        return flat, lengths
