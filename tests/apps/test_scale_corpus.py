"""The scale bench's synthetic corpus (bench/scale_corpus.py): reproducible, shaped like its
source, and the real documents copied faithfully for its quality check."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from scale_corpus import Source, Synthesizer, neighbours, real_docs  # noqa: E402

from lr_opensearch.engine.adapter import DENSE_FIELD, SPARSE_FIELD, TEXT_FIELDS  # noqa: E402


@pytest.fixture(scope="module")
def source() -> Source:
    rng = np.random.default_rng(7)
    n, dim, vocab = 60, 16, 400
    dense = rng.standard_normal((n, dim)).astype(np.float32)
    indptr, terms, weights = [0], [], []
    zipf = 1.0 / np.arange(1, vocab + 1)
    for _ in range(n):
        t = rng.choice(vocab, size=30, replace=False, p=zipf / zipf.sum())
        terms += t.tolist()
        weights += rng.uniform(0.1, 3.0, size=30).tolist()
        indptr.append(len(terms))
    return Source([f"d{i}" for i in range(n)], dense, np.asarray(indptr),
                  np.asarray(terms, np.int32), np.asarray(weights, np.float32),
                  [f"k{t}" for t in range(vocab)], [f"title {i}" for i in range(n)],
                  [[f"Sentence {j} of {i}." for j in range(4)] for i in range(n)])


def test_chunks_are_reproducible_and_independent(source: Source) -> None:
    synth = Synthesizer(source, top_k=20, seed=3)
    whole = list(synth.chunk(0, 40))
    again = list(Synthesizer(source, top_k=20, seed=3).chunk(0, 40))
    assert [d for d, _ in whole] == [f"syn{i}" for i in range(40)]
    for (_, a), (_, b) in zip(whole, again, strict=True):
        assert np.array_equal(a[DENSE_FIELD], b[DENSE_FIELD])
        assert a[SPARSE_FIELD] == b[SPARSE_FIELD] and a[TEXT_FIELDS[1]] == b[TEXT_FIELDS[1]]
    other_seed = list(Synthesizer(source, top_k=20, seed=4).chunk(0, 40))
    assert not np.array_equal(whole[0][1][DENSE_FIELD], other_seed[0][1][DENSE_FIELD])


def test_documents_recombine_real_neighbours(source: Source) -> None:
    synth = Synthesizer(source, top_k=20)
    keys = set(source.keys)
    sentences = {s for doc in source.sentences for s in doc}
    unit = source.dense / np.linalg.norm(source.dense, axis=1, keepdims=True)
    to_base, to_random = [], []
    rng = np.random.default_rng(0)
    for _, doc in synth.chunk(100, 300):
        sparse = doc[SPARSE_FIELD]
        assert 0 < len(sparse) <= 20 and set(sparse) <= keys
        assert all(w > 0 for w in sparse.values())
        assert all(part in sentences for part in re.split(r"(?<=[.!?])\s+", doc[TEXT_FIELDS[1]]))
        base = source.titles.index(doc[TEXT_FIELDS[0]])
        v = doc[DENSE_FIELD] / np.linalg.norm(doc[DENSE_FIELD])
        to_base.append(float(unit[base] @ v))
        to_random.append(float(unit[rng.integers(source.size)] @ v))
    # each vector lies near the real document it was made from (a share >= 0.5 of it),
    # not anywhere: neighbourhoods survive
    assert np.mean(to_base) > 0.6 and min(to_base) > 0.3
    assert abs(np.mean(to_random)) < 0.3


def test_neighbours_exclude_self_and_are_nearest(source: Source) -> None:
    nb = neighbours(source.dense, k=5)
    sims = source.dense @ source.dense.T
    for i in range(source.size):
        assert i not in nb[i]
        others = np.delete(sims[i], i)
        assert sims[i, nb[i]].min() >= np.sort(others)[-5] - 1e-6


def test_real_docs_keep_ids_and_cut_to_top_k(source: Source) -> None:
    docs = list(real_docs(source, top_k=10))
    assert [d for d, _ in docs] == source.ids
    lo, hi = source.indptr[0], source.indptr[1]
    heaviest = sorted(zip(source.weights[lo:hi], source.terms[lo:hi], strict=True),
                      reverse=True)[:10]
    assert docs[0][1][SPARSE_FIELD] == {source.keys[int(t)]: float(w) for w, t in heaviest}
    assert np.array_equal(docs[0][1][DENSE_FIELD], source.dense[0])
