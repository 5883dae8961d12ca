"""Which runtime encodes documents (``--runtime``, ``options.RUNTIMES``), and the encoder.

``auto`` (the default) is ONNX Runtime (``OnnxDocEncoder``: no torch) when all of these
hold, else torch (``DocEncoder``), as before:

- the device is the CPU: ``--device cpu``, or none named and no CUDA GPU (torch is asked
  only when it is installed);
- ``--encode-precision fp32`` (mixed and bf16 are torch's autocast and conversions);
- onnxruntime is installed;
- the bundle's backbone is an encoder in the "max" sparse mode (a decoder LLM or a
  Medusa mode runs on torch); a fitted sparse head (a per-term scale and bias, a low-rank
  correction: ``model.sparse_fits``) runs on either.

``onnx`` insists (an error names the condition that fails); ``torch`` is today's path on
any device. Both give the same vectors (``tests/model/test_onnx_runtime.py``): an index does not
depend on which runtime encoded it. Nothing here imports torch unless torch is chosen.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch.errors import ConfigError
from lr_opensearch.model.onnx_graph import installed, unsupported
from lr_opensearch.options import DEFAULT_ENCODE_PRECISION, DEFAULT_RUNTIME, RUNTIMES, choice

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.model.settings import DocSettings

logger = logging.getLogger(__name__)

TORCH_HINT = "pip install 'lr-opensearch[train]' (torch)"


def _gpu_present() -> bool:
    if not installed("torch"):
        return False
    import torch

    return bool(torch.cuda.is_available())


def require_torch(what: str) -> None:
    """ConfigError naming ``what`` and the extra to install, unless torch is installed."""
    if not installed("torch"):
        raise ConfigError(f"{what} needs torch, which is not installed: {TORCH_HINT}")


def onnx_obstacle(kind: str, sparse_mode: str, device: str | None, precision: str) -> str | None:
    """Why the backbone cannot run on ONNX Runtime here (a sentence), or None if it can."""
    if device is not None and str(device) != "cpu":
        return f"--device {device} (ONNX Runtime runs on the CPU here)"
    if device is None and _gpu_present():
        return "a CUDA GPU is present and no --device cpu was given"
    if precision != "fp32":
        return f"--encode-precision {precision} (torch's; ONNX Runtime encodes in fp32)"
    if not installed("onnxruntime"):
        return "onnxruntime is not installed (pip install 'lr-opensearch[ingest]')"
    return unsupported(kind, sparse_mode)


def choose_runtime(runtime: str, *, kind: str, sparse_mode: str, device: str | None,
                   precision: str) -> str:
    """"onnx" or "torch" for ``--runtime`` (see the module docstring).

    Raises:
        ConfigError: an unknown runtime, ``onnx`` where it cannot run, or torch chosen
            while it is not installed (each says what to do).
    """
    choice("--runtime", runtime, RUNTIMES)
    obstacle = onnx_obstacle(kind, sparse_mode, device, precision)
    if runtime == "onnx" and obstacle:
        raise ConfigError(f"--runtime onnx: not with {obstacle}; use --runtime torch")
    chosen = "onnx" if runtime == "onnx" or (runtime == "auto" and obstacle is None) else "torch"
    if chosen == "torch":
        why = f" ({obstacle})" if runtime == "auto" and obstacle else ""
        require_torch(f"the document encoder here{why}")
    if runtime == "auto" and chosen == "torch":
        logger.info("doc encoder on torch: %s", obstacle)
    return chosen


def open_doc_encoder(bundle: Bundle, *, runtime: str = DEFAULT_RUNTIME, device: str | None = None,
                     batch_size: int = 32, precision: str = DEFAULT_ENCODE_PRECISION) -> Any:
    """The bundle's document encoder (``DocEncoder`` or ``OnnxDocEncoder``: the same
    ``encode`` / ``encode_dense``) on the runtime ``choose_runtime`` picks."""
    cfg = bundle.config
    chosen = choose_runtime(runtime, kind=cfg.kind, sparse_mode=cfg.sparse_mode,
                            device=None if device is None else str(device), precision=precision)
    if chosen == "onnx":
        from lr_opensearch.model.onnx_encoder import OnnxDocEncoder

        return OnnxDocEncoder.from_bundle(bundle, batch_size=batch_size)
    from lr_opensearch.model.doc_encoder import DocEncoder

    return DocEncoder.from_bundle(bundle, device=device, batch_size=batch_size, precision=precision)


def fit_encoder(model: Any, tokenizer: Any, doc: DocSettings, *, precision: str, runtime: str,
                source_dir: Path | None = None, batch_size: int = 64) -> Any:
    """The encoder of ``lr bundle build``'s fit (the full model's query and document
    vectors, ``doc``: its max length and document prompt): ``model`` (a
    ``LightRetrieverModel``, loaded from ``source_dir``) on ONNX Runtime where ``runtime``
    chooses it, else on torch on ``model.device``. A model without a source directory (in
    training) is fitted on torch."""
    chosen = "torch" if source_dir is None else choose_runtime(
        runtime, kind=model.kind, sparse_mode=model.sparse_mode, device=str(model.device),
        precision=precision)
    if chosen == "onnx" and source_dir is not None:
        from lr_opensearch.model.onnx_encoder import OnnxDocEncoder
        from lr_opensearch.model.onnx_graph import ensure_graph

        graph = ensure_graph(source_dir, model.head.kind, tokenizer=tokenizer,
                             vocab_limit=int(tokenizer.get_vocab_size(with_added_tokens=True)))
        logger.info("the fit's full model on ONNX Runtime: %s (%s)", graph.path, graph.source)
        return OnnxDocEncoder(graph, tokenizer, doc, pooling=model.pooling,
                              normalize=model.normalize, batch_size=batch_size)
    from lr_opensearch.model.doc_encoder import DocEncoder

    return DocEncoder(model, tokenizer, doc, device=model.device, batch_size=batch_size,
                      precision=precision)
