"""``lr bundle build`` without torch: a checkpoint's parts on ONNX Runtime (``fit.build``).

The backbone's graph (``model.onnx_graph.ensure_graph``: a packaged jar's whose weights
equal the checkpoint's, or one exported once and cached) gives the query table
(``OnnxDocEncoder.token_table``, every token's forward) and the fit's vectors
(``OnnxDocEncoder.encode_dense``); the doc encoder is the checkpoint's own model files,
copied (``model.checkpoint.copy_checkpoint``). What torch would have loaded is read from
config.json (``model.checkpoint.read_checkpoint``). Nothing here imports torch.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import numpy as np

from lr_opensearch.fit.parts import BackboneParts, fit_with
from lr_opensearch.fit.tables import FitRecipe, FitResult
from lr_opensearch.model.checkpoint import Checkpoint, copy_checkpoint
from lr_opensearch.model.settings import DocSettings

logger = logging.getLogger(__name__)


def onnx_backbone(checkpoint: Checkpoint, tokenizer: Any, *, max_length: int | None,
                  batch_size: int, document_prompt: str = "", progress: bool = True,
                  ) -> BackboneParts:
    """The parts of ``checkpoint`` on ONNX Runtime; its graph found and checked first.
    ``max_length`` (default 512) and ``document_prompt``: what a document becomes (the
    bundle's); ``batch_size``: table rows per run of the graph.

    Raises:
        ConfigError: no graph for the checkpoint here (it names what to install), or one
            that does not match it: before any work.
    """
    from lr_opensearch.model.onnx_encoder import OnnxDocEncoder
    from lr_opensearch.model.onnx_graph import ensure_graph

    assert checkpoint.sparse_head is not None  # build_runtime chose ONNX Runtime
    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    graph = ensure_graph(checkpoint.path, checkpoint.sparse_head, tokenizer=tokenizer,
                         vocab_limit=vocab)
    logger.info("lr bundle build on ONNX Runtime (no torch): %s (%s)", graph.path, graph.source)
    doc = DocSettings(max_length=max_length or 512, document_prompt=document_prompt)
    encoder = OnnxDocEncoder(graph, tokenizer, doc, pooling=checkpoint.pooling,
                             normalize=checkpoint.normalize, batch_size=64)
    rows_normalized = checkpoint.normalize and checkpoint.query_norm == "rows"

    def token_table(ids: Any, size: int) -> np.ndarray:
        return encoder.token_table(ids, size, normalize_rows=rows_normalized,
                                   batch_size=batch_size, progress=progress)

    def fit(rows: Mapping[str, np.ndarray], instructions: Mapping[str, str], given: DocSettings,
            recipe: FitRecipe) -> FitResult:
        assert given == doc  # the one encoder was made for the bundle's document settings
        return fit_with(encoder, tokenizer, rows, instructions, recipe, progress=progress)

    return BackboneParts(facts=checkpoint, token_table=token_table, fit=fit,
                         save=lambda out: copy_checkpoint(checkpoint.path, out))
