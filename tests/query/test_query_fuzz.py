"""Property-based tests of the query side (Hypothesis): arbitrary unicode, control
characters, very long texts, texts of only stopwords or punctuation, emoji and mixed
scripts never crash the encoder, never yield NaN or inf, and either encode or raise the
typed QueryError; a sample goes through ``Retriever.search`` against the real node with
the same guarantee. ``bench/fuzz_queries.py`` runs 100,000 of them."""

from __future__ import annotations

import math
import uuid
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_artifacts import SENTENCES, bpe_tokenizer, tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.errors import LRError, QueryError
from lr_opensearch.query import QueryEncoder
from lr_opensearch.query.stopwords import ENGLISH_STOPWORDS

STOPWORDS = sorted(ENGLISH_STOPWORDS)
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~¡¿«»—–…·•§¶")
EMOJI = ["\U0001f600", "\U0001f680", "\u2764\ufe0f", "\U0001f44d\U0001f3fd", "\U0001f1e9\U0001f1ea",
         "\U0001f9d1\u200d\U0001f4bb"]
SCRIPTS = ["boundary layer", "Grenzschicht", "пограничный слой", "境界層", "طبقة حدية",
           "סף", "परत", "경계층", "ขอบเขต", "Ωμέγα"]

# every code point class, surrogates and controls included
any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=())
                   | st.characters(categories=["Cs"]), max_size=300)
control_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x1F) |
                       st.sampled_from(["\x7f", "\u200b", "\ufeff", "\u2028", "\x85"]),
                       max_size=50)
long_text = st.lists(st.sampled_from(SENTENCES + SCRIPTS), min_size=200, max_size=800).map(" ".join)
stop_or_punct = st.lists(st.sampled_from(STOPWORDS + PUNCT), min_size=1, max_size=30).map(" ".join)
mixed = st.lists(st.sampled_from(SCRIPTS + EMOJI + PUNCT + STOPWORDS), min_size=1,
                 max_size=25).map(lambda parts: "".join(parts))
queries = st.one_of(any_text, control_text, long_text, stop_or_punct, mixed)


@pytest.fixture(scope="module", params=["wordpiece", "bpe"])
def encoders(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Per tokenizer kind: an encoder of a plain bundle and of one that drops stopwords
    and normalises rows."""
    tok = wordpiece_tokenizer(padding=False) if request.param == "wordpiece" else bpe_tokenizer()
    root = tmp_path_factory.mktemp(f"fuzz-{request.param}")
    plain = load_bundle(tiny_bundle(root / "plain", tok, seed=1))
    stop = load_bundle(tiny_bundle(root / "stop", tok, seed=2, remove_stopwords=True,
                                   normalize=True))
    return QueryEncoder(plain), QueryEncoder(stop, max_tokens=64)


def check_encoded(q: Any) -> None:
    dense = np.asarray(q.dense)
    assert dense.ndim == 1 and np.all(np.isfinite(dense))
    for key, weight in q.sparse.items():
        assert isinstance(key, str) and key and "." not in key
        assert math.isfinite(weight) and weight > 0


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=queries)
def test_encode_never_crashes_and_stays_finite(encoders: Any, text: str) -> None:
    for encoder in encoders:
        try:
            q = encoder.encode(text)
        except QueryError as exc:
            assert str(exc)  # typed, and it says something
            continue
        check_encoded(q)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(queries, min_size=1, max_size=6))
def test_a_batch_encodes_each_text_as_alone_or_names_the_bad_one(encoders: Any,
                                                                 texts: list[str]) -> None:
    for encoder in encoders:
        alone: list[Any] = []
        for text in texts:
            try:
                alone.append(encoder.encode(text))
            except QueryError:
                alone.append(None)
        try:
            batch = encoder.encode_batch(texts)
        except QueryError as exc:
            bad = [i for i, q in enumerate(alone) if q is None]
            assert bad and f"query {bad[0]}" in str(exc)
            continue
        assert all(q is not None for q in alone)
        for i, q in enumerate(alone):
            np.testing.assert_allclose(batch.dense[i], q.dense, rtol=1e-5, atol=1e-6)
            assert batch.sparse[i] == pytest.approx(q.sparse)


def test_the_strategies_reach_both_outcomes(encoders: Any) -> None:
    """The properties above are not vacuous: these inputs give each outcome."""
    plain, stop = encoders
    check_encoded(plain.encode("boundary layer \U0001f600 境界層 \x00\x07"))
    check_encoded(plain.encode(" ".join(SENTENCES * 40)))  # cut to max_tokens, logged
    with pytest.raises(QueryError):
        plain.encode("")
    with pytest.raises(QueryError, match="not valid Unicode: a lone surrogate U\\+D800"):
        plain.encode("a\ud800b")
    q = stop.encode("the of and , .")  # dense from every token; sparse may be empty
    assert np.all(np.isfinite(q.dense))


@pytest.mark.node
def test_fuzzed_queries_through_retriever_search(os_client: Any,
                                                 tmp_path_factory: pytest.TempPathFactory) -> None:
    from corpus_support import random_docs, tiny_vocab

    from lr_opensearch.engine.opensearch import OpenSearchAdapter
    from lr_opensearch.search import Retriever

    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(tmp_path_factory.mktemp("fuzz-node") / "b", tok, seed=3,
                                     weights={"bm25": 0.4, "dense": 0.4, "sparse": 0.2}))
    index = f"lr-test-fuzz-{uuid.uuid4().hex[:8]}"
    OpenSearchAdapter(os_client).create_index(index, bundle)
    ops: list[dict[str, Any]] = []
    for i, doc in enumerate(random_docs(5, 30, tiny_vocab(tok), tokens=6, weights=(0.1, 2.0))):
        ops += [{"index": {"_index": index, "_id": f"d{i}"}},
                {"lr_dense": doc.dense.tolist(), "lr_sparse": doc.sparse,
                 "title": " ".join(doc.tokens), "text": SENTENCES[i % len(SENTENCES)]}]
    assert not os_client.bulk(body=ops, refresh=True)["errors"]
    retriever = Retriever(bundle, os_client, index, candidates=20)
    outcomes = {"hits": 0, "typed": 0}

    @settings(max_examples=60, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(text=queries, mode=st.sampled_from(["hybrid", "dense", "sparse", "bm25"]))
    def search(text: str, mode: str) -> None:
        try:
            hits = retriever.search(text, k=5, mode=mode)
        except LRError as exc:  # QueryError, or the engine refusing the text, typed
            assert str(exc)
            outcomes["typed"] += 1
            return
        outcomes["hits"] += 1
        assert len(hits) <= 5
        for h in hits:
            assert math.isfinite(h.score)
            assert all(s is None or math.isfinite(s) for s in (h.scores.get("dense"), h.scores.get("sparse")))

    try:
        search()
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)
    assert outcomes["hits"] > 0


def test_surrogates_and_non_strings_are_typed_errors(encoders: Any) -> None:
    plain, _ = encoders
    for text in ("\ud800", "a\ud800b", "\udfff" * 3):
        with pytest.raises(QueryError, match="query 0 is not valid Unicode"):
            plain.encode(text)
    with pytest.raises(QueryError, match="query 2 is not valid Unicode"):
        plain.encode_batch(["ok", "fine", "x\udc80"])
    for value in (None, b"bytes", 3):
        with pytest.raises(QueryError, match="must be a string|is not a string"):
            plain.encode(value)  # type: ignore[arg-type]
    with pytest.raises(QueryError, match="query 1 is not a string"):
        plain.encode_batch(["ok", None])  # type: ignore[list-item]
    check_encoded(plain.encode("nul \x00 inside"))
