"""A bundle's query side as two ml-commons model zips (built from the bundle alone).

The cluster then encodes LightRetriever queries itself (``lr models deploy``), exactly as
:class:`~lr_opensearch.query.QueryEncoder` does client side:

* **dense** (``TEXT_EMBEDDING``, ONNX): ``model.onnx`` + ``tokenizer.json``. The graph is a
  table lookup and a masked mean: ``Gather(table, input_ids)`` (the bundle's float16 table,
  cast to float32 as the client does), each position weighted by
  ``attention_mask x real[id]`` where ``real`` is 0 for the special tokens the encoder
  drops ([CLS], [SEP], [PAD] ...) and 1 otherwise, summed and divided by the number of real
  tokens. It returns that mean at one position, registered with ``pooling_mode: CLS`` (take
  position 0) and ``normalize_result: false``, so the cluster's vector IS the client's mean
  (both ``query_norm`` modes: the encoder never re-normalises; ml-commons' own MEAN pooling
  would divide by the count including [CLS]/[SEP], and its normalisation would change the
  knn score scale, hence neither is used).
* **sparse** (``SPARSE_TOKENIZE``): ``tokenizer.json`` + ``idf.json``. ml-commons keys a
  query token by ``decode([id], skip_special_tokens)`` and weighs it ``idf[key]`` (1.0
  when absent), each distinct token once. The exported tokenizer's *decoder* is replaced so
  that this decode gives the token's ``lrk1`` key (:mod:`lr_opensearch.bundle.keys`: one
  ``Replace`` per non-alphanumeric character of the vocabulary, ``-`` first), and the empty
  string (which ml-commons skips) for the tokens the encoder leaves out of the sparse query
  (stopwords / punctuation of a ``remove_stopwords`` bundle, IDF below ``sparse_min_idf``,
  weight <= 0). So the keys meet the ``lrk1`` keys every existing index stores: no
  re-ingest. ``idf.json`` holds the bundle's IDF weights keyed the same way (none for a
  count bundle: every distinct token then weighs 1).

Both tokenizers truncate at ``max_tokens`` plus the special tokens the template adds, the
encoder's cap; padding is off. ml-commons' tokenizer (DJL) never keeps more than
``CLUSTER_MAX_LENGTH`` (512) tokens including the specials, whatever tokenizer.json says
(measured: a 824-token query is cut to 510 real tokens with [CLS]/[SEP]), so ``max_tokens``
is at most 512 minus those specials (510 for BERT); the default is that limit, and a query
longer than it keeps 510 tokens in the cluster where the client's default keeps 512. The zips are deterministic (fixed member order and times),
so the same bundle and options give the same bytes, hash and model name.

Where the two paths differ (documented in docs/IN_CLUSTER.md): a count bundle's repeated
token (client: its count, cluster: 1); a query with no token left (client: an error,
cluster: a zero vector and an empty sparse query); a text longer than ``max_tokens x 50``
characters (the client cuts the text first).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lr_opensearch.bundle import Bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.engine.adapter import DENSE_KIND, SPARSE_KIND
from lr_opensearch.errors import ConfigError
from lr_opensearch.query.stopwords import sparse_stop_mask
from lr_opensearch.query.tokens import DEFAULT_MAX_TOKENS, plain_copy

ONNX_OPSET = 17  # ml-commons 3.6 runs onnxruntime 1.16: opset <= 19, IR version <= 9
ONNX_IR_VERSION = 8
CLUSTER_MAX_LENGTH = 512  # DJL's cap on the tokens ml-commons' tokenizer keeps, specials included
MAX_FEATURE_WEIGHT = 64.0  # Lucene's FeatureField.newLinearQuery refuses weights above it
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class ModelZip:
    """One model zip for the ml-commons upload API.

    Attributes:
        kind: ``dense`` or ``sparse``.
        name: the model name: ``lr-<bundle id>-<kind>-<content hash>`` (12 hex chars each).
        data: the zip's bytes.
        register: the ``_register`` body (without the chunk count).
    """

    kind: str
    name: str
    data: bytes
    register: dict[str, Any] = field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    return buf.getvalue()


def _added_specials(tokenizer: Any) -> int:
    """How many tokens the post-processor adds to one text ([CLS] + [SEP]: 2)."""
    return len(tokenizer.encode("a").ids) - len(tokenizer.encode("a", add_special_tokens=False).ids)


def cluster_max_tokens(bundle: Bundle, max_tokens: int | None = None) -> int:
    """The query-token cap of the cluster's models: ``max_tokens``, by default the most the
    cluster can keep (``CLUSTER_MAX_LENGTH`` minus the template's specials, capped at the
    encoder's default); ConfigError above that."""
    limit = CLUSTER_MAX_LENGTH - _added_specials(plain_copy(bundle.tokenizer))
    if max_tokens is None:
        return min(DEFAULT_MAX_TOKENS, limit)
    if not 1 <= int(max_tokens) <= limit:
        raise ConfigError(f"max_tokens={max_tokens}: ml-commons keeps at most {CLUSTER_MAX_LENGTH} "
                          f"tokens including the {CLUSTER_MAX_LENGTH - limit} special ones, so "
                          f"the cluster's query cap is 1..{limit}; pass --max-tokens {limit} "
                          "or less (and the same max_tokens to QueryEncoder for equal results)")
    return int(max_tokens)


def cluster_tokenizer(bundle: Bundle, max_tokens: int, dropped: np.ndarray | None = None) -> Any:
    """The bundle's tokenizer as the cluster must run it: no padding, truncation at the
    encoder's cap (``max_tokens`` real tokens plus the template's specials), and with
    ``dropped`` ([V] bool) a decoder giving the ``lrk1`` key of a token, or "" when dropped."""
    from tokenizers import Regex, decoders

    tok = plain_copy(bundle.tokenizer)
    tok.enable_truncation(max_length=cluster_max_tokens(bundle, max_tokens) + _added_specials(tok))
    if dropped is None:
        return tok
    vocab = tok.get_vocab(with_added_tokens=True)
    steps = []
    gone = sorted(t for t, i in vocab.items() if i < len(dropped) and dropped[i])
    if gone:
        pattern = "^(?:" + "|".join(re.escape(t) for t in gone) + ")$"
        steps.append(decoders.Replace(Regex(pattern), ""))
    chars = sorted({c for t in vocab for c in t if not (c.isascii() and c.isalnum())})
    if "-" in chars:  # first: the escapes written next contain "-"
        chars.remove("-")
        steps.append(decoders.Replace("-", encode_key("-")))
    steps += [decoders.Replace(c, encode_key(c)) for c in chars]
    tok.decoder = decoders.Sequence(steps)
    return tok


def sparse_dropped(bundle: Bundle, sparse_min_idf: float = 0.0) -> np.ndarray:
    """[V] bool: tokens the encoder never puts in a sparse query (special tokens, the
    stopword mask, IDF below ``sparse_min_idf``, weight <= 0)."""
    n = bundle.vocab_size
    dropped = np.zeros(n, dtype=bool)
    dropped[[i for i in bundle.special_token_ids if i < n]] = True
    if bundle.config.remove_stopwords:
        dropped |= sparse_stop_mask(bundle.tokenizer, n)
    weights = bundle.sparse_weights
    if sparse_min_idf > 0:
        if weights is None:
            raise ConfigError(f"sparse_min_idf={sparse_min_idf} needs IDF query weights; bundle "
                              f"{bundle.path} has none")
        dropped |= weights < sparse_min_idf
    if weights is not None:
        dropped |= weights <= 0
    return dropped


def _name(bundle: Bundle, kind: str, data: bytes) -> str:
    return f"lr-{bundle.bundle_id[:12]}-{kind}-{hashlib.sha256(data).hexdigest()[:12]}"


def export_sparse(bundle: Bundle, *, max_tokens: int | None = None,
                  sparse_min_idf: float = 0.0) -> ModelZip:
    """The ``SPARSE_TOKENIZE`` zip (tokenizer.json with the key decoder, idf.json)."""
    max_tokens = cluster_max_tokens(bundle, max_tokens)
    dropped = sparse_dropped(bundle, sparse_min_idf)
    tok = cluster_tokenizer(bundle, max_tokens, dropped)
    weights = bundle.sparse_weights
    idf: dict[str, float] = {}
    if weights is not None:
        top = float(weights[~dropped].max(initial=0.0))
        if top > MAX_FEATURE_WEIGHT:
            raise ConfigError(f"bundle {bundle.path}: a sparse query weight is {top:.3g}; the "
                              f"cluster's rank-feature query takes at most {MAX_FEATURE_WEIGHT:g}")
        for i in np.flatnonzero(~dropped).tolist():
            token = tok.id_to_token(i)
            if token is not None:
                idf[encode_key(token)] = float(np.float32(weights[i]))
    files = {"tokenizer.json": tok.to_str().encode(),
             "idf.json": json.dumps(idf, sort_keys=True, ensure_ascii=False).encode()}
    data = _zip(files)
    name = _name(bundle, SPARSE_KIND, data)
    register = {"name": name, "version": "1", "model_format": "TORCH_SCRIPT",
                "function_name": "SPARSE_TOKENIZE",
                "description": f"LightRetriever sparse query encoder of bundle {bundle.bundle_id} "
                               f"({bundle.sparse_weights_kind} weights, lrk1 keys, "
                               f"max_tokens {max_tokens}, sparse_min_idf {sparse_min_idf:g})"}
    return ModelZip(SPARSE_KIND, name, data, register)


def dense_onnx(table: np.ndarray, real: np.ndarray) -> bytes:
    """The serialised ONNX graph of the masked table mean.

    Args:
        table: [V, d] float16 (or float32) rows, as the bundle stores them.
        real: [V] 1.0 for tokens that count, 0.0 for the special tokens.

    Returns:
        ``model.onnx`` bytes: inputs ``input_ids`` / ``attention_mask`` /
        ``token_type_ids`` (int64 [B, S]), output ``lr_query_mean`` float32 [B, 1, d].
    """
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise ConfigError("exporting the dense query model needs the onnx package: pip install "
                          "'lr-opensearch[cluster]' (or pip install onnx)") from None
    d = int(table.shape[1])
    inits = [numpy_helper.from_array(np.ascontiguousarray(table), "table"),
             numpy_helper.from_array(real.astype(np.float32), "real"),
             numpy_helper.from_array(np.array([1], np.int64), "seq_axis"),
             numpy_helper.from_array(np.array([2], np.int64), "last_axis"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["rows_raw"]),
        helper.make_node("Cast", ["rows_raw"], ["rows"], to=TensorProto.FLOAT),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Gather", ["real", "input_ids"], ["is_real"]),
        helper.make_node("Mul", ["is_real", "mask"], ["weight"]),
        helper.make_node("Unsqueeze", ["weight", "last_axis"], ["weight3"]),
        helper.make_node("Mul", ["rows", "weight3"], ["kept"]),
        helper.make_node("ReduceSum", ["kept", "seq_axis"], ["total"], keepdims=1),
        helper.make_node("ReduceSum", ["weight3", "seq_axis"], ["count"], keepdims=1),
        helper.make_node("Max", ["count", "one"], ["count1"]),
        helper.make_node("Div", ["total", "count1"], ["lr_query_mean"]),
    ]
    ids = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "seq"])
           for n in ("input_ids", "attention_mask", "token_type_ids")]
    out = helper.make_tensor_value_info("lr_query_mean", TensorProto.FLOAT, ["batch", 1, d])
    graph = helper.make_graph(nodes, "lr_query_mean", ids, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
                              producer_name="lr-opensearch", producer_version="1")
    model.ir_version = ONNX_IR_VERSION
    onnx.checker.check_model(model)
    return model.SerializeToString(deterministic=True)


def export_dense(bundle: Bundle, *, instruction: str | None = None,
                 max_tokens: int | None = None) -> ModelZip:
    """The ONNX ``TEXT_EMBEDDING`` zip of one instruction's table (served columns)."""
    max_tokens = cluster_max_tokens(bundle, max_tokens)
    name = bundle.resolve_instruction(instruction)
    table = np.asarray(bundle.table(name)[:, : bundle.config.served_dim])
    real = np.ones(bundle.vocab_size, np.float32)
    real[[i for i in bundle.special_token_ids if i < bundle.vocab_size]] = 0.0
    tok = cluster_tokenizer(bundle, max_tokens)
    data = _zip({"model.onnx": dense_onnx(table, real), "tokenizer.json": tok.to_str().encode()})
    model_name = _name(bundle, DENSE_KIND, data)
    register = {"name": model_name, "version": "1", "model_format": "ONNX",
                "function_name": "TEXT_EMBEDDING",
                "description": f"LightRetriever dense query encoder of bundle {bundle.bundle_id} "
                               f"(instruction {name}, max_tokens {max_tokens}): masked table mean",
                "model_config": {"model_type": "bert",
                                 "embedding_dimension": int(bundle.config.served_dim),
                                 "framework_type": "sentence_transformers",
                                 "pooling_mode": "CLS", "normalize_result": False}}
    return ModelZip(DENSE_KIND, model_name, data, register)
