"""The ONNX Runtime variants of ``bench/cpu_encode.py`` (issue 47 item 3).

- ``onnx``: the library's ``OnnxDocEncoder`` as ingest loads it (float32; the bundle's
  graph: the packaged jar's or the one-time export, ``model.onnx_graph``; the sparse
  projection in numpy's float32);
- ``onnx-screened``: the same with the projection screened in bfloat16 by torch
  (``model.screened_head``, opt-in);
- ``onnx-int8``: the same graph through ONNX Runtime's dynamic int8 quantisation
  (``quantize_dynamic``: int8 weights of the MatMuls, activations quantised per batch),
  made here into a temporary directory, the sparse head unchanged (float32);
- ``onnx-int8-jar``: an int8 graph given with ``--int8-graph`` (the LangChain4j ``-q``
  jar's, e.g. ``all-minilm-l6-v2-q.onnx``), the sparse head unchanged; checked first
  against the float32 graph the bundle uses (``check_int8_graph``: every weight of the
  float32 graph is in it, equal or quantised from it within half a step).

The int8 graphs are measured only: none is an option of the library (issue 47's gate is
nDCG@10 on every collection, not measured by this module).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger("cpu_encode")
ONNX_VARIANTS = ("onnx", "onnx-screened", "onnx-int8", "onnx-int8-jar")


def onnx_encoder(name: str, bundle: Any, batch_size: int, int8_graph: Path | None) -> Any:
    """The encoder of variant ``name`` (one of ``ONNX_VARIANTS``)."""
    from lr_opensearch.model.onnx_encoder import OnnxDocEncoder
    from lr_opensearch.model.settings import DocSettings
    from lr_opensearch.model.sparse_fits import SparseFits

    base = OnnxDocEncoder.from_bundle(bundle, batch_size=batch_size,
                                      screen=name == "onnx-screened")
    if name in ("onnx", "onnx-screened"):
        return base
    work = Path(tempfile.mkdtemp(prefix="lr-bench-int8-"))
    if name == "onnx-int8":
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(base.graph.onnx_path), str(work / "model.onnx"),
                         weight_type=QuantType.QInt8)
    else:
        if int8_graph is None:
            raise SystemExit("--variant onnx-int8-jar needs --int8-graph PATH (the -q jar's .onnx)")
        report = check_int8_graph(int8_graph, base.graph.onnx_path)
        if report["mismatched"]:
            raise SystemExit(f"{int8_graph} is not a quantisation of {base.graph.onnx_path}: "
                             f"{report['mismatched'][:5]} differ (or are missing); give the -q jar "
                             "of the bundle's model")
        logger.info("%s against %s: %s", int8_graph, base.graph.onnx_path, report)
        shutil.copy(int8_graph, work / "model.onnx")
    cfg = bundle.config
    encoder = OnnxDocEncoder(dataclasses.replace(base.graph, path=work, source=f"{name} {work}"),
                             bundle.tokenizer, DocSettings.of_bundle(cfg), pooling=cfg.pooling,
                             normalize=cfg.normalize, batch_size=batch_size)
    encoder.use_sparse_fits(SparseFits.of_bundle(bundle))  # as ``from_bundle`` does
    return encoder


def check_int8_graph(int8_path: Path, fp32_path: Path) -> dict[str, Any]:
    """Every initializer of the float32 graph ``fp32_path`` against the int8 graph's:
    the same name with the same values, or ``NAME_quantized`` whose dequantisation
    (``(q - zero_point) * scale``, per tensor or per output channel) is within half a step of it.

    Returns: ``equal`` and ``quantized`` (counts), ``max_gap_steps`` (the largest gap of a
    quantised weight, in its steps: <= 0.5 when rounded from these weights) and
    ``mismatched`` (names missing or off).
    """
    import onnx
    from onnx import numpy_helper

    def tensors(path: Path) -> dict[str, np.ndarray]:
        return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}

    fp32, int8 = tensors(fp32_path), tensors(int8_path)
    out: dict[str, Any] = {"equal": 0, "quantized": 0, "max_gap_steps": 0.0, "mismatched": []}
    for name, w in fp32.items():
        if name in int8 and int8[name].shape == w.shape and np.array_equal(int8[name], w):
            out["equal"] += 1
            continue
        q = int8.get(f"{name}_quantized")
        if q is None or q.shape != w.shape:
            out["mismatched"].append(name)
            continue
        # per tensor (a scalar) or per output channel (the last axis of a MatMul's [in, out])
        scale = int8[f"{name}_scale"].astype(np.float64)
        zero = int8[f"{name}_zero_point"].astype(np.float64)
        steps = np.abs((q.astype(np.float64) - zero) * scale - w) / scale
        out["quantized"] += 1
        out["max_gap_steps"] = max(out["max_gap_steps"], float(steps.max()))
        if steps.max() > 0.5 + 1e-3:
            out["mismatched"].append(name)
    return out
