"""The UR²N bundle: one model that retrieves (XTR token embeddings) and reranks (true/false).

Layout (format ``ur2n-bundle``, version 1)::

    bundle/
      ur2n.json               manifest (this module writes and checks it)
      tokenizer.json          HF tokenizers file of the backbone
      backbone/               HF save_pretrained directory (safetensors): the reranker, unchanged
      xtr_head.safetensors    the XTR layer (a trained clone of the backbone's last layer and
                              its final norm) and the projection to token embeddings

The manifest records the format name and version, the :class:`UR2NConfig` (backbone kind
``t5`` | ``decoder``, token dim, the prompt templates, the ``true`` / ``false`` token ids),
the tokenizer's vocabulary size, the size and sha256 of every file, the bundle id (a hash
over the file checksums and the config), the library version that wrote it and, optionally,
how the XTR layer was trained.

This module needs no torch: the torch side (:mod:`lr_opensearch.ur2n.model`) writes the
backbone and the head through the ``write_parts`` callback of :func:`save_ur2n_bundle` and
reads them from the paths a loaded :class:`UR2NBundle` gives.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lr_opensearch.bundle.files import (
    atomic_dir,
    check_listed_files,
    check_target,
    compute_bundle_id,
    copy_tokenizer,
    hash_tree,
    load_tokenizer,
    read_manifest,
    verify_files,
)
from lr_opensearch.bundle.format import TOKENIZER_FILE
from lr_opensearch.errors import BundleError
from lr_opensearch.options import choice
from lr_opensearch.version import __version__

logger = logging.getLogger(__name__)

FORMAT_NAME = "ur2n-bundle"
FORMAT_VERSION = 1
MANIFEST_FILE = "ur2n.json"
BACKBONE_DIR = "backbone"
HEAD_FILE = "xtr_head.safetensors"
BACKBONE_KINDS = ("t5", "decoder")

#: monoT5's reranking prompt (Nogueira et al., 2020), which UR²N keeps.
RERANK_TEMPLATE = "Query: {query} Document: {document} Relevant:"
QUERY_TEMPLATE = "Query: {text}"
DOCUMENT_TEMPLATE = "Document: {text}"


def template_slots(template: str) -> list[str]:
    """The ``{name}`` slots of a template, in order (no other braces are allowed)."""
    slots, rest = [], template
    while "{" in rest:
        head, _, tail = rest.partition("{")
        name, closed, rest = tail.partition("}")
        if not closed or not name.isidentifier() or "}" in head:
            raise BundleError(f"template {template!r}: braces must enclose a slot name like {{text}}")
        slots.append(name)
    if "}" in rest:
        raise BundleError(f"template {template!r}: unmatched '}}'")
    return slots


def render_template(template: str, values: Mapping[str, str]) -> tuple[str, dict[str, tuple[int, int]]]:
    """Fill a template; returns the text and each slot's ``(start, end)`` character span.

    Values are inserted verbatim (braces inside them are not read as slots).
    """
    out, spans, rest = "", {}, template
    while "{" in rest:
        head, _, tail = rest.partition("{")
        name, _, rest = tail.partition("}")
        out += head
        spans[name] = (len(out), len(out) + len(values[name]))
        out += values[name]
    return out + rest, spans


@dataclass(frozen=True)
class UR2NConfig:
    """What a UR²N bundle's model is (stored in the manifest).

    Attributes:
        backbone_name: where the backbone came from (a hub name or a path).
        architecture: the HF architecture (``T5ForConditionalGeneration``, ``LlamaForCausalLM``).
        kind: ``t5`` (encoder-decoder: the XTR layer clones the encoder's last block; the
            decoder's first step scores true / false) or ``decoder`` (causal LM: the XTR
            layer clones the last decoder layer; the next-token logits after the rerank
            prompt score true / false).
        hidden_size: the backbone's hidden width (the projection's input).
        token_dim: the width of the token embeddings (the projection's output).
        max_length: tokens of a framed document (token embeddings) or rerank prompt.
        query_max_length: tokens of a framed query.
        query_template / document_template: how a query / document is framed for its token
            embeddings (slot ``{text}``; the template's own tokens are dropped from the output).
        rerank_template: the reranker's prompt (slots ``{query}`` and ``{document}``).
        true_token_id / false_token_id: the answer tokens whose probabilities score relevance.
    """

    backbone_name: str
    architecture: str
    kind: str
    hidden_size: int
    token_dim: int
    true_token_id: int
    false_token_id: int
    max_length: int = 256
    query_max_length: int = 64
    query_template: str = QUERY_TEMPLATE
    document_template: str = DOCUMENT_TEMPLATE
    rerank_template: str = RERANK_TEMPLATE

    def __post_init__(self) -> None:
        choice("UR2NConfig.kind", self.kind, BACKBONE_KINDS, BundleError)
        if min(self.hidden_size, self.token_dim, self.max_length, self.query_max_length) < 1:
            raise BundleError("UR2NConfig: hidden_size, token_dim, max_length and "
                              "query_max_length must be >= 1")
        if self.true_token_id == self.false_token_id:
            raise BundleError(f"UR2NConfig: true and false are the same token "
                              f"({self.true_token_id}); give two distinct answer tokens")
        for name, template, want in (("query_template", self.query_template, ["text"]),
                                     ("document_template", self.document_template, ["text"]),
                                     ("rerank_template", self.rerank_template, ["query", "document"])):
            if sorted(template_slots(template)) != sorted(want):
                raise BundleError(f"UR2NConfig.{name} {template!r} must hold exactly the slots "
                                  f"{['{' + s + '}' for s in want]}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "config") -> UR2NConfig:
        """Build from a manifest's ``config``; unknown or missing fields are BundleErrors."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise BundleError(f"{source}: unknown UR2NConfig fields {unknown}; valid: {names}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise BundleError(f"{source}: invalid UR2NConfig: {exc}") from None


@dataclass(frozen=True)
class UR2NBundle:
    """A loaded UR²N bundle (build with :func:`load_ur2n_bundle`); paths, no weights."""

    path: Path
    config: UR2NConfig
    manifest: Mapping[str, Any]
    tokenizer: Any

    @property
    def bundle_id(self) -> str:
        return str(self.manifest["bundle_id"])

    @property
    def backbone_dir(self) -> Path:
        """The HF save_pretrained directory of the backbone."""
        return self.path / BACKBONE_DIR

    @property
    def head_file(self) -> Path:
        """The safetensors file of the XTR layer and projection."""
        return self.path / HEAD_FILE

    @property
    def training(self) -> Mapping[str, Any] | None:
        """How the XTR layer was trained (``trainer.ur2n``), or None."""
        return self.manifest.get("training")


def save_ur2n_bundle(out_dir: str | os.PathLike[str], config: UR2NConfig, *, tokenizer: Any,
                     write_parts: Callable[[Path], None], overwrite: bool = False,
                     training: Mapping[str, Any] | None = None) -> Path:
    """Write a UR²N bundle directory (built beside ``out_dir``, then renamed into place).

    Args:
        out_dir: the bundle directory to create.
        config: the model's configuration.
        tokenizer: a ``tokenizers.Tokenizer``, a ``tokenizer.json`` path or a directory holding one.
        write_parts: called with the new directory; must write ``backbone/`` (HF
            save_pretrained, safetensors) and ``xtr_head.safetensors`` into it.
        overwrite: replace an existing bundle at ``out_dir``.
        training: optional JSON-ready record of the training run (manifest ``training``).

    Raises:
        BundleError: ``out_dir`` exists (without ``overwrite``, or is not a UR²N bundle), or
            ``write_parts`` left a part missing or wrote pickled weights.
    """
    out = Path(out_dir)
    check_target(out, overwrite, MANIFEST_FILE, "UR²N bundle")
    with atomic_dir(out) as tmp:
        tok = copy_tokenizer(tokenizer, tmp / TOKENIZER_FILE)
        write_parts(tmp)
        _check_parts(tmp)
        files = hash_tree(tmp, skip=MANIFEST_FILE)
        manifest: dict[str, Any] = {
            "format": FORMAT_NAME, "format_version": FORMAT_VERSION,
            "library_version": __version__,
            "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "bundle_id": compute_bundle_id(files, config.to_dict()),
            "config": config.to_dict(),
            "tokenizer": {"file": TOKENIZER_FILE, "vocab_size": tok.get_vocab_size(with_added_tokens=True)},
            "backbone": BACKBONE_DIR, "xtr_head": HEAD_FILE, "files": files,
        }
        if training is not None:
            manifest["training"] = dict(training)
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    logger.info("wrote UR²N bundle %s (id %s)", out, manifest["bundle_id"])
    return out


def _check_parts(root: Path) -> None:
    backbone = root / BACKBONE_DIR
    if not (backbone / "config.json").is_file() or not any(backbone.glob("*.safetensors")):
        raise BundleError(f"{backbone}: the backbone must be an HF save_pretrained directory "
                          "with config.json and safetensors weights")
    pickled = sorted(p.name for p in backbone.iterdir() if p.suffix in (".bin", ".pt", ".pth", ".pkl"))
    if pickled:
        raise BundleError(f"{backbone}: pickled weight files {pickled} are not allowed; save with safetensors")
    if not (root / HEAD_FILE).is_file():
        raise BundleError(f"{root}: {HEAD_FILE} (the XTR layer and projection) was not written")


def load_ur2n_bundle(path: str | os.PathLike[str], *, verify: bool = True) -> UR2NBundle:
    """Read and check a UR²N bundle directory without executing any code (no torch).

    Args:
        path: the bundle directory (or its ``ur2n.json``).
        verify: hash every file against the manifest (else only sizes are checked).

    Raises:
        BundleError: missing or foreign manifest, newer format version, a missing, resized
            or modified file (named), an edited manifest, or a tokenizer of another size.
    """
    root = Path(path)
    if root.name == MANIFEST_FILE and root.is_file():
        root = root.parent
    manifest = _read_manifest(root)
    files = manifest["files"]
    check_listed_files(root, manifest, MANIFEST_FILE, "UR²N bundle")
    if verify:
        verify_files(root, files, "", MANIFEST_FILE)
    config = UR2NConfig.from_dict(manifest["config"], source=str(root / MANIFEST_FILE))
    tokenizer = load_tokenizer(root / TOKENIZER_FILE, int(manifest["tokenizer"]["vocab_size"]))
    return UR2NBundle(root, config, manifest, tokenizer)


def _read_manifest(root: Path) -> dict[str, Any]:
    return read_manifest(root, MANIFEST_FILE, FORMAT_NAME, FORMAT_VERSION,
                         ("bundle_id", "config", "tokenizer", "files"), "UR²N bundle",
                         "write one with `python -m trainer.ur2n` (export.out) or UR2NModel.save",
                         __version__)
