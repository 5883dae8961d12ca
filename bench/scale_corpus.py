"""Synthetic corpora of any size made from real encoded documents (for bench/scale.py).

The source is one or more indexes that ``python -m ingest.bulk`` filled for one bundle: each
document's dense vector (``lr_dense``), stored sparse terms (``lr_sparse``), title and text
are read back once (scroll) and cached as arrays. A synthetic document recombines two
real ones that are near each other:

- pick a source document ``i`` uniformly and a partner ``p`` among ``i``'s 16 nearest
  source documents (inner product of the dense vectors), and a share ``a ~ U(0.5, 1)``;
- dense: ``a * d_i + (1 - a) * d_p`` plus Gaussian noise (per dimension, 0.15 of that
  dimension's spread over the source), rescaled to the interpolated norm - so new points
  lie between real neighbours, the space fills in where documents are, and no two
  documents coincide;
- sparse: the union of both documents' stored terms, weights ``a * w_i + (1 - a) * w_p``
  times log-normal noise (sigma 0.1), cut to the ``top_k`` heaviest - the terms are
  the source's terms, so the Zipf shape of term frequencies (how long each posting list
  is relative to the others) is the real one, only scaled with the corpus;
- text for BM25: each sentence of ``i`` kept with probability ``a`` and each of ``p`` with
  ``1 - a`` (at least one), title of ``i``: real sentences, real vocabulary, document
  lengths like the source's.

Every chunk of documents comes from its own seeded generator, so a corpus is the same on
every run and any part of it can be rebuilt alone.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

NEIGHBOURS = 16
DENSE_NOISE = 0.15
SPARSE_NOISE = 0.1
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Source:
    """Real encoded documents: ``dense`` [n, d] float32, sparse terms as CSR (``indptr``,
    ``terms`` (ids into ``keys``), ``weights``), ``titles``, ``sentences`` per document, and the documents' ``ids``."""

    ids: list[str]
    dense: np.ndarray
    indptr: np.ndarray
    terms: np.ndarray
    weights: np.ndarray
    keys: list[str]
    titles: list[str]
    sentences: list[list[str]]

    @property
    def size(self) -> int:
        return int(self.dense.shape[0])


def read_source(client: Any, indexes: list[str], cache: Path) -> Source:
    """The documents of ``indexes`` (scrolled once, then read from ``cache``)."""
    from lr_opensearch.engine.adapter import DENSE_FIELD, SPARSE_FIELD, TEXT_FIELDS

    arrays, meta = cache / "source.npz", cache / "source.json"
    if arrays.exists() and meta.exists():
        data = np.load(arrays)
        m = json.loads(meta.read_text(encoding="utf-8"))
        if m["indexes"] == indexes:
            return Source(m["ids"], data["dense"], data["indptr"], data["terms"], data["weights"],
                          m["keys"], m["titles"], m["sentences"])
    dense: list[list[float]] = []
    indptr, terms, weights = [0], [], []
    key_ids: dict[str, int] = {}
    ids: list[str] = []
    titles: list[str] = []
    sentences: list[list[str]] = []
    fields = [DENSE_FIELD, SPARSE_FIELD, *TEXT_FIELDS]
    for index in indexes:
        resp = client.search(index=index, scroll="2m", size=500,
                             body={"_source": fields, "query": {"match_all": {}}})
        while resp["hits"]["hits"]:
            for hit in resp["hits"]["hits"]:
                src = hit["_source"]
                if DENSE_FIELD not in src:
                    raise SystemExit(f"index {index!r}: document {hit['_id']} has no "
                                     f"{DENSE_FIELD} in _source; ingest it with the bundle")
                ids.append(str(hit["_id"]))
                dense.append(src[DENSE_FIELD])
                for key, w in src.get(SPARSE_FIELD, {}).items():
                    terms.append(key_ids.setdefault(key, len(key_ids)))
                    weights.append(float(w))
                indptr.append(len(terms))
                titles.append(str(src.get(TEXT_FIELDS[0]) or ""))
                body = str(src.get(TEXT_FIELDS[1]) or "")
                sentences.append([s for s in _SENTENCE.split(body) if s] or [body])
            resp = client.scroll(scroll_id=resp["_scroll_id"], scroll="2m")
        client.clear_scroll(scroll_id=resp["_scroll_id"])
    src = Source(ids, np.asarray(dense, np.float32), np.asarray(indptr, np.int64),
                 np.asarray(terms, np.int32), np.asarray(weights, np.float32),
                 list(key_ids), titles, sentences)
    cache.mkdir(parents=True, exist_ok=True)
    np.savez(arrays, dense=src.dense, indptr=src.indptr, terms=src.terms, weights=src.weights)
    meta.write_text(json.dumps({"indexes": indexes, "ids": ids, "keys": src.keys, "titles": titles,
                                "sentences": sentences}), encoding="utf-8")
    return src


def real_docs(source: Source, top_k: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The source documents themselves under their own ids, sparse cut to ``top_k`` terms
    (what an ingest with ``sparse_top_k = top_k`` stores): for quality checks with the
    collection's judgments."""
    from lr_opensearch.engine.adapter import DENSE_FIELD, SPARSE_FIELD, TEXT_FIELDS

    s = source
    for i, doc_id in enumerate(s.ids):
        lo, hi = s.indptr[i], s.indptr[i + 1]
        keep = np.argsort(-s.weights[lo:hi])[:top_k]
        yield doc_id, {TEXT_FIELDS[0]: s.titles[i], TEXT_FIELDS[1]: " ".join(s.sentences[i]),
                       DENSE_FIELD: s.dense[i],
                       SPARSE_FIELD: {s.keys[int(s.terms[lo + t])]: float(s.weights[lo + t])
                                      for t in keep}}


def neighbours(dense: np.ndarray, k: int = NEIGHBOURS) -> np.ndarray:
    """[n, k] the ``k`` nearest other documents of each (inner product), in blocks."""
    out = np.empty((dense.shape[0], k), np.int64)
    for lo in range(0, dense.shape[0], 1024):
        sims = dense[lo : lo + 1024] @ dense.T
        for r in range(sims.shape[0]):
            sims[r, lo + r] = -np.inf
        out[lo : lo + 1024] = np.argpartition(-sims, k, axis=1)[:, :k]
    return out


class Synthesizer:
    """Documents ``0 .. n-1`` of the synthetic corpus, in chunks (see the module doc)."""

    def __init__(self, source: Source, *, top_k: int, seed: int = 0) -> None:
        self.src = source
        self.top_k = top_k
        self.seed = seed
        self.nbrs = neighbours(source.dense)
        self.spread = source.dense.std(axis=0) * DENSE_NOISE
        self.norms = np.linalg.norm(source.dense, axis=1)

    def chunk(self, start: int, stop: int) -> Iterator[tuple[str, dict[str, Any]]]:
        """(``_id``, fields) of documents ``start .. stop-1``; dense as a float32 array,
        sparse as {key: weight}."""
        from lr_opensearch.engine.adapter import DENSE_FIELD, SPARSE_FIELD, TEXT_FIELDS

        s, n = self.src, stop - start
        rng = np.random.default_rng([self.seed, start])
        base = rng.integers(s.size, size=n)
        other = self.nbrs[base, rng.integers(NEIGHBOURS, size=n)]
        a = rng.uniform(0.5, 1.0, size=n).astype(np.float32)
        dense = a[:, None] * s.dense[base] + (1 - a)[:, None] * s.dense[other]
        dense += rng.standard_normal(dense.shape, dtype=np.float32) * self.spread
        norm = a * self.norms[base] + (1 - a) * self.norms[other]
        dense *= (norm / np.maximum(np.linalg.norm(dense, axis=1), 1e-12))[:, None]
        for j in range(n):
            i, p, share = int(base[j]), int(other[j]), float(a[j])
            yield f"syn{start + j}", {
                TEXT_FIELDS[0]: s.titles[i],
                TEXT_FIELDS[1]: self._text(rng, i, p, share),
                DENSE_FIELD: dense[j],
                SPARSE_FIELD: self._sparse(rng, i, p, share),
            }

    def _sparse(self, rng: np.random.Generator, i: int, p: int, a: float) -> dict[str, float]:
        s = self.src
        ti, wi = s.terms[s.indptr[i] : s.indptr[i + 1]], s.weights[s.indptr[i] : s.indptr[i + 1]]
        tp, wp = s.terms[s.indptr[p] : s.indptr[p + 1]], s.weights[s.indptr[p] : s.indptr[p + 1]]
        terms = np.concatenate([ti, tp])
        w = np.concatenate([a * wi, (1 - a) * wp])
        uniq, inv = np.unique(terms, return_inverse=True)
        summed = np.zeros(uniq.size, np.float32)
        np.add.at(summed, inv, w)
        summed *= rng.lognormal(0.0, SPARSE_NOISE, size=uniq.size).astype(np.float32)
        keep = np.argsort(-summed)[: self.top_k]
        return {s.keys[int(uniq[t])]: float(summed[t]) for t in keep if summed[t] > 0}

    def _text(self, rng: np.random.Generator, i: int, p: int, a: float) -> str:
        s = self.src
        mine = [x for x in s.sentences[i] if rng.random() < a]
        theirs = [x for x in s.sentences[p] if rng.random() < 1 - a]
        return " ".join(mine + theirs) or s.sentences[i][0]
