"""A bundle's query side as the parts the plugin's Java ``QueryModel.load`` reads.

The plugin encodes a query inside the node exactly as
:class:`~lr_opensearch.query.QueryEncoder` does client side, from these parts (format
``lightretriever-plugin-query``, version 1; ``plugin/src/main/java/org/lightretriever/
encode/ModelParts.java`` is the reader):

* ``manifest.txt``: ``key=value`` lines (UTF-8): format and version, bundle id,
  instruction, vocabulary size, ``dim`` (the bundle's served_dim), ``max_tokens`` and the
  character cap, the tokenizer's flags (BertNormalizer's clean_text,
  handle_chinese_chars, strip_accents resolved, lowercase; WordPiece's unknown-token id,
  continuation prefix in ``lrk1``, max_input_chars_per_word), the special and added token
  ids, the sparse weight kind, and the byte size and sha256 of every other part;
* ``vocab.txt``: token of each id, one per line (UTF-8);
* ``table.f32le``: ``[V, served_dim]`` little-endian float32, the encoder's own table
  (the bundle's float16 rows cast to float32, the served columns);
* ``idf.f64le``: ``[V]`` little-endian float64 IDF weights (absent: count weights);
* ``sparse_keep.u8``: ``[V]`` bytes, 1 where a token may enter the sparse query (absent:
  all may), the encoder's stopword / ``sparse_min_idf`` mask.

Only BERT WordPiece tokenizers (BertNormalizer, BertPreTokenizer, WordPiece; the packaged
MiniLM, bge-small, e5-small) are exported; any other (SmolLM2's byte-level BPE) is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.bundle import Bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.errors import ConfigError
from lr_opensearch.query.encoder import QueryEncoder
from lr_opensearch.query.tokens import CHARS_PER_TOKEN_CAP, DEFAULT_MAX_TOKENS

FORMAT = "lightretriever-plugin-query"
FORMAT_VERSION = 1
MANIFEST = "manifest.txt"
VOCAB = "vocab.txt"
TABLE = "table.f32le"
IDF = "idf.f64le"
SPARSE_KEEP = "sparse_keep.u8"
TOKENIZER_KIND = "bert-wordpiece"


def _refuse(bundle: Bundle, what: str) -> ConfigError:
    return ConfigError(
        f"bundle {bundle.path}: {what}; the plugin encodes BERT WordPiece bundles only "
        "(packaged MiniLM, bge-small, e5-small). Search this bundle's index with client "
        "fusion (`lr search`) or the ml-commons path (`lr models deploy`) instead")


def tokenizer_options(bundle: Bundle) -> dict[str, str]:
    """The manifest lines that describe the bundle's tokenizer (ConfigError if it is not
    BERT WordPiece, or uses a feature the plugin does not reproduce)."""
    spec = json.loads(bundle.tokenizer.to_str())
    model, norm, pre = spec.get("model") or {}, spec.get("normalizer") or {}, spec.get("pre_tokenizer") or {}
    if model.get("type") != "WordPiece":
        raise _refuse(bundle, f"its tokenizer's model is {model.get('type')!r} (e.g. byte-level "
                              "BPE), not WordPiece")
    if norm.get("type") != "BertNormalizer" or pre.get("type") != "BertPreTokenizer":
        raise _refuse(bundle, f"its WordPiece tokenizer uses normalizer {norm.get('type')!r} and "
                              f"pre-tokenizer {pre.get('type')!r}, not BertNormalizer + BertPreTokenizer")
    odd = [t["content"] for t in spec.get("added_tokens", [])
           if t.get("normalized") or t.get("lstrip") or t.get("rstrip") or t.get("single_word")]
    if odd:
        raise _refuse(bundle, f"added tokens {odd[:3]} are normalised, stripped or single-word")
    unk = bundle.tokenizer.token_to_id(model["unk_token"])
    if unk is None:
        raise _refuse(bundle, f"its unknown token {model['unk_token']!r} is not in the vocabulary")
    strip = norm.get("strip_accents")
    return {
        "tokenizer": TOKENIZER_KIND,
        "clean_text": _flag(norm.get("clean_text", True)),
        "handle_chinese_chars": _flag(norm.get("handle_chinese_chars", True)),
        "strip_accents": _flag(norm.get("lowercase", True) if strip is None else strip),
        "lowercase": _flag(norm.get("lowercase", True)),
        "unk_id": str(unk),
        "continuing_subword_prefix": encode_key(model.get("continuing_subword_prefix", "##")),
        "max_input_chars_per_word": str(int(model.get("max_input_chars_per_word", 100))),
        "wordpiece_size": str(len(model["vocab"])),
        "added_ids": ",".join(str(int(t["id"])) for t in spec.get("added_tokens", [])),
    }


def _flag(value: Any) -> str:
    return "true" if bool(value) else "false"


def _vocab(bundle: Bundle, wordpiece: dict[str, int]) -> bytes:
    tokens = [bundle.tokenizer.id_to_token(i) or "" for i in range(bundle.vocab_size)]
    bad = [t for t in tokens if "\n" in t]
    if bad:
        raise _refuse(bundle, f"vocabulary tokens {bad[:3]!r} contain a line break")
    if any(tokens[i] != t for t, i in wordpiece.items() if i < len(tokens)) or \
            max(wordpiece.values(), default=-1) >= len(wordpiece):
        raise _refuse(bundle, "its WordPiece vocabulary is not ids 0..n-1 of the tokenizer's")
    return "\n".join(tokens).encode("utf-8")


def plugin_parts(bundle: Bundle, instruction: str | None = None, *,
                 max_tokens: int = DEFAULT_MAX_TOKENS, sparse_min_idf: float = 0.0) -> dict[str, bytes]:
    """The parts ``QueryModel.load`` reads: part name -> bytes.

    Args:
        bundle: a loaded bundle with a BERT WordPiece tokenizer.
        instruction: the instruction whose table is exported (None: the bundle's default).
        max_tokens: tokens kept per query (the encoder's cap).
        sparse_min_idf: leave tokens with IDF below it out of the sparse query (as the encoder).

    Raises:
        ConfigError: the tokenizer is not BERT WordPiece (names what it is).
    """
    options = tokenizer_options(bundle)
    encoder = QueryEncoder(bundle, instruction, max_tokens, table_dtype="float32",
                           cache_size=0, sparse_min_idf=sparse_min_idf)
    wordpiece = json.loads(bundle.tokenizer.to_str())["model"]["vocab"]
    parts = {VOCAB: _vocab(bundle, wordpiece),
             TABLE: np.ascontiguousarray(encoder.table(), dtype="<f4").tobytes()}
    weights = bundle.sparse_weights
    if weights is not None:
        parts[IDF] = np.ascontiguousarray(weights, dtype="<f8").tobytes()
    keep = encoder.sparse_keep()
    if keep is not None:
        parts[SPARSE_KEEP] = keep.astype(np.uint8).tobytes()
    lines = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "bundle_id": bundle.bundle_id,
             "instruction": encoder.instruction, "vocab_size": str(bundle.vocab_size),
             "dim": str(encoder.served_dim), "max_tokens": str(encoder.max_tokens),
             "chars_per_token_cap": str(CHARS_PER_TOKEN_CAP),
             "special_ids": ",".join(map(str, sorted(bundle.special_token_ids))), **options,
             "sparse_weights": "count" if weights is None else "idf",
             "sparse_min_idf": repr(encoder.sparse_min_idf), "sparse_keep": _flag(keep is not None),
             "parts": ",".join(parts)}
    for name, data in parts.items():
        lines[f"size.{name}"] = str(len(data))
        lines[f"sha256.{name}"] = hashlib.sha256(data).hexdigest()
    bad = [k for k, v in lines.items() if "\n" in v or "=" in k]
    if bad:
        raise ConfigError(f"manifest values {bad} cannot be written as key=value lines")
    manifest = "".join(f"{k}={v}\n" for k, v in lines.items())
    return {MANIFEST: manifest.encode("utf-8"), **parts}


def write_parts(parts: dict[str, bytes], directory: str | Path) -> Path:
    """Write each part as a file of ``directory`` (created); returns the directory."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in parts.items():
        (out / name).write_bytes(data)
    return out
