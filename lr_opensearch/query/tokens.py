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
  ``ids(chunk)`` over ``text.split()``. A batch is joined into one string (texts
  separated by a ``\\x00`` chunk), split once, each chunk mapped to its index in a
  ragged id store (one dict lookup), and the ids gathered with numpy; chunks not seen
  before are tokenized together in one ``encode_batch`` call. A repeated word thus costs
  a dict lookup instead of a trip through the Rust pipeline. A text falls back to the
  tokenizer when it contains an added token's text (``[CLS]`` ...), ``\\x00``, or one of
  the characters Python's ``str.split`` treats as whitespace while the BERT normaliser
  deletes them (``\\x0b \\x0c \\x1c-\\x1f \\x85``). The cache starts afresh when it would
  exceed ``cache_size`` chunks (default 262,144: a few tens of MB at most). It is
  thread-safe.
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
import threading
from collections.abc import Sequence
from itertools import chain
from typing import Any, cast

import numpy as np

from lr_opensearch.errors import ConfigError

logger = logging.getLogger(__name__)

_LOCAL_NORMALIZERS = {"BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents",
                      "Strip"}
_LOCAL_PRE_TOKENIZERS = {"BertPreTokenizer", "Whitespace", "WhitespaceSplit", "Punctuation",
                         "Digits"}
# Whitespace for str.split() but deleted (not split on) by BertNormalizer(clean_text=True).
_SPLIT_MISMATCH = re.compile("[\x0b\x0c\x1c-\x1f\x85]")
CHARS_PER_TOKEN_CAP = 50
DEFAULT_MAX_TOKENS = 512  # a query keeps its first 512 tokens (QueryEncoder, table fitting)


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
    normalized = [t.content for t in tokenizer.get_added_tokens_decoder().values() if t.normalized]
    if normalized:  # matched on normalised text: a raw-text check cannot rule them out
        return False, f"added tokens matched after normalisation: {normalized[:3]}"
    return True, "pipeline is local to whitespace chunks"


def plain_copy(tokenizer: Any) -> Any:
    """A copy of the tokenizer with padding and truncation switched off."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tokenizer.to_str())
    tok.no_padding()
    tok.no_truncation()
    return tok


_SENTINEL = "\x00"  # chunk separating texts in the joined batch string; never in a fast text


class _ChunkStore:
    """The word cache: chunk text -> index into ragged arrays of token ids.

    Index 0 is the batch separator (no ids). Misses of a batch are tokenized together
    (one ``encode_batch`` call, Rust threads). When the store would exceed ``limit``
    chunks it starts afresh.
    """

    def __init__(self, tokenizer: Any, batch_encode: Any, limit: int):
        self._tok = tokenizer
        self._batch_encode = batch_encode
        self._limit = max(2, limit)
        self._reset()

    def _reset(self) -> None:
        self.index: dict[str, int] = {_SENTINEL: 0}
        self.tuples: list[tuple[int, ...]] = [()]  # the same ids per chunk, for one-text lookups
        self.starts = np.zeros(1, np.int64)
        self.lengths = np.zeros(1, np.int64)
        self.ids = np.empty(0, np.int64)

    def __len__(self) -> int:
        return len(self.index)

    def lookup(self, chunks: list[str]) -> np.ndarray:
        """[len(chunks)] int64 store indices, adding the chunks not seen yet."""
        found = list(map(self.index.get, chunks))
        if None in found:
            missing = list(dict.fromkeys(c for c, i in zip(chunks, found, strict=True) if i is None))
            if len(self.index) + len(missing) > self._limit:
                self._reset()
                missing = list(dict.fromkeys(c for c in chunks if c not in self.index))
            self._add(missing)
            found = list(map(self.index.__getitem__, chunks))
        return np.array(found, dtype=np.int64)

    def _add(self, chunks: list[str]) -> None:
        per_chunk = [enc.ids for enc in self._batch_encode(chunks, add_special_tokens=False)]
        lengths = np.fromiter(map(len, per_chunk), np.int64, count=len(per_chunk))
        new_ids = np.fromiter(chain.from_iterable(per_chunk), np.int64, count=int(lengths.sum()))
        first = len(self.index)
        self.tuples.extend(map(tuple, per_chunk))
        self.index.update(zip(chunks, range(first, first + len(chunks)), strict=True))
        self.starts = np.concatenate([self.starts, len(self.ids) + np.cumsum(lengths) - lengths])
        self.lengths = np.concatenate([self.lengths, lengths])
        self.ids = np.concatenate([self.ids, new_ids])


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
                 max_tokens: int = 512, cache_size: int = 1 << 18):
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be >= 1, got {max_tokens}")
        self._tok = plain_copy(tokenizer)
        self.max_tokens = int(max_tokens)
        self.max_chars = self.max_tokens * CHARS_PER_TOKEN_CAP
        self._keep = np.ones(vocab_size, dtype=bool)
        self._keep[[i for i in special_ids if 0 <= i < vocab_size]] = False
        self._vocab_size = vocab_size
        eligible, why = word_cache_eligible(self._tok)
        self.word_cache = eligible and cache_size > 0
        logger.debug("query tokenizer: word cache %s (%s)", self.word_cache, why)
        added = [t.content for t in self._tok.get_added_tokens_decoder().values() if t.content.strip()]
        patterns = [_SPLIT_MISMATCH.pattern, re.escape(_SENTINEL)]
        patterns += [re.escape(a) for a in sorted(added, key=len, reverse=True)]
        # texts matching this go through the tokenizer instead of the word cache
        self._slow_re = re.compile("|".join(patterns), re.IGNORECASE)
        # a batch without any of these characters has no such text (checked with `in`)
        self._triggers = sorted(set("\x0b\x0c\x1c\x1d\x1e\x1f\x85" + _SENTINEL)
                                | {a[0].lower() for a in added} | {a[0].upper() for a in added})
        self._batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        self._cache = _ChunkStore(self._tok, self._batch, cache_size)
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def _warn_once(self, what: str, message: str, *args: object) -> None:
        if what not in self._warned:
            self._warned.add(what)
            logger.warning(message, *args)

    def _cut(self, texts: Sequence[str]) -> list[str]:
        texts = list(texts)
        if texts and max(map(len, texts)) > self.max_chars:
            longest = max(map(len, texts))
            self._warn_once("chars", "query of %d characters cut to %d before tokenization "
                            "(max_tokens=%d x %d); further cuts are not logged",
                            longest, self.max_chars, self.max_tokens, CHARS_PER_TOKEN_CAP)
            texts = [t[: self.max_chars] for t in texts]
        return texts

    def _tokenizer_path(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        per_text = [enc.ids for enc in self._batch(list(texts), add_special_tokens=False)]
        lengths = np.fromiter(map(len, per_text), dtype=np.int64, count=len(per_text))
        flat = np.fromiter(chain.from_iterable(per_text), dtype=np.int64, count=int(lengths.sum()))
        return flat, lengths

    def _word_path(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """All texts in one string, split once, chunks looked up, ids gathered (no per-text loop)."""
        if not texts:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        joined = f" {_SENTINEL} ".join(texts) + f" {_SENTINEL}"
        chunks = joined.split()
        with self._lock:  # the store's arrays are replaced when it grows: read a consistent set
            chunk = self._cache.lookup(chunks)
            starts, store_lengths, store_ids = self._cache.starts, self._cache.lengths, self._cache.ids
        chunk_len = store_lengths[chunk]
        ends = np.cumsum(chunk_len)
        flat = store_ids[np.repeat(starts[chunk] - (ends - chunk_len), chunk_len) + np.arange(int(ends[-1]))]
        lengths = np.diff(ends[chunk == 0], prepend=0)  # tokens up to each separator
        return flat, lengths

    def ids(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids as the tokenizer gives them (no special tokens added, none removed).

        Returns:
            ``flat`` [N] int64 and ``lengths`` [n] int64.
        """
        texts = self._cut(texts)
        if not self.word_cache:
            return self._tokenizer_path(texts)
        slow: list[int] = []
        whole = "".join(texts)
        if any(c in whole for c in self._triggers) and self._slow_re.search(whole):
            slow = [i for i, t in enumerate(texts) if self._slow_re.search(t)]
        if not slow:
            return self._word_path(texts)
        fast_texts = list(texts)
        for i in slow:
            fast_texts[i] = ""
        flat, lengths = self._word_path(fast_texts)
        slow_flat, slow_lengths = self._tokenizer_path([texts[i] for i in slow])
        return _merge(flat, lengths, slow_flat, slow_lengths, np.asarray(slow, dtype=np.int64))

    def one(self, text: str) -> np.ndarray | None:
        """Ids of one text from the word cache (specials dropped, capped), or None when some
        chunk is not cached yet or the text needs the tokenizer (then use the batch path)."""
        if not self.word_cache or len(text) > self.max_chars or self._slow_re.search(text):
            return None
        chunks = text.split()
        with self._lock:
            found = list(map(self._cache.index.get, chunks))
            if None in found:
                return None
            tuples = self._cache.tuples
            ids = np.array(list(chain.from_iterable(tuples[i] for i in cast(list[int], found))),
                           dtype=np.int64)
        if len(ids) and not self._keep[ids].all():
            ids = ids[self._keep[ids]]
        if len(ids) > self.max_tokens:
            self._warn_once("tokens", "query of %d tokens capped at max_tokens=%d; further caps "
                            "are not logged", len(ids), self.max_tokens)
            ids = ids[: self.max_tokens]
        return ids

    def raw_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text as the tokenizer gives them (no special tokens added)."""
        flat, lengths = self.ids(texts)
        return [part.tolist() for part in np.split(flat, np.cumsum(lengths)[:-1])] if len(texts) else []

    def __call__(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize a batch.

        Returns:
            ``flat`` [N] int64 ids of all queries back to back, and ``lengths`` [n] int64
            tokens per query (0 when a text has no tokens).
        """
        flat, lengths = self.ids(texts)
        inside = flat < self._vocab_size
        keep = self._keep[np.where(inside, flat, 0)] & inside
        if not keep.all() or (len(lengths) and lengths.max() > self.max_tokens):
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


def _merge(flat: np.ndarray, lengths: np.ndarray, slow_flat: np.ndarray, slow_lengths: np.ndarray,
           slow: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Put the tokenizer-path ids of the ``slow`` texts (length 0 in ``lengths``) in place."""
    total = lengths.copy()
    total[slow] = slow_lengths
    out_starts = np.cumsum(total) - total
    out = np.empty(int(total.sum()), dtype=np.int64)
    fast_starts = np.cumsum(lengths) - lengths
    out[np.arange(len(flat)) + np.repeat(out_starts - fast_starts, lengths)] = flat
    slow_starts = np.cumsum(slow_lengths) - slow_lengths
    out[np.arange(len(slow_flat)) + np.repeat(out_starts[slow] - slow_starts, slow_lengths)] = slow_flat
    return out, total
