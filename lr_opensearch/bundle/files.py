"""File-level helpers of the bundle format: hashing, query-table files, tokenizer facts.

Query tables are safetensors files holding one float16 tensor named ``table`` of shape
``[V, dense_dim]``. They are written with ``safetensors.numpy`` and read back as a
read-only ``numpy.memmap`` over the tensor's bytes: the safetensors layout is an 8-byte
little-endian header length, a JSON header (dtype, shape, data offsets), then raw
little-endian data, so mapping it needs no code execution and no copy. Only the rows a
query touches are ever paged in.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.errors import BundleError

TABLE_TENSOR = "table"
WEIGHTS_TENSOR = "weights"
_MAX_HEADER = 100 * 1024 * 1024


def hash_file(path: str | os.PathLike[str], chunk: int = 1 << 22) -> str:
    """sha256 hex digest of a file, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def tokenizer_specials(tokenizer: Any) -> list[int]:
    """Sorted ids of the tokenizer's special added tokens ([CLS], [PAD], <s>, ...).

    These never count as query tokens and never become sparse keys.
    """
    return sorted(int(i) for i, tok in tokenizer.get_added_tokens_decoder().items() if tok.special)


def write_table(path: Path, table: np.ndarray, vocab_size: int, dense_dim: int, name: str) -> list[int]:
    """Check a query table and store it as float16 safetensors.

    Args:
        path: destination ``.safetensors`` file.
        table: ``[V, dense_dim]`` float array (numpy, or anything ``np.asarray`` accepts).
        vocab_size: V expected from the tokenizer (with added tokens).
        dense_dim: expected row width.
        name: the instruction name, for messages and file metadata.

    Returns:
        The stored shape ``[V, dense_dim]``.
    """
    from safetensors.numpy import save_file

    arr = np.asarray(table)
    if arr.ndim != 2 or arr.shape != (vocab_size, dense_dim):
        raise BundleError(
            f"query table {name!r} has shape {list(arr.shape)}, expected [{vocab_size}, {dense_dim}] "
            "(tokenizer vocabulary size with added tokens, config.dense_dim)"
        )
    if not np.issubdtype(arr.dtype, np.floating):
        raise BundleError(f"query table {name!r} has dtype {arr.dtype}; give a float array")
    with np.errstate(over="ignore"):  # overflow is reported below, with the row
        half = np.ascontiguousarray(arr, dtype=np.float16)
    if not np.isfinite(half).all():
        bad = int(np.argwhere(~np.isfinite(half).all(axis=1))[0, 0])
        raise BundleError(
            f"query table {name!r} has non-finite values in float16 (first at row {bad}); "
            "values must be finite and within +-65504"
        )
    save_file({TABLE_TENSOR: half}, str(path), metadata={"instruction": name})
    return [vocab_size, dense_dim]


def read_table(path: Path) -> np.ndarray:
    """Memory-map the ``table`` tensor of a bundle safetensors file (read-only).

    Returns:
        ``[V, dense_dim]`` float16 ``numpy.memmap``.

    Raises:
        BundleError: if the file is not a safetensors file with a 2-D float16 ``table``.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        raw_len = f.read(8)
        header_len = int.from_bytes(raw_len, "little") if len(raw_len) == 8 else -1
        if not 0 < header_len <= min(_MAX_HEADER, size - 8):
            raise BundleError(f"{path}: not a safetensors file (bad header length)")
        try:
            header = json.loads(f.read(header_len))
        except ValueError as exc:
            raise BundleError(f"{path}: not a safetensors file (header is not JSON: {exc})") from None
    entry = header.get(TABLE_TENSOR) if isinstance(header, dict) else None
    if not isinstance(entry, dict):
        raise BundleError(f"{path}: no tensor named {TABLE_TENSOR!r} in this safetensors file")
    shape, dtype, offsets = entry.get("shape"), entry.get("dtype"), entry.get("data_offsets")
    if dtype != "F16" or not isinstance(shape, list) or len(shape) != 2:
        raise BundleError(f"{path}: tensor {TABLE_TENSOR!r} is {dtype} {shape}, expected F16 [V, dim]")
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise BundleError(f"{path}: tensor {TABLE_TENSOR!r} has no valid data_offsets")
    begin, end = int(offsets[0]), int(offsets[1])
    if end - begin != shape[0] * shape[1] * 2 or 8 + header_len + end > size:
        raise BundleError(f"{path}: tensor data is truncated or its offsets are inconsistent")
    return np.memmap(path, dtype="<f2", mode="r", offset=8 + header_len + begin,
                     shape=(int(shape[0]), int(shape[1])))


def write_weights(path: Path, weights: np.ndarray, vocab_size: int) -> None:
    """Store per-token sparse query weights ``[V]`` (float32, finite, > 0) as safetensors."""
    from safetensors.numpy import save_file

    arr = np.ascontiguousarray(weights, dtype=np.float32)
    if arr.shape != (vocab_size,):
        raise BundleError(f"sparse query weights have shape {list(arr.shape)}, expected [{vocab_size}] "
                          "(tokenizer vocabulary size with added tokens)")
    if not (np.isfinite(arr).all() and (arr > 0).all()):
        raise BundleError("sparse query weights must be finite and > 0")
    save_file({WEIGHTS_TENSOR: arr}, str(path))


def read_weights(path: Path, vocab_size: int) -> np.ndarray:
    """Load the per-token sparse query weights of a bundle: ``[V]`` float64."""
    from safetensors.numpy import load_file

    try:
        arr = load_file(str(path)).get(WEIGHTS_TENSOR)
    except Exception as exc:  # safetensors raises its own error types on bad files
        raise BundleError(f"{path}: not a safetensors file ({exc})") from None
    if arr is None or arr.dtype != np.float32 or arr.shape != (vocab_size,):
        what = "missing" if arr is None else f"{arr.dtype} {list(arr.shape)}"
        raise BundleError(f"{path}: tensor {WEIGHTS_TENSOR!r} is {what}, expected float32 [{vocab_size}]")
    return arr.astype(np.float64)


def copy_tokenizer(tokenizer: Any, dest: Path) -> Any:
    """Store a tokenizer (``Tokenizer`` object, ``tokenizer.json`` path or a directory holding one)."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        tokenizer.save(str(dest))
    else:
        src = Path(tokenizer)
        if src.is_dir():
            src = src / "tokenizer.json"
        if not src.is_file():
            raise BundleError(f"tokenizer file {src} not found; give a tokenizer.json path")
        shutil.copyfile(src, dest)
    try:
        return Tokenizer.from_file(str(dest))
    except Exception as exc:  # tokenizers raises plain Exception on bad files
        raise BundleError(f"{tokenizer}: cannot load as a tokenizers file: {exc}") from None


def hash_tree(root: Path, skip: str) -> dict[str, dict[str, Any]]:
    """``{relative posix path: {"sha256", "size"}}`` for every file under ``root`` but ``skip``."""
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if rel != skip:
            files[rel] = {"sha256": hash_file(path), "size": path.stat().st_size}
    return files


def verify_files(root: Path, files: Mapping[str, Mapping[str, Any]], prefix: str, manifest_name: str) -> None:
    """Hash the listed files whose path starts with ``prefix``; BundleError names the first bad one."""
    for rel, info in files.items():
        if rel.startswith(prefix) and hash_file(root / rel) != info["sha256"]:
            raise BundleError(
                f"bundle {root}: checksum mismatch for {rel} (sha256 differs from {manifest_name}); "
                "the file is corrupt or was modified - rebuild or re-copy the bundle"
            )


def load_tokenizer(path: Path, vocab_size: int) -> Any:
    """Load ``tokenizer.json`` and check its vocabulary size (with added tokens)."""
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(path))
    except Exception as exc:  # tokenizers raises plain Exception on bad files
        raise BundleError(f"{path}: cannot load tokenizer: {exc}") from None
    size = tok.get_vocab_size(with_added_tokens=True)
    if size != vocab_size:
        raise BundleError(
            f"{path}: tokenizer vocabulary size {size} disagrees with the manifest "
            f"({vocab_size}) and the query tables"
        )
    return tok


def check_target(out: Path, overwrite: bool, manifest_file: str, what: str) -> None:
    """Refuse to write a bundle over an existing ``out`` without ``overwrite``, or over a
    non-empty directory that is not a bundle (no ``manifest_file``)."""
    if out.exists() and not overwrite:
        raise BundleError(f"{out} already exists; pass overwrite=True (--overwrite) to replace it")
    if out.exists() and not (out / manifest_file).is_file() and any(out.iterdir()):
        raise BundleError(f"{out} exists and is not a {what}; refusing to overwrite it, choose "
                          "another path")


@contextmanager
def atomic_dir(out: Path) -> Iterator[Path]:
    """A fresh temporary directory beside ``out`` that replaces ``out`` when the block ends
    without an error; on an error it is removed and ``out`` stays as it was."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def read_manifest(root: Path, manifest_file: str, format_name: str, max_version: int,
                  required: tuple[str, ...], what: str, how_to_make: str,
                  library_version: str) -> dict[str, Any]:
    """The JSON manifest of a bundle directory, checked: it exists, is JSON, names
    ``format_name`` at a version this library reads (<= ``max_version``) and has the
    ``required`` fields. ``what`` names the bundle kind and ``how_to_make`` how to write one,
    for the error messages."""
    mpath = root / manifest_file
    if not mpath.is_file():
        state = "does not exist" if not root.exists() else f"has no {manifest_file}"
        raise BundleError(f"{root} {state}: not a {what}; {how_to_make}")
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise BundleError(f"{mpath}: not valid JSON ({exc})") from None
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    if fmt != format_name:
        raise BundleError(f"{mpath}: format is {fmt!r}, not {format_name!r}; this is not a {what}")
    version = manifest.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise BundleError(f"{mpath}: invalid format_version {version!r}")
    if version > max_version:
        raise BundleError(
            f"{mpath}: {what} format version {version} was written by lr-opensearch "
            f"{manifest.get('library_version', '?')}; this lr-opensearch {library_version} reads up "
            f"to version {max_version}. Upgrade lr-opensearch (pip install -U lr-opensearch).")
    missing = [k for k in required if k not in manifest]
    if missing:
        raise BundleError(f"{mpath}: manifest fields missing: {missing}")
    return manifest


def compute_bundle_id(files: Mapping[str, Mapping[str, Any]], config: Mapping[str, Any]) -> str:
    """Hash of the sorted (path, sha256) list plus the canonical config JSON (32 hex chars)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}\t{files[rel]['sha256']}\n".encode())
    h.update(json.dumps(dict(config), sort_keys=True, ensure_ascii=True).encode())
    return h.hexdigest()[:32]


def check_listed_files(root: Path, manifest: Mapping[str, Any], manifest_name: str,
                       label: str) -> None:
    """Every file the manifest lists is there with its recorded size, and the manifest's
    ``bundle_id`` matches its file list and config (both bundle formats' load check).

    Raises:
        BundleError: naming the missing or resized file, or the edited manifest.
    """
    files = manifest["files"]
    for rel, info in files.items():
        p = root / rel
        if not p.is_file():
            raise BundleError(f"{label} {root}: file {rel} listed in {manifest_name} is missing")
        if p.stat().st_size != info["size"]:
            raise BundleError(
                f"{label} {root}: file {rel} has {p.stat().st_size} bytes, the manifest says "
                f"{info['size']}; the bundle is corrupt or was modified - rebuild or re-copy it")
    if compute_bundle_id(files, manifest["config"]) != manifest["bundle_id"]:
        raise BundleError(f"{label} {root}: bundle_id does not match its file list and config; "
                          f"{manifest_name} was edited")
