"""XTR retrieval over a UR²N token index: score documents from retrieved tokens only.

XTR (Lee et al., "Rethinking the Role of Token Retrieval in Multi-Vector Retrieval",
NeurIPS 2023) retrieves, for each query token ``q_i``, the top ``k'`` document tokens by
inner product over the whole token index, and scores a document ``d`` from those retrieved
tokens alone (no second pass over d's other tokens)::

    s(q, d) = 1/n * sum_i  ( max_{j in d, d_j in top-k'(q_i)} q_i . d_j   if d has one
                             m_i                                            otherwise )

with ``n`` the number of query tokens. The second line is XTR's *missing-similarity
imputation*: a query token that retrieved nothing from ``d`` gets ``m_i``, the smallest
similarity among its own ``k'`` retrieved tokens (the k'-th one), an upper bound of the
true missing similarity (every token of ``d`` scored below it, or it would have been
retrieved). A query token with no retrieved token at all (an empty index or filter)
contributes 0 to every document, which changes no ranking.

:func:`xtr_scores` is that formula as a pure function. :class:`XTRRetriever` runs one
``knn`` search per query token (``k = k'``, all of a batch in one ``_msearch``), scores with
:func:`xtr_scores`, and can rerank the top hits with any reranker of
:mod:`lr_opensearch.search.rerank` (UR²N: the same model's encoder-decoder). Query token
vectors come from a callable (``UR2NModel.token_embeddings(texts, kind="query")``), so this
module imports no torch.

The token index (``index_templates/opensearch/token_index.json``) holds one document per
token (``_id`` = ``<doc id>#<pos>``, fields ``doc_id``, ``pos``, ``lr_token``) and one per
corpus record (``_id`` = its id, ``title``, ``text``, ``metadata``, ``n_tokens``), so knn
hits name their document without fetching a source, and the page and the reranker read
the record documents.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.errors import BundleMismatchError, ConfigError
from lr_opensearch.legs.scores import inner_product_from_score
from lr_opensearch.search.hits import Hit

if TYPE_CHECKING:
    from lr_opensearch.search.rerank import Reranker, RerankStage

logger = logging.getLogger(__name__)

# The token index's field names (index_templates/opensearch/token_index.json): one definition.
TOKEN_FIELD = "lr_token"
DOC_ID_FIELD = "doc_id"
POS_FIELD = "pos"
N_TOKENS_FIELD = "n_tokens"
TOKEN_INDEX_FORMAT = "ur2n-token-index"
DEFAULT_K_PRIME = 100  # tokens retrieved per query token (XTR's k'); not tuned on test data
PAGE_SOURCE = ["title", "text", "metadata"]

Retrieved = Sequence[tuple[str, float]]  # one query token's (doc id, similarity), best first
QueryEncode = Callable[[list[str]], Sequence[np.ndarray]]  # texts -> one [Tq, D] per text


def token_doc_id(doc_id: str, pos: int) -> str:
    """The ``_id`` of token ``pos`` of document ``doc_id`` in the token index."""
    return f"{doc_id}#{int(pos)}"


def doc_of_token(token_id: str) -> str:
    """The document id in a token ``_id`` (the part before the last ``#``)."""
    doc_id, sep, pos = token_id.rpartition("#")
    if not sep or not pos.isdigit():
        raise ConfigError(f"{token_id!r} is not a token _id (<doc id>#<position>): is this "
                          "index a UR²N token index written by `python -m ingest.token_index`?")
    return doc_id


def imputed_similarity(retrieved: Retrieved) -> float:
    """XTR's estimate ``m_i`` for a document this query token did not retrieve: the smallest
    retrieved similarity (the k'-th); 0.0 when the token retrieved nothing."""
    return min((float(s) for _, s in retrieved), default=0.0)


def xtr_scores(retrieved: Sequence[Retrieved], k: int | None = None) -> list[tuple[str, float]]:
    """Score every document that any query token retrieved (see the module docstring).

    Args:
        retrieved: per query token (n of them), its top-k' ``(doc id, similarity)`` token
            hits; a document may appear several times (several of its tokens).
        k: keep the best ``k`` documents (None: all).

    Returns:
        ``(doc id, score)`` best first; ties by doc id.
    """
    n = len(retrieved)
    if n == 0:
        return []
    imputed = np.array([imputed_similarity(r) for r in retrieved], dtype=np.float64)
    docs: dict[str, int] = {}
    rows, cols, sims = [], [], []
    for i, hits in enumerate(retrieved):
        for doc_id, sim in hits:
            rows.append(docs.setdefault(doc_id, len(docs)))
            cols.append(i)
            sims.append(float(sim))
    if not docs:
        return []
    table = np.tile(imputed, (len(docs), 1))  # [n_docs, n]: m_i until a token is retrieved
    np.maximum.at(table, (np.array(rows), np.array(cols)), np.array(sims))
    scores = table.mean(axis=1)
    ranked = sorted(zip(docs, scores.tolist(), strict=True), key=lambda p: (-p[1], p[0]))
    return ranked if k is None else ranked[:k]


def check_token_index(meta: Mapping[str, Any], index: str, bundle_id: str | None = None,
                      token_dim: int | None = None) -> dict[str, Any]:
    """Check an index's ``_meta.lightretriever`` is a token index (of ``bundle_id``, with
    ``token_dim`` when given); return it.

    Raises:
        BundleMismatchError: not a token index, or another bundle / dimension.
    """
    if meta.get("format") != TOKEN_INDEX_FORMAT:
        raise BundleMismatchError(
            f"index {index!r} is not a UR²N token index (its _meta.lightretriever.format is "
            f"{meta.get('format')!r}, expected {TOKEN_INDEX_FORMAT!r}); write one with "
            f"`python -m ingest.token_index CORPUS --ur2n-bundle B --index {index}`")
    expected = {"bundle_id": bundle_id, "token_dim": token_dim}
    wrong = [f"{k}: index has {meta.get(k)!r}, bundle has {v!r}"
             for k, v in expected.items() if v is not None and meta.get(k) != v]
    if wrong:
        raise BundleMismatchError(f"token index {index!r} was written with another UR²N "
                                  f"bundle ({'; '.join(wrong)}); search it with that bundle "
                                  "or write a new token index with this one")
    return dict(meta)


def token_adapter(client: Any) -> Any:
    """The engine adapter for a token index: its knn clauses search ``lr_token``.

    Raises:
        ConfigError: the client is not an OpenSearch one (the token index is OpenSearch's).
    """
    adapter = make_adapter(client)
    if adapter.engine != "opensearch":
        raise ConfigError(f"the UR²N token index exists for OpenSearch only, not "
                          f"{adapter.engine}; connect to an OpenSearch cluster")
    adapter.dense_field = TOKEN_FIELD
    return adapter


class XTRRetriever:
    """XTR retrieval (and optional reranking) on a token index.

    Args:
        client: an OpenSearch client.
        index: the token index.
        encode: texts -> one ``[Tq, D]`` float32 array of query token vectors per text
            (needed by :meth:`search_batch`; :meth:`search_vectors` takes vectors).
        k_prime: document tokens retrieved per query token (XTR's k').
        ef_search: HNSW ``ef_search`` (None: the index default; at least ``k_prime`` is used
            by the engine anyway).
        bundle_id / token_dim: when given, the index ``_meta`` must match them.
        rerank: a second stage: a ready
            :class:`~lr_opensearch.search.rerank.RerankStage` (its depth and time budget),
            or a reranker (the default depth, no budget); None: none.
    """

    def __init__(self, client: Any, index: str, *, encode: QueryEncode | None = None,
                 k_prime: int = DEFAULT_K_PRIME, ef_search: int | None = None,
                 bundle_id: str | None = None, token_dim: int | None = None,
                 rerank: Reranker | RerankStage | None = None) -> None:
        from lr_opensearch.search.rerank import as_stage

        if k_prime < 1:
            raise ConfigError(f"k_prime must be >= 1, got {k_prime}")
        self.adapter = token_adapter(client)
        self.index = index
        self.encode = encode
        self.k_prime = int(k_prime)
        self.ef_search = ef_search
        self.rerank = as_stage(rerank)
        self.meta = check_token_index(self.adapter.index_meta(index), index, bundle_id,
                                      token_dim)

    def token_body(self, vector: np.ndarray) -> dict[str, Any]:
        """One query token's search: the top ``k_prime`` token documents, ids only."""
        query = self.adapter.dense_query(vector, knn_depth=self.k_prime, ef_search=self.ef_search)
        return self.adapter.body(query, size=self.k_prime, source=False)

    def retrieve(self, queries: Sequence[np.ndarray]) -> list[list[list[tuple[str, float]]]]:
        """Per query, per query token: its retrieved ``(doc id, inner product)``; all
        queries' token searches in one ``_msearch`` (chunked by the adapter)."""
        arrays = [self._check(q) for q in queries]
        bodies = [self.token_body(row) for q in arrays for row in q]
        results = self.adapter.msearch(self.index, bodies, what="xtr token search")
        out, at = [], 0
        for q in arrays:
            part = results[at : at + len(q)]
            at += len(q)
            out.append([[(doc_of_token(h.doc_id), inner_product_from_score(h.score))
                         for h in r.hits] for r in part])
        return out

    def search_vectors(self, queries: Sequence[np.ndarray], k: int, *,
                       source: Any = PAGE_SOURCE) -> list[list[Hit]]:
        """Top ``k`` documents per query from its token vectors (``[Tq, D]`` each); the
        hits' sources come from the record documents (``source=False``: none)."""
        ranked = [xtr_scores(r, k) for r in self.retrieve(queries)]
        hits = [[Hit(doc, rank, score)
                 for rank, (doc, score) in enumerate(r, start=1)] for r in ranked]
        return hits if source is False else self.with_sources(hits, k, source)

    def with_sources(self, hits: list[list[Hit]], top: int, source: Any) -> list[list[Hit]]:
        """The hits with the record documents' ``_source`` on each list's first ``top``
        (one ``_mget`` for the batch)."""
        ids = [h.doc_id for r in hits for h in r[:top]]
        sources = self.adapter.fetch_sources(self.index, ids, source)
        return [[dataclasses.replace(h, source=sources.get(h.doc_id)) if i < top else h
                 for i, h in enumerate(r)] for r in hits]

    def search_batch(self, texts: Sequence[str], k: int = 10, *,
                     source: Any = PAGE_SOURCE) -> list[list[Hit]]:
        """Encode ``texts`` with ``encode``, retrieve, and rerank when a stage is set."""
        if self.encode is None:
            raise ConfigError("XTRRetriever.search_batch needs encode= (texts -> query token "
                              "vectors, e.g. UR2NModel.token_embeddings(kind='query')); or "
                              "call search_vectors with vectors")
        texts = list(texts)
        vectors = list(self.encode(texts))
        if len(vectors) != len(texts):
            raise ConfigError(f"the query encoder gave {len(vectors)} arrays for "
                              f"{len(texts)} texts")
        if self.rerank is None:
            return self.search_vectors(vectors, k, source=source)
        first = self.search_vectors(vectors, max(k, self.rerank.depth), source=False)
        first = self.with_sources(first, self.rerank.depth, PAGE_SOURCE)  # what it reads
        out = [self.rerank.apply(t, hits)[:k] for t, hits in zip(texts, first, strict=True)]
        if source is False or source == PAGE_SOURCE and k <= self.rerank.depth:
            return out
        return self.with_sources(out, k, source)

    def _check(self, q: np.ndarray) -> np.ndarray:
        arr = np.asarray(q, dtype=np.float32)
        dim = self.meta.get("token_dim")
        if arr.ndim != 2 or (dim is not None and arr.shape[1] != dim):
            raise ConfigError(f"query token vectors must be [Tq, {dim}], got shape {arr.shape}")
        return arr
