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
  jar's, e.g. ``all-minilm-l6-v2-q.onnx``), the sparse head unchanged.

The int8 graphs are measured only: none is an option of the library (issue 47's gate is
nDCG@10 on every collection, not measured by this module).
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

ONNX_VARIANTS = ("onnx", "onnx-screened", "onnx-int8", "onnx-int8-jar")


def onnx_encoder(name: str, bundle: Any, batch_size: int, int8_graph: Path | None) -> Any:
    """The encoder of variant ``name`` (one of ``ONNX_VARIANTS``)."""
    from lr_opensearch.model.onnx_encoder import OnnxDocEncoder
    from lr_opensearch.model.settings import DocSettings

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
        shutil.copy(int8_graph, work / "model.onnx")
    cfg = bundle.config
    return OnnxDocEncoder(dataclasses.replace(base.graph, path=work, source=f"{name} {work}"),
                          bundle.tokenizer, DocSettings.of_bundle(cfg), pooling=cfg.pooling,
                          normalize=cfg.normalize, batch_size=batch_size)
