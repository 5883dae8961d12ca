"""The model-free query encoder: a tokenizer and a table lookup (no torch, no transformers).

LightRetriever encodes a query without running a model:

* **dense** = mean of the rows ``E[t]`` of the instruction's cached table over the
  query's tokens (special tokens excluded, repeats counted), accumulated in float32,
  truncated to the bundle's ``served_dim``;
* **sparse** = ``{encode_key(token): count}`` over the same tokens (minus stopwords and
  punctuation when the bundle was trained with ``remove_stopwords``); when the bundle
  ships per-token weights (``sparse_query_weights``: IDF from its fit corpus), each
  DISTINCT token weighs ``idf[token]`` instead of its count. ``sparse_min_idf`` prunes
  the sparse query: tokens whose IDF is below it (``the``, ``of``, punctuation: weights
  near 0, the longest posting lists) are left out of the sparse leg; the dense side keeps
  them.

The table is used as stored: rows are never re-normalised (``normalize`` in the bundle
config only says the build normalised each unfitted row; a fitted table's row norms carry
each token's weight in the mean).

Batches are vectorised: tokenization by :class:`~lr_opensearch.query.tokens.QueryTokenizer`
(word cache or the Rust batch tokenizer), then an embedding-bag style gather + segment
mean in numpy: queries are sorted by length in blocks and, position by position, the
rows of all queries still that long are gathered and added (no per-token Python loop).
The result for a query does not depend on the batch it is in.

Limits: an empty text or one with no tokens left raises :class:`QueryError` naming it; a
text longer than ``max_tokens`` tokens keeps its first ``max_tokens`` (default 512; the
cut is logged once). The dense vector is therefore always finite.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from lr_opensearch.bundle import Bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.errors import QueryError
from lr_opensearch.query.stopwords import sparse_stop_mask
from lr_opensearch.query.tokens import DEFAULT_MAX_TOKENS, QueryTokenizer

logger = logging.getLogger(__name__)

_BLOCK = 512  # queries per dense block: a block's gathered rows stay in L2
_SLICE = 4096  # queries per pipelined slice (threads > 1)


@dataclass(frozen=True)
class EncodedQuery:
    """One encoded query.

    Attributes:
        dense: [served_dim] float32.
        sparse: {encoded key: weight} (count, or the bundle's IDF of the token).
        token_ids: [T] int64 ids that made the vectors (no special tokens, after the cap).
    """

    dense: np.ndarray
    sparse: dict[str, float]
    token_ids: np.ndarray


@dataclass(frozen=True)
class QueryBatch:
    """Encoded queries, in input order.

    Attributes:
        dense: [n, served_dim] float32.
        sparse: n dicts {encoded key: weight} (a :class:`SparseRows`: the weights are held
            as CSR arrays and each dict is built when it is read).
        token_ids: n int64 arrays (views of one flat array).
    """

    dense: np.ndarray
    sparse: Sequence[dict[str, float]]
    token_ids: Sequence[np.ndarray]

    def __len__(self) -> int:
        return len(self.sparse)

    def __getitem__(self, i: int) -> EncodedQuery:
        return EncodedQuery(self.dense[i], self.sparse[i], self.token_ids[i])


class RaggedIds(Sequence[np.ndarray]):
    """Per-query id arrays as views of one flat array (a read-only list of arrays)."""

    def __init__(self, flat: np.ndarray, lengths: np.ndarray):
        self.flat = flat
        self.lengths = lengths
        self.starts = np.cumsum(lengths) - lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        start = int(self.starts[i])
        return self.flat[start : start + int(self.lengths[i])]


class SparseRows(Sequence[dict[str, float]]):
    """Sparse query vectors of a batch in CSR form, read as a list of ``{key: count}`` dicts.

    ``ids[offsets[i]:offsets[i + 1]]`` are the distinct vocabulary ids of query i (ascending)
    and ``counts[...]`` their weights (counts, or the bundle's IDF); ``self[i]`` builds that query's dict (keys encoded as
    in :mod:`lr_opensearch.bundle.keys`). Equal to any sequence of the same dicts.
    """

    def __init__(self, ids: np.ndarray, counts: np.ndarray, offsets: np.ndarray, keys: np.ndarray):
        self.ids = ids
        self.counts = counts
        self.offsets = offsets
        self._keys = keys

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i):  # type: ignore[no-untyped-def, override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"query {i} out of range for a batch of {n}")
        i %= n
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return dict(zip(self._keys[self.ids[a:b]].tolist(), self.counts[a:b].tolist(), strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SparseRows({len(self)} queries, {len(self.ids)} terms)"

    @classmethod
    def concatenate(cls, parts: Sequence[SparseRows]) -> SparseRows:
        """One batch from consecutive batches (same key table)."""
        offsets = [np.zeros(1, np.int64)]
        base = 0
        for part in parts:
            offsets.append(part.offsets[1:] + base)
            base += len(part.ids)
        return cls(np.concatenate([p.ids for p in parts]), np.concatenate([p.counts for p in parts]),
                   np.concatenate(offsets), parts[0]._keys)


def bag_mean(table: np.ndarray, flat: np.ndarray, lengths: np.ndarray, *, block: int = _BLOCK,
             out: np.ndarray | None = None) -> np.ndarray:
    """Mean of table rows per query (an embedding bag in mean mode), float32.

    Queries are sorted by length (longest first) and cut into blocks of similar length;
    within a block, position by position, the rows of every query that long are gathered
    into a buffer and added to the block's accumulators (two numpy calls per position).

    Args:
        table: [V, d] float32 or float16 rows.
        flat: [N] int64 ids (all < V) of all queries back to back.
        lengths: [n] int64 ids per query, all >= 1, summing to N.
        block: queries handled together (their buffers should fit in L2).
        out: optional [n, d] float32 result buffer.

    Returns:
        [n, d] float32: row i is the mean of ``table[flat[s_i : s_i + lengths[i]]]``,
        summed in position order (so a query's vector is independent of its batch).
    """
    n, d = len(lengths), table.shape[1]
    res = np.empty((n, d), np.float32) if out is None else out
    if n == 0:
        return res
    starts = np.cumsum(lengths) - lengths
    order = np.argsort(-lengths, kind="stable")
    buf = np.empty((min(block, n), d), table.dtype)
    acc = np.empty((min(block, n), d), np.float32)
    last = len(flat) - 1
    for s in range(0, n, block):
        queries = order[s : s + block]
        m, lens = len(queries), lengths[queries]
        longest = int(lens[0])
        live = np.searchsorted(-lens, -np.arange(longest), side="left")  # queries with len > j
        ids = flat[np.minimum(starts[queries][None, :] + np.arange(longest)[:, None], last)]
        # mode="clip": ids are validated (< V) by the tokenizer; the default mode="raise"
        # makes numpy gather into a temporary and copy, about 3x slower.
        np.take(table, ids[0], axis=0, out=buf[:m], mode="clip")
        acc[:m] = buf[:m]
        for j, k in enumerate(live[1:].tolist(), start=1):
            np.take(table, ids[j, :k], axis=0, out=buf[:k], mode="clip")
            np.add(acc[:k], buf[:k], out=acc[:k])
        np.divide(acc[:m], lens[:, None].astype(np.float32), out=acc[:m])
        res[queries] = acc[:m]
    return res


class QueryEncoder:
    """Encode queries with a bundle's tokenizer and query tables.

    Args:
        bundle: a loaded :class:`~lr_opensearch.bundle.Bundle`.
        instruction: default instruction name (``None``: the bundle's default).
        max_tokens: tokens kept per query (first ones); longer queries are cut, logged once.
        table_dtype: ``"float32"`` keeps a float32 copy of the served columns of each used
            table (fastest; 4 x V x served_dim bytes), ``"float16"`` reads the memory-mapped
            table directly. ``"auto"``: float32 when that copy is at most 1 GiB.
        cache_size: word-cache entries of the tokenizer (0: always use the tokenizer).
        threads: 2 pipelines tokenization and the dense lookup of large batches.
        sparse_min_idf: leave tokens whose IDF weight is below this out of the sparse
            query (0: keep every token). Needs a bundle with IDF query weights.
    """

    def __init__(self, bundle: Bundle, instruction: str | None = None,
                 max_tokens: int = DEFAULT_MAX_TOKENS, *, table_dtype: str = "auto",
                 cache_size: int = 1 << 18, threads: int = 2, sparse_min_idf: float = 0.0):
        if table_dtype not in ("auto", "float32", "float16"):
            raise QueryError(f"table_dtype={table_dtype!r}; choose 'auto', 'float32' or 'float16'")
        self.bundle = bundle
        self.config = bundle.config
        self.instruction = bundle.resolve_instruction(instruction)
        self.served_dim = self.config.served_dim
        self.max_tokens = int(max_tokens)
        self.threads = max(1, int(threads))
        if table_dtype == "auto":
            big = bundle.vocab_size * self.served_dim * 4 > (1 << 30)
            table_dtype = "float16" if big else "float32"
        self.table_dtype = table_dtype
        self.tokenizer = QueryTokenizer(bundle.tokenizer, sorted(bundle.special_token_ids),
                                        bundle.vocab_size, max_tokens, cache_size)
        self._tables: dict[str, np.ndarray] = {}
        self._keys: np.ndarray | None = None
        self._sparse_keep: np.ndarray | None = None
        self._sparse_weights = bundle.sparse_weights  # [V] float64 IDF, or None: counts
        self.sparse_min_idf = float(sparse_min_idf)
        if not np.isfinite(self.sparse_min_idf) or self.sparse_min_idf < 0:
            raise QueryError(f"sparse_min_idf must be a finite number >= 0, got {sparse_min_idf!r}")
        if self.sparse_min_idf > 0 and self._sparse_weights is None:
            raise QueryError(f"sparse_min_idf={self.sparse_min_idf} needs IDF query weights, but "
                             f"bundle {bundle.path} has none (its sparse query weights are "
                             "token counts); rebuild it with --fit-corpus, or leave the option out")

    def table(self, instruction: str | None = None) -> np.ndarray:
        """[V, served_dim] rows used for the dense vector (float32 copy or float16 map)."""
        name = self.bundle.resolve_instruction(instruction or self.instruction)
        if name not in self._tables:
            full = self.bundle.table(name)
            if self.table_dtype == "float32":
                self._tables[name] = np.ascontiguousarray(full[:, : self.served_dim], np.float32)
            else:
                self._tables[name] = full[:, : self.served_dim]
        return self._tables[name]

    @property
    def key_array(self) -> np.ndarray:
        """[V] object array: the encoded sparse key of every vocabulary id."""
        if self._keys is None:
            tok = self.bundle.tokenizer
            keys = [encode_key(tok.id_to_token(i) or "") for i in range(self.bundle.vocab_size)]
            self._keys = np.array(keys, dtype=object)
        return self._keys

    def encode(self, text: str, instruction: str | None = None) -> EncodedQuery:
        """Encode one query (same result as :meth:`encode_batch`, lower latency).

        When every word of the text is in the word cache, this skips the batch machinery:
        the rows are summed in position order (as in :func:`bag_mean`), so the vector is
        bitwise the one a batch gives.
        """
        if not isinstance(text, str):
            raise QueryError(f"a query must be a string, got {type(text).__name__}")
        ids = self.tokenizer.one(text)
        if ids is None:
            return self.encode_batch([text], instruction)[0]
        if len(ids) == 0:
            raise _no_tokens(0, text)
        rows = self.table(instruction)[ids]
        if rows.dtype != np.float32:
            rows = rows.astype(np.float32)
        dense = np.add.reduce(rows, axis=0) / np.float32(len(ids))  # row by row, in order
        key: Any = self.key_array
        keep = self.sparse_keep()
        counts = Counter((ids if keep is None else ids[keep[ids]]).tolist())
        w = self._sparse_weights
        if w is not None:
            return EncodedQuery(dense, {key[i]: float(w[i]) for i in counts}, ids)
        return EncodedQuery(dense, {key[i]: float(c) for i, c in counts.items()}, ids)

    def encode_batch(self, texts: Sequence[str], instruction: str | None = None) -> QueryBatch:
        """Encode queries.

        Batches of at least ``2 x 4096`` queries with ``threads=2`` are pipelined: the
        dense lookup of one slice runs in a worker thread (numpy releases the GIL) while
        the next slice is tokenized. Results are identical either way.

        Args:
            texts: the query texts.
            instruction: instruction name selecting the table (default: the encoder's).

        Returns:
            A :class:`QueryBatch` (dense [n, served_dim] float32).

        Raises:
            QueryError: a text is empty or has no tokens left (names it and its position).
        """
        if isinstance(texts, str):
            raise QueryError("encode_batch takes a list of texts; use encode() for one text")
        table = self.table(instruction)
        if self.threads > 1 and len(texts) >= 2 * _SLICE:
            return self._encode_pipelined(texts, table)
        flat, lengths = self.tokenize(texts)
        return QueryBatch(bag_mean(table, flat, lengths), self.sparse(flat, lengths),
                          RaggedIds(flat, lengths))

    def _encode_pipelined(self, texts: Sequence[str], table: np.ndarray) -> QueryBatch:
        n = len(texts)
        dense = np.empty((n, self.served_dim), np.float32)
        flats: list[np.ndarray] = []
        lens: list[np.ndarray] = []
        sparse: list[SparseRows] = []
        with ThreadPoolExecutor(max_workers=self.threads - 1) as pool:
            pending = []
            for s in range(0, n, _SLICE):
                flat, lengths = self.tokenize(texts[s : s + _SLICE], offset=s)
                pending.append(pool.submit(bag_mean, table, flat, lengths, out=dense[s : s + _SLICE]))
                sparse.append(self.sparse(flat, lengths))
                flats.append(flat)
                lens.append(lengths)
            for job in pending:
                job.result()
        return QueryBatch(dense, SparseRows.concatenate(sparse),
                          RaggedIds(np.concatenate(flats), np.concatenate(lens)))

    def tokenize(self, texts: Sequence[str], offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """(flat ids [N] int64, lengths [n] int64); QueryError for a query without tokens.

        ``offset`` is added to the query position named in the error.
        """
        try:
            flat, lengths = self.tokenizer(texts)
        except (TypeError, ValueError, UnicodeError) as exc:  # the Rust tokenizer refused one
            raise _bad_text(texts, offset) or QueryError(
                f"the tokenizer refused a query of this batch: {exc}") from exc
        if len(lengths) and lengths.min() == 0:
            i = int(np.argmin(lengths))
            raise _no_tokens(offset + i, texts[i])
        return flat, lengths

    def sparse_keep(self) -> np.ndarray | None:
        """[V] bool, False for tokens the sparse query drops (``remove_stopwords``, IDF below
        ``sparse_min_idf``), or None when it keeps all. Every encode path filters through
        this one mask."""
        if not self.config.remove_stopwords and self.sparse_min_idf <= 0:
            return None
        if self._sparse_keep is None:
            keep = np.ones(self.bundle.vocab_size, dtype=bool)
            if self.config.remove_stopwords:
                keep &= ~sparse_stop_mask(self.bundle.tokenizer, self.bundle.vocab_size)
            if self.sparse_min_idf > 0 and self._sparse_weights is not None:
                keep &= self._sparse_weights >= self.sparse_min_idf
            self._sparse_keep = keep
        return self._sparse_keep

    def sparse(self, flat: np.ndarray, lengths: np.ndarray) -> SparseRows:
        """Sparse vectors {encoded key: weight} of tokenized queries (vectorised, CSR).

        The weight of a distinct token is its count, or ``idf[token]`` when the bundle ships
        sparse query weights (one gather over the CSR data array).
        """
        n, vocab = len(lengths), self.bundle.vocab_size
        owner = np.repeat(np.arange(n, dtype=np.int64), lengths)
        if (stop_keep := self.sparse_keep()) is not None:
            keep = stop_keep[flat]
            flat, owner = flat[keep], owner[keep]
        pair = owner * vocab + flat  # (query, id) as one sortable int64
        pair.sort()
        first = np.flatnonzero(np.diff(pair, prepend=-1))  # first index of each distinct pair
        counts = np.diff(first, append=len(pair)).astype(np.float64)
        unique = pair[first]
        query = unique // vocab
        offsets = np.searchsorted(query, np.arange(n + 1))
        ids = unique - query * vocab
        if self._sparse_weights is not None:
            counts = self._sparse_weights[ids]
        return SparseRows(ids, counts, offsets, self.key_array)


def _bad_text(texts: Sequence[str], offset: int) -> QueryError | None:
    """The typed error for the first text the tokenizer cannot take (not a string, or a
    lone surrogate, which UTF-8 cannot encode), or None."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            return QueryError(f"query {offset + i} is not a string ({type(text).__name__})")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            return QueryError(f"query {offset + i} is not valid Unicode: a lone surrogate "
                              f"U+{ord(text[exc.start]):04X} at character {exc.start}; "
                              "decode the client's input properly (or replace it) first")
    return None


def _no_tokens(position: int, text: Any) -> QueryError:
    what = "is empty" if not str(text).strip() else "has no tokens after tokenization"
    return QueryError(f"query {position} ({_show(text)}) {what}; LightRetriever needs at least one "
                      "non-special token to build a query vector")


def _show(text: Any, limit: int = 60) -> str:
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit] + "...")
