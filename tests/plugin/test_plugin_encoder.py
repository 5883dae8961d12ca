"""The plugin's Java query encoder equals the Python ``QueryEncoder`` (issue 45, item 3).

``EncodeMain`` (compiled from plugin/src with javac) encodes the same texts from the parts
``plugin_parts`` exports: the ADI and SciFact queries, odd texts (quotes, accents, CJK,
emoji, controls, zero-width characters, caps, long and over-the-cap texts) and seeded
random ones, on a tiny WordPiece bundle and on the real packaged tokenizers (MiniLM,
bge-small, e5-small) with random tables. Token ids and sparse maps must be identical, the
dense vectors cosine >= 0.9999999 (they are in fact bitwise equal); a refused text must be
refused by both. Damaged parts are refused naming the part; a BPE bundle is refused.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ingest_support import data_dir
from plugin_encoder_support import ODD_TEXTS, compare, java_encode, random_texts
from tiny_artifacts import bpe_tokenizer, random_tables, tiny_config, wordpiece_tokenizer
from tokenizers import Tokenizer

from lr_opensearch.bundle import load_bundle, save_bundle
from lr_opensearch.errors import ConfigError
from lr_opensearch.evaluation.beir import iter_jsonl
from lr_opensearch.packaged import packaged_model_dir
from lr_opensearch.packaged.onnx_bert import ensure_model, jar_model
from lr_opensearch.plugin import unicode_tables
from lr_opensearch.plugin.artifact import MANIFEST, TABLE, plugin_parts, write_parts
from lr_opensearch.plugin.javac import encode_main_command
from lr_opensearch.query import QueryEncoder


def collection_queries() -> list[str]:
    texts = []
    for name in ("adi", "scifact"):
        path = data_dir() / name / "queries.jsonl.gz"
        if not path.is_file():
            pytest.fail(f"the shared {name} queries are missing ({path})", pytrace=False)
        texts += [row["text"] for _, row in iter_jsonl(path)]
    return texts


def make_bundle(root: Path, tok: Tokenizer, *, idf: bool, seed: int = 0, **config_kw: object) -> Path:
    """A bundle around ``tok`` with random tables (dense 24, served 16) and, with ``idf``,
    random IDF weights in (0, 10)."""
    config = tiny_config(dense_dim=24, served_dim=16, **config_kw)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    weights = None
    if idf:
        rng = np.random.default_rng(seed + 1)
        weights = rng.random(vocab) * 10 + 1e-3
    return save_bundle(root, config, tokenizer=tok, tables=random_tables(config, vocab, seed),
                       sparse_weights=weights)


def real_tokenizer(name: str) -> Tokenizer:
    if name == "minilm":
        return Tokenizer.from_file(str(packaged_model_dir() / "tokenizer.json"))
    model = jar_model(f"packaged:{name}")
    assert model is not None, name
    return Tokenizer.from_file(str(ensure_model(model) / "tokenizer.json"))


def astral_tokenizer() -> Tokenizer:
    """A hand-made BERT WordPiece vocabulary with astral-plane pieces (emoji, music signs),
    word-initial and continuing, so that keys take the ``-Uhhhhhh`` form and WordPiece
    steps back over surrogate pairs."""
    from tokenizers import models, normalizers, pre_tokenizers

    pieces = ["\U0001f600", "\U0001f680", "x\U0001f600", "\U0001d11e", "\U0001f600\U0001f600",
              "\u03b5\u03bb", "\u65e5", "the", "boundary", "layer", "a.b"]
    letters = list("abcdefghijklmnopqrstuvwxyz0123456789")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *letters, *(f"##{c}" for c in letters),
             *pieces, *(f"##{p}" for p in pieces[:5]), "##\U0001f600y", *"!?.,;:'\"-()[]#\u2019"]
    tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens(vocab[:5])
    return tok


CASES = {  # name: (tokenizer, IDF weights, config)
    "astral-idf": (astral_tokenizer, True, {}),
    "tiny-count": (lambda: wordpiece_tokenizer(padding=False), False, {}),
    "tiny-idf-stopwords": (lambda: wordpiece_tokenizer(), True, {"remove_stopwords": True}),
    "minilm-idf-stopwords": (lambda: real_tokenizer("minilm"), True, {"remove_stopwords": True}),
    "minilm-count": (lambda: real_tokenizer("minilm"), False, {}),
    "bge-small-idf": (lambda: real_tokenizer("bge-small"), True, {}),
    "e5-small-idf": (lambda: real_tokenizer("e5-small"), True, {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_java_encoder_equals_python(case: str, tmp_path: Path) -> None:
    make_tok, idf, config_kw = CASES[case]
    bundle = load_bundle(make_bundle(tmp_path / "bundle", make_tok(), idf=idf, **config_kw))
    texts = ODD_TEXTS + collection_queries() + random_texts(400, seed=45)
    encoder = QueryEncoder(bundle)
    header, results = java_encode(plugin_parts(bundle), texts, tmp_path)
    assert (header["bundle_id"], header["dim"], header["max_tokens"]) == (bundle.bundle_id, 16, 512)
    assert header["memory_bytes"] >= bundle.vocab_size * 16 * 4
    got = compare(encoder, texts, results)
    print(f"\n[{case}] {got.texts} texts: ids equal {got.ids_equal}, sparse equal {got.sparse_equal}, "
          f"dense bitwise {got.dense_bitwise}, refused by both {got.refused_both}; min cosine "
          f"{got.min_cosine:.9f}, max abs diff {got.max_abs_diff:.3g}")
    assert not got.failures, "\n".join(got.failures[:20])
    encoded = got.texts - got.refused_both
    assert got.ids_equal == got.sparse_equal == encoded >= 1400
    assert got.refused_both >= 8  # empty, blank, no-token, lone-surrogate and 100,000-char texts
    assert got.min_cosine >= 0.9999999
    if case.startswith("astral"):  # the -Uhhhhhh keys and continuing astral pieces were met
        keys = {k for r in results for k in r.get("sparse", {})}
        assert {"-U01f600", "-23-23-U01f600", "x-U01f600"} <= keys, sorted(keys)[:20]


@pytest.fixture(scope="module")
def minilm_bundle(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("minilm")
    return load_bundle(make_bundle(root / "b", real_tokenizer("minilm"), idf=True, remove_stopwords=True))


# any code point (surrogates, controls, unassigned included), and the odd texts' characters
_any_char = st.characters(codec=None, exclude_categories=()) | st.characters(categories=["Cs"])
_odd_char = st.sampled_from(sorted(set("".join(ODD_TEXTS))))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(alphabet=_any_char | _odd_char, max_size=80), min_size=150, max_size=150))
def test_java_encoder_equals_python_on_generated_texts(minilm_bundle: Any, texts: list[str],
                                                       tmp_path_factory: pytest.TempPathFactory) -> None:
    """Hypothesis: 4 batches of 150 generated texts through MiniLM's tokenizer."""
    _, results = java_encode(plugin_parts(minilm_bundle), texts, tmp_path_factory.mktemp("gen"))
    got = compare(QueryEncoder(minilm_bundle), texts, results)
    assert not got.failures, "\n".join(got.failures[:20])
    assert got.ids_equal + got.refused_both == len(texts)
    print(f"\n[generated] {len(texts)} texts: ids equal {got.ids_equal}, refused by both {got.refused_both}")


def test_sparse_min_idf_and_instruction_match(tmp_path: Path) -> None:
    """The sparse_min_idf mask and a non-default max_tokens travel in the parts."""
    bundle = load_bundle(make_bundle(tmp_path / "b", wordpiece_tokenizer(), idf=True))
    encoder = QueryEncoder(bundle, max_tokens=7, sparse_min_idf=5.0)
    texts = ODD_TEXTS[:40] + random_texts(60, seed=7)
    _, results = java_encode(plugin_parts(bundle, max_tokens=7, sparse_min_idf=5.0), texts, tmp_path)
    got = compare(encoder, texts, results)
    assert not got.failures, "\n".join(got.failures[:20])
    assert got.ids_equal == got.texts - got.refused_both >= 60


def test_bpe_bundle_is_refused_with_a_line_that_says_so(tmp_path: Path) -> None:
    bundle = load_bundle(make_bundle(tmp_path / "bpe", bpe_tokenizer(), idf=False))
    with pytest.raises(ConfigError, match="not WordPiece.*BERT WordPiece bundles only"):
        plugin_parts(bundle)


def _load_error(parts: dict[str, bytes], work: Path) -> str:
    run = subprocess.run(encode_main_command(write_parts(parts, work)), input="", capture_output=True,
                         text=True, check=False, timeout=120)
    assert run.returncode == 3, (run.returncode, run.stderr)
    return run.stderr


@pytest.fixture(scope="module")
def tiny_parts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("parts")
    return plugin_parts(load_bundle(make_bundle(root / "b", wordpiece_tokenizer(), idf=True)))


def test_truncated_table_is_refused_naming_it(tiny_parts: dict[str, bytes], tmp_path: Path) -> None:
    parts = {**tiny_parts, TABLE: tiny_parts[TABLE][:-4]}
    assert "part table.f32le has" in _load_error(parts, tmp_path)


def test_checksum_mismatch_is_refused_naming_the_part(tiny_parts: dict[str, bytes], tmp_path: Path) -> None:
    table = bytearray(tiny_parts[TABLE])
    table[100] ^= 0x40
    assert "part table.f32le fails its checksum" in _load_error({**tiny_parts, TABLE: bytes(table)}, tmp_path)


def test_wrong_format_version_is_refused(tiny_parts: dict[str, bytes], tmp_path: Path) -> None:
    manifest = tiny_parts[MANIFEST].replace(b"format_version=1\n", b"format_version=2\n")
    err = _load_error({**tiny_parts, MANIFEST: manifest}, tmp_path)
    assert "manifest.txt: format_version 2 is not supported" in err


def test_missing_part_is_refused_naming_it(tiny_parts: dict[str, bytes], tmp_path: Path) -> None:
    parts = {k: v for k, v in tiny_parts.items() if k != "vocab.txt"}
    assert "part vocab.txt is missing" in _load_error(parts, tmp_path)


def test_a_part_the_manifest_does_not_list_is_not_read(tiny_parts: dict[str, bytes], tmp_path: Path) -> None:
    """Only checksummed parts are read: IDF weights left out of the manifest's list are refused."""
    manifest = tiny_parts[MANIFEST].replace(b",idf.f64le\n", b"\n")
    assert manifest != tiny_parts[MANIFEST]
    assert "part idf.f64le is missing or not listed" in _load_error({**tiny_parts, MANIFEST: manifest}, tmp_path)


def test_every_code_point_normalises_and_splits_as_tokenizers(tmp_path: Path) -> None:
    """Java's BertNormalizer and BertPreTokenizer give the tokenizer's result for every
    Unicode scalar value (MiniLM's tokenizer; 4096 code points to a text, between '#')."""
    bundle = load_bundle(make_bundle(tmp_path / "b", real_tokenizer("minilm"), idf=False))
    points = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    texts = ["#" + "#".join(points[i : i + 4096]) + "#" for i in range(0, len(points), 4096)]
    _, results = java_encode(plugin_parts(bundle), texts, tmp_path, "--normalize")
    tok = bundle.tokenizer
    for text, got in zip(texts, results, strict=True):
        normal = tok.normalizer.normalize_str(text)
        words = [w for w, _ in tok.pre_tokenizer.pre_tokenize_str(normal)]
        assert got == {"normalized": normal, "words": words}, f"block from U+{ord(text[1]):04X}"


def test_bert_tables_are_current() -> None:
    """BertTables.java holds what the installed tokenizers does (regenerate with
    `python -m lr_opensearch.plugin.unicode_tables` after a tokenizers upgrade)."""
    expected = unicode_tables.generate()
    assert unicode_tables.TABLES_JAVA.read_text(encoding="utf-8") == expected
