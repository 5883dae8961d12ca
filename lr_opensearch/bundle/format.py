"""The model bundle: the one save / load pair for the artifact trainer, ingest and client share.

Layout (format ``lightretriever-bundle``, version 1)::

    bundle/
      lightretriever.json               manifest (this module writes and checks it)
      tokenizer.json                    HF tokenizers file of the backbone
      query_tables/<name>.safetensors   E[V, dense_dim] float16, tensor "table", one per instruction
      sparse_query_weights.safetensors  optional [V] float32 per-token sparse query weights (IDF)
      doc_encoder/                      optional HF save_pretrained directory
      onnx/                             optional, outside the manifest: doc_encoder's ONNX
                                        graph (model.onnx_graph.bundle_graph checks it)

The manifest records the format name and version, the :class:`BundleConfig`, the
tokenizer's vocabulary size and the special token ids the query and sparse sides exclude,
each instruction's text and table file, the size and sha256 of every file, the bundle id
and the library version that wrote it. Optional (absent in bundles written before the
table fit, which load unchanged): ``fit`` (how the tables were fitted to a corpus, see
``lr_opensearch.fit.tables``) and ``sparse_query_weights`` (``{"kind": "idf", "file": ...}``;
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

import datetime as _dt
import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.bundle.config import BundleConfig
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
from lr_opensearch.errors import BundleError
from lr_opensearch.version import __version__

logger = logging.getLogger(__name__)

FORMAT_NAME = "lightretriever-bundle"
FORMAT_VERSION = 1
MANIFEST_FILE = "lightretriever.json"
TOKENIZER_FILE = "tokenizer.json"
TABLES_DIR = "query_tables"
DOC_ENCODER_DIR = "doc_encoder"
SPARSE_WEIGHTS_FILE = "sparse_query_weights.safetensors"
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
        """How the tables were fitted to a corpus (``lr_opensearch.fit.tables``), or None."""
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


