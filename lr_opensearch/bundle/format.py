"""The model bundle: the one save / load pair for the artifact trainer, ingest and client share.

Layout (format ``lightretriever-bundle``, version 1)::

    bundle/
      lightretriever.json               manifest (this module writes and checks it)
      tokenizer.json                    HF tokenizers file of the backbone
      query_tables/<name>.safetensors   E[V, dense_dim] float16, tensor "table", one per instruction
      sparse_query_weights.safetensors  optional [V] float32 per-token sparse query weights (IDF)
      doc_encoder/                      optional HF save_pretrained directory

The manifest records the format name and version, the :class:`BundleConfig`, the
tokenizer's vocabulary size and the special token ids the query and sparse sides exclude,
each instruction's text and table file, the size and sha256 of every file, the bundle id
and the library version that wrote it. Optional (absent in bundles written before the
table fit, which load unchanged): ``fit`` (how the tables were fitted to a corpus, see
``lr_opensearch.bundle.fit``) and ``sparse_query_weights`` (``{"kind": "idf", "file": ...}``;
without it a query's sparse weights are token counts).

Loading executes no code: JSON, ``tokenizers`` and safetensors read through ``numpy``.
Tables are memory-mapped (read-only) and opened on first use.

Verification (``load_bundle(path, verify=True)``): every listed file must exist with its
recorded size; the tokenizer and the query tables are hashed at load; the doc encoder
files (possibly gigabytes, and not needed on the query side) are hashed the first time
:attr:`Bundle.doc_encoder_dir` is read. :meth:`Bundle.verify_all` hashes everything now.

The bundle id is a hash over the sorted ``(relative path, sha256)`` list of the files plus
the canonical JSON of the config, so two bundles with the same files but a different
served dim or fusion default do not share an id.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import logging
import os
import re
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from lr_opensearch import __version__, legs
from lr_opensearch.bundle.files import (
    atomic_dir,
    check_listed_files,
    check_target,
    compute_bundle_id,
    copy_tokenizer,
    hash_tree,
    load_tokenizer,
    read_manifest,
    read_table,
    read_weights,
    tokenizer_specials,
    verify_files,
    write_table,
    write_weights,
)
from lr_opensearch.bundle.keys import KEY_ENCODING
from lr_opensearch.errors import BundleError, ConfigError
from lr_opensearch.legs import default_weights, validate_weights, weights_of
from lr_opensearch.options import (
    KINDS,
    POOLINGS,
    QUERY_NORMS,
    SEMANTICS,
    SPARSE_HEADS,
    SPARSE_MODES,
    choice,
)

logger = logging.getLogger(__name__)

FORMAT_NAME = "lightretriever-bundle"
FORMAT_VERSION = 1
MANIFEST_FILE = "lightretriever.json"
TOKENIZER_FILE = "tokenizer.json"
TABLES_DIR = "query_tables"
DOC_ENCODER_DIR = "doc_encoder"
SPARSE_WEIGHTS_FILE = "sparse_query_weights.safetensors"
#: Sparse terms stored per document in new bundles. 128 since 2026-11-25 (256 before): on
#: SciFact train queries (docs/RESULTS.md, bench/doc_prune.py) the top 128 of a document's
#: terms gave LR hybrid nDCG@10 0.7149 vs 0.7102 with 256, a third less index and 27 % less
#: hybrid latency. Bundles record their value; old ones keep theirs.
DEFAULT_SPARSE_TOP_K = 128

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")


def _choice(field_name: str, value: str, valid: tuple[str, ...]) -> None:
    choice(f"BundleConfig.{field_name}", value, valid, BundleError)


@dataclass(frozen=True)
class BundleConfig:
    """What a bundle's model is and how its vectors are to be used (stored in the manifest)."""

    backbone_name: str
    architecture: str
    kind: str
    pooling: str
    normalize: bool
    dense_dim: int
    served_dim: int
    max_length: int
    sparse_head: str
    sparse_top_k: int = DEFAULT_SPARSE_TOP_K
    sparse_min_weight: float = 0.0
    key_encoding: str = KEY_ENCODING
    instructions: Mapping[str, str] = field(default_factory=lambda: {"default": ""})
    default_instruction: str = "default"
    #: fusion weight per leg (:mod:`lr_opensearch.legs`); the manifest keeps the legs of
    #: weight > 0. Bundles written before the leg registry have one ``<leg>_weight`` field
    #: per leg (and those before the BM25 leg none for it: 0); they load with the same id.
    weights: Mapping[str, float] = field(default_factory=default_weights)
    fusion_semantics: str = "opensearch"
    remove_stopwords: bool = False
    #: with ``normalize``: "rows" = the table holds L2-normalised token vectors (bundles
    #: written before this field); "mean" = raw token vectors whose mean is the query (its
    #: L2 norm would not change a ranking), as the reference. The query side only averages.
    query_norm: str = "rows"
    #: where the doc encoder's sparse vector comes from (``options.SPARSE_MODES``): "max"
    #: (LightRetriever; every bundle written before the field) or a BRIDGE-Embed Medusa
    #: mode, whose heads are ``doc_encoder/medusa.safetensors`` and whose stored weights are
    #: Norm(SoftTopK(h, sparse_top_k, soft_top_k_temperature)). The three fields are left out
    #: of the manifest in "max" mode, so "max" bundles keep their ids.
    sparse_mode: str = "max"
    medusa_heads: int = 0
    soft_top_k_temperature: float = 0.05
    #: text put before every document by the doc encoder (e5's "passage: "); its tokens
    #: count in the dense pooling but not in the sparse max (``DocEncoder``). Left out of
    #: the manifest when empty, so bundles written before the field keep their ids.
    document_prompt: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "instructions", MappingProxyType(dict(self.instructions)))
        _choice("kind", self.kind, KINDS)
        _choice("pooling", self.pooling, POOLINGS)
        _choice("sparse_head", self.sparse_head, SPARSE_HEADS)
        _choice("fusion_semantics", self.fusion_semantics, SEMANTICS)
        _choice("query_norm", self.query_norm, QUERY_NORMS)
        _choice("key_encoding", self.key_encoding, (KEY_ENCODING,))
        _choice("sparse_mode", self.sparse_mode, SPARSE_MODES)
        if self.sparse_mode != "max" and (self.medusa_heads < 1 or not self.soft_top_k_temperature > 0):
            raise BundleError(f"BundleConfig: sparse_mode {self.sparse_mode!r} needs medusa_heads >= 1 "
                              f"and soft_top_k_temperature > 0, got {self.medusa_heads} and "
                              f"{self.soft_top_k_temperature}")
        if not 0 < self.served_dim <= self.dense_dim:
            raise BundleError(
                f"BundleConfig: served_dim={self.served_dim} must be in 1..dense_dim={self.dense_dim}"
            )
        if self.max_length < 1 or self.sparse_top_k < 1:
            raise BundleError("BundleConfig: max_length and sparse_top_k must be >= 1")
        try:
            weights = validate_weights(self.weights, self.fusion_semantics)
        except ConfigError as exc:
            raise BundleError(f"BundleConfig: fusion weights: {exc}") from None
        object.__setattr__(self, "weights", MappingProxyType(weights))
        if not self.instructions:
            raise BundleError("BundleConfig.instructions is empty; give at least {'default': ''}")
        bad = [n for n in self.instructions if not _NAME_RE.match(n)]
        if bad:
            raise BundleError(
                f"BundleConfig: instruction names {bad} are invalid; use 1-64 characters "
                "[A-Za-z0-9_-] starting with a letter or digit (they name table files)"
            )
        if self.default_instruction not in self.instructions:
            raise BundleError(
                f"BundleConfig.default_instruction={self.default_instruction!r} is not one of "
                f"the instructions {sorted(self.instructions)}"
            )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (instructions as a plain dict)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["instructions"] = dict(self.instructions)
        out["weights"] = {leg: w for leg, w in self.weights.items() if w > 0.0}
        if self.sparse_mode == "max":  # as written before the Medusa modes: the same ids
            for name in ("sparse_mode", "medusa_heads", "soft_top_k_temperature"):
                del out[name]
        if not self.document_prompt:
            del out["document_prompt"]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str = "config") -> BundleConfig:
        """Build from a dict; unknown keys are ignored with a warning, missing ones are errors."""
        legacy = {f"{leg}_weight" for leg in legs.names()} & set(data)
        if legacy:  # written before the leg registry: one field per leg
            data = {**{k: v for k, v in data.items() if k not in legacy},
                    "weights": weights_of(data)}
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            logger.warning("%s: ignoring unknown BundleConfig fields %s", source, unknown)
        required = [f.name for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        missing = [n for n in required if n not in data]
        if missing:
            raise BundleError(f"{source}: BundleConfig fields missing: {missing}")
        try:
            return cls(**{k: v for k, v in data.items() if k in names})
        except TypeError as exc:
            raise BundleError(f"{source}: invalid BundleConfig: {exc}") from None


# ----------------------------------------------------------------------------- saving


def save_bundle(
    out_dir: str | os.PathLike[str],
    config: BundleConfig,
    *,
    tokenizer: Any,
    tables: Mapping[str, np.ndarray],
    doc_encoder_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    sparse_weights: np.ndarray | None = None,
    fit: Mapping[str, Any] | None = None,
) -> Path:
    """Write a bundle directory (atomically: built beside ``out_dir``, then renamed).

    Args:
        out_dir: the bundle directory to create.
        config: the bundle's configuration.
        tokenizer: path to a ``tokenizer.json`` (or a directory holding one) or a
            ``tokenizers.Tokenizer``.
        tables: instruction name -> query table ``[V, dense_dim]`` (any float dtype; stored
            float16). Must have exactly the names of ``config.instructions``.
        doc_encoder_dir: an HF ``save_pretrained`` directory copied to ``doc_encoder/``.
        overwrite: replace an existing ``out_dir``.
        sparse_weights: optional ``[V]`` per-token IDF weights for sparse queries (a query
            then weighs each distinct token by it instead of its count).
        fit: optional JSON-ready record of how the tables were fitted (manifest ``fit``).

    Returns:
        The bundle path.

    Raises:
        BundleError: on an existing ``out_dir`` without ``overwrite``, a missing or extra
            table, a table whose shape disagrees with the tokenizer or ``dense_dim``, or
            non-finite table values.
    """
    out = Path(out_dir)
    check_target(out, overwrite, MANIFEST_FILE, "bundle")
    if set(tables) != set(config.instructions):
        raise BundleError(
            f"tables {sorted(tables)} must match the config instructions {sorted(config.instructions)}"
        )
    with atomic_dir(out) as tmp:
        manifest = _write_contents(tmp, config, tokenizer, tables, doc_encoder_dir, sparse_weights)
        if fit is not None:
            manifest["fit"] = dict(fit)
        (tmp / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    logger.info("wrote bundle %s (id %s)", out, manifest["bundle_id"])
    return out


def _write_contents(
    root: Path,
    config: BundleConfig,
    tokenizer: Any,
    tables: Mapping[str, np.ndarray],
    doc_encoder_dir: str | os.PathLike[str] | None,
    sparse_weights: np.ndarray | None = None,
) -> dict[str, Any]:
    tok = copy_tokenizer(tokenizer, root / TOKENIZER_FILE)
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    (root / TABLES_DIR).mkdir()
    table_entries: dict[str, Any] = {}
    for name, instruction in config.instructions.items():
        rel = f"{TABLES_DIR}/{name}.safetensors"
        shape = write_table(root / rel, tables[name], vocab_size, config.dense_dim, name)
        table_entries[name] = {"instruction": instruction, "file": rel, "shape": shape,
                               "dtype": "float16"}
    weights_entry = None
    if sparse_weights is not None:
        write_weights(root / SPARSE_WEIGHTS_FILE, sparse_weights, vocab_size)
        weights_entry = {"kind": "idf", "file": SPARSE_WEIGHTS_FILE}
    doc_rel = None
    if doc_encoder_dir is not None:
        src = Path(doc_encoder_dir)
        if not src.is_dir():
            raise BundleError(f"doc_encoder_dir {src} is not a directory")
        shutil.copytree(src, root / DOC_ENCODER_DIR)
        doc_rel = DOC_ENCODER_DIR
    files = hash_tree(root, skip=MANIFEST_FILE)
    config_dict = config.to_dict()
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "library_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "bundle_id": compute_bundle_id(files, config_dict),
        "config": config_dict,
        "tokenizer": {"file": TOKENIZER_FILE, "vocab_size": vocab_size,
                      "special_token_ids": tokenizer_specials(tok)},
        "query_tables": table_entries,
        "doc_encoder": doc_rel,
        "files": files,
    }
    if weights_entry is not None:
        manifest["sparse_query_weights"] = weights_entry
    return manifest


# ----------------------------------------------------------------------------- loading


class Bundle:
    """A loaded bundle. Build with :func:`load_bundle`.

    Attributes:
        path: the bundle directory.
        config: its :class:`BundleConfig`.
        bundle_id: hash over the file checksums and config (the index ``_meta`` records it).
        manifest: the parsed ``lightretriever.json``.
        tokenizer: the ``tokenizers.Tokenizer`` (as stored: padding/truncation untouched).
    """

    def __init__(self, path: Path, manifest: dict[str, Any], tokenizer: Any, verify: bool):
        self.path = path
        self.manifest = manifest
        self.config = BundleConfig.from_dict(manifest["config"], source=str(path / MANIFEST_FILE))
        self.bundle_id: str = manifest["bundle_id"]
        self.tokenizer = tokenizer
        self._verify = verify
        self._tables: dict[str, np.ndarray] = {}
        self._doc_verified = False
        self._sparse_weights: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"Bundle({str(self.path)!r}, id={self.bundle_id}, backbone={self.config.backbone_name!r})"

    @property
    def vocab_size(self) -> int:
        """V: rows of every query table (tokenizer vocabulary with added tokens)."""
        return int(self.manifest["tokenizer"]["vocab_size"])

    @property
    def special_token_ids(self) -> frozenset[int]:
        """Ids that never count as query tokens nor become sparse keys."""
        return frozenset(int(i) for i in self.manifest["tokenizer"]["special_token_ids"])

    @property
    def instructions(self) -> Mapping[str, str]:
        """Instruction name -> instruction text."""
        return self.config.instructions

    def resolve_instruction(self, name: str | None) -> str:
        """The instruction name to use (``None`` -> the default); error lists valid names."""
        name = self.config.default_instruction if name is None else name
        if name not in self.manifest["query_tables"]:
            raise BundleError(
                f"bundle {self.path} has no instruction {name!r}; valid: {sorted(self.manifest['query_tables'])}"
            )
        return name

    def table(self, name: str | None = None) -> np.ndarray:
        """The query table of an instruction, memory-mapped on first use.

        Returns:
            ``[V, dense_dim]`` float16 read-only array.
        """
        name = self.resolve_instruction(name)
        if name not in self._tables:
            entry = self.manifest["query_tables"][name]
            arr = read_table(self.path / entry["file"])
            expected = (self.vocab_size, self.config.dense_dim)
            if arr.shape != expected:
                raise BundleError(
                    f"{self.path / entry['file']}: table shape {list(arr.shape)} disagrees with the "
                    f"tokenizer vocabulary size and dense_dim {list(expected)}"
                )
            self._tables[name] = arr
        return self._tables[name]

    @property
    def sparse_weights_kind(self) -> str:
        """How a query's sparse weights are made: ``"idf"`` (weights file) or ``"count"``."""
        entry = self.manifest.get("sparse_query_weights")
        return str(entry["kind"]) if entry else "count"

    @property
    def sparse_weights(self) -> np.ndarray | None:
        """``[V]`` float64 per-token sparse query weights, or None (old bundles: counts)."""
        entry = self.manifest.get("sparse_query_weights")
        if entry and self._sparse_weights is None:
            self._sparse_weights = read_weights(self.path / entry["file"], self.vocab_size)
        return self._sparse_weights

    @property
    def fit(self) -> Mapping[str, Any] | None:
        """How the tables were fitted to a corpus (``lr_opensearch.bundle.fit``), or None."""
        return self.manifest.get("fit")

    @property
    def doc_encoder_dir(self) -> Path:
        """The HF ``save_pretrained`` directory of the document encoder (hashed on first use)."""
        rel = self.manifest.get("doc_encoder")
        if not rel:
            raise BundleError(
                f"bundle {self.path} has no doc_encoder/ (a query-only bundle); rebuild it with "
                "`lr bundle build` or trainer export to encode documents"
            )
        if self._verify and not self._doc_verified:
            verify_files(self.path, self.manifest["files"], rel + "/", MANIFEST_FILE)
            self._doc_verified = True
        return self.path / rel

    def verify_all(self) -> None:
        """Hash every file of the bundle now (raises BundleError naming the first bad one)."""
        verify_files(self.path, self.manifest["files"], "", MANIFEST_FILE)
        self._doc_verified = True


def load_bundle(path: str | os.PathLike[str], *, verify: bool = True) -> Bundle:
    """Load a bundle directory without executing any code.

    Args:
        path: the bundle directory (or its ``lightretriever.json``).
        verify: hash the tokenizer and tables now and the doc encoder on first use;
            ``False`` only checks that the files exist with their recorded sizes.

    Returns:
        The :class:`Bundle`.

    Raises:
        BundleError: missing or foreign manifest, newer format version, missing file,
            size or checksum mismatch (naming the file), table shape mismatch.
    """
    root = Path(path)
    if root.name == MANIFEST_FILE and root.is_file():
        root = root.parent
    manifest = _read_manifest(root)
    files = manifest["files"]
    check_listed_files(root, manifest, MANIFEST_FILE, "bundle")
    doc_prefix = (manifest.get("doc_encoder") or "\0") + "/"
    if verify:
        query_side = {k: v for k, v in files.items() if not k.startswith(doc_prefix)}
        verify_files(root, query_side, "", MANIFEST_FILE)
    tokenizer = load_tokenizer(root / manifest["tokenizer"]["file"], int(manifest["tokenizer"]["vocab_size"]))
    bundle = Bundle(root, manifest, tokenizer, verify)
    for name in manifest["query_tables"]:
        bundle.table(name)  # maps the file and checks its shape; rows are paged in lazily
    _ = bundle.sparse_weights  # checks the weights file's shape (V floats), if any
    return bundle


def _read_manifest(root: Path) -> dict[str, Any]:
    return read_manifest(root, MANIFEST_FILE, FORMAT_NAME, FORMAT_VERSION,
                         ("bundle_id", "config", "tokenizer", "query_tables", "files"),
                         "LightRetriever bundle",
                         "build one with `lr bundle build` or trainer export", __version__)


