"""An ONNX Runtime session of a backbone graph and its feed (no torch, no model imports:
``onnx_encoder`` runs it, ``onnx_export`` checks a fresh export with it)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from lr_opensearch.errors import ConfigError


def onnx_session(path: Path, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session of the graph at ``path`` (``threads``: intra-op threads,
    default ``$LR_ONNX_THREADS`` or all cores)."""
    try:
        import onnxruntime as ort
    except ImportError:
        raise ConfigError("--runtime onnx needs onnxruntime: pip install 'lr-opensearch[ingest]', "
                          "or use --runtime torch") from None
    options = ort.SessionOptions()
    threads = threads or int(os.environ.get("LR_ONNX_THREADS", "0"))
    if threads:
        options.intra_op_num_threads = threads
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's own error types: a broken or foreign file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"ONNX graph {path} does not load in onnxruntime {ort.__version__}: "
                          f"{first}; delete {path.parent} to make it again") from None


def graph_inputs(session: Any, input_ids: np.ndarray, mask: np.ndarray) -> dict[str, np.ndarray]:
    """The feed of an ONNX Runtime session: the inputs its graph names, int64."""
    feed = {"input_ids": input_ids, "attention_mask": mask,
            "token_type_ids": np.zeros_like(input_ids)}
    names = [i.name for i in session.get_inputs()]
    unknown = [n for n in names if n not in feed]
    if unknown:
        raise ConfigError(f"the ONNX graph asks for inputs {unknown}; it takes input_ids, "
                          "attention_mask and token_type_ids only")
    return {n: feed[n] for n in names}
