"""``OnnxDocEncoder``: ``DocEncoder`` with the backbone on ONNX Runtime, and no torch.

Documents are tokenized and framed exactly as on torch (``framing.tokenize_texts``),
batched by length (``batching.length_batches``), right-padded; the backbone's graph
(``onnx_graph``: a packaged jar's, else a one-time export) gives the last hidden states,
and the rest of THE document forward (pooling, the sparse head's projection, ReLU, log1p,
max, top-k) is ``numpy_head``'s, the same arithmetic as torch's, with the bundle's fitted
sparse head when it has one (``sparse_fits``: the low-rank correction folded into the
projection once, here; the per-term scale and bias after the max). Encoders in the "max"
sparse mode only: a decoder (LLM) backbone or a Medusa mode runs on torch
(``runtime.open_doc_encoder`` chooses).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch.errors import ConfigError, IngestError
from lr_opensearch.model.batching import DocBatch, length_batches, padded_numpy
from lr_opensearch.model.framing import Framing, instruction_ids, special_token_ids, tokenize_texts
from lr_opensearch.model.numpy_head import NumpyHead
from lr_opensearch.model.onnx_graph import Graph, graph_of_bundle
from lr_opensearch.model.onnx_session import graph_inputs, onnx_session
from lr_opensearch.model.settings import DocSettings
from lr_opensearch.model.sparse_fits import SparseFits

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)


class OnnxDocEncoder:
    """Encodes documents with a backbone graph on ONNX Runtime; ``DocEncoder``'s interface.

    Args:
        graph: the checked graph (``onnx_graph.ensure_graph``).
        tokenizer: a ``tokenizers.Tokenizer`` (the bundle's).
        doc: what a document becomes (``settings.DocSettings``, as ``DocEncoder``'s).
        pooling, normalize: the bundle's dense pooling and normalisation.
        batch_size: documents per run of the graph.
        threads: ONNX Runtime intra-op threads (``onnx_session``).
        screen: the sparse projection screened in bfloat16 by torch (``screened_head``:
            the same kept terms and weights; needs torch). Off by default: measured on
            ADI it was no faster than numpy's float32 here (docs/RESULTS.md, issue 47).
    """

    runtime = "onnx"

    def __init__(self, graph: Graph, tokenizer: Any, doc: DocSettings, *, pooling: str,
                 normalize: bool, batch_size: int = 32, threads: int | None = None,
                 screen: bool = False) -> None:
        max_length, served_dim, document_prompt = doc.max_length, doc.served_dim, doc.document_prompt
        self.graph = graph
        self.session = onnx_session(graph.onnx_path, threads)
        self.tokenizer = tokenizer
        self.framing = Framing.derive(tokenizer, "encoder")
        prompt = instruction_ids(tokenizer, document_prompt)
        self._prompt_tokens = len(prompt)
        self._doc_framing = Framing(prefix=(*self.framing.prefix, *prompt), suffix=self.framing.suffix)
        self.max_length = max_length
        self.batch_size = batch_size
        hidden = graph.weight.shape[1]
        self.head = NumpyHead(
            weight=graph.weight, bias=graph.bias, pooling=pooling, normalize=normalize,
            served_dim=served_dim or hidden, suffix=len(self.framing.suffix),
            excluded=np.asarray(special_token_ids(tokenizer), dtype=np.int64),
            vocab_limit=int(tokenizer.get_vocab_size(with_added_tokens=True)), top_k=doc.top_k,
            min_weight=max(float(doc.min_weight), 0.0))
        self._check_hidden(hidden)
        self.screen = screen

    @classmethod
    def from_bundle(cls, bundle: Bundle, batch_size: int = 32, threads: int | None = None,
                    screen: bool = False) -> OnnxDocEncoder:
        """The bundle's doc encoder on ONNX Runtime (its graph found or made once, checked),
        with its fitted sparse head when it has one."""
        cfg = bundle.config
        fits = SparseFits.of_bundle(bundle)
        graph = graph_of_bundle(bundle)
        logger.info("doc encoder on ONNX Runtime: %s (%s)", graph.path, graph.source)
        encoder = cls(graph, bundle.tokenizer, DocSettings.of_bundle(cfg), pooling=cfg.pooling,
                      normalize=cfg.normalize, batch_size=batch_size, threads=threads, screen=screen)
        encoder.use_sparse_fits(fits)
        return encoder

    def use_sparse_fits(self, fits: SparseFits) -> None:
        """Use a bundle's fitted sparse head (``sparse_fits.SparseFits.of_bundle``): its
        low-rank correction folded into the graph's projection once, here, and its per-term
        scale and bias after the max (``NumpyHead.activate``); a fit it lacks is removed."""
        self.head = dataclasses.replace(self.head, weight=fits.projection(self.graph.weight),
                                        term_scale=fits.scale, term_bias=fits.bias)

    def _check_hidden(self, hidden: int) -> None:
        """Run the graph once on two tokens: its output must be [1, 2, hidden] (refused
        before any document is encoded otherwise)."""
        ids = np.asarray([[*self.framing.prefix, *self.framing.suffix] or [0, 0]], dtype=np.int64)
        out = self.session.run(None, graph_inputs(self.session, ids, np.ones_like(ids)))[0]
        if out.shape != (*ids.shape, hidden):
            raise ConfigError(f"ONNX graph {self.graph.onnx_path}: output shape {list(out.shape)} "
                              f"for input {list(ids.shape)}; the projection expects hidden size "
                              f"{hidden}. Delete {self.graph.path} to make it again")

    def encode(self, texts: Sequence[str]) -> DocBatch:
        """Encode documents; see ``DocBatch``. Batches by length, returns input order."""
        return self._run(texts, sparse=True, documents=True)

    def encode_dense(self, texts: Sequence[str], *, documents: bool = False) -> np.ndarray:
        """Dense vectors alone (``DocEncoder.encode_dense``)."""
        return self._run(texts, sparse=False, documents=documents).dense

    def token_table(self, instruction_ids: Sequence[int], vocab_size: int, *,
                    normalize_rows: bool, batch_size: int = 256, progress: bool = True) -> np.ndarray:
        """The query table on ONNX Runtime: row t = the pooled vector of ``prefix +
        instruction + [t] + suffix`` (``LightRetrieverModel.token_table`` for an encoder:
        every row its own sequence, all of one length), L2-normalised when
        ``normalize_rows`` (``normalize`` and ``query_norm == "rows"``).

        Returns:
            [vocab_size, H] float32.
        """
        from lr_opensearch.progress import progress_bar

        head = [*self.framing.prefix, *instruction_ids]
        tail = list(self.framing.suffix)
        hidden = self.graph.weight.shape[1]
        pool = dataclasses.replace(self.head, normalize=normalize_rows, served_dim=hidden)
        table = np.empty((vocab_size, hidden), dtype=np.float32)
        with progress_bar(total=vocab_size, desc="query table", unit="tok",
                          disable=not progress) as bar:
            for start in range(0, vocab_size, batch_size):
                stop = min(start + batch_size, vocab_size)
                ids = np.array([[*head, t, *tail] for t in range(start, stop)], dtype=np.int64)
                mask = np.ones_like(ids)
                out = self.session.run(None, graph_inputs(self.session, ids, mask))[0]
                table[start:stop] = pool.dense(out, mask)
                bar.update(stop - start)
        return table

    def _sparse(self, hidden: np.ndarray, mask: np.ndarray, prefix: int) -> np.ndarray:
        if self.screen:
            from lr_opensearch.model.screened_head import screened_sparse

            return screened_sparse(self.head, hidden, mask, prefix)
        return self.head.sparse(hidden, mask, prefix)

    def _run(self, texts: Sequence[str], *, sparse: bool, documents: bool) -> DocBatch:
        framing = self._doc_framing if documents else self.framing
        ids, truncated = tokenize_texts(self.tokenizer, texts, framing, self.max_length)
        for i, row in enumerate(ids):
            if not row:
                raise IngestError(f"document {i} of the batch tokenizes to nothing and the "
                                  "model adds no special tokens; drop empty documents")
        dense = np.zeros((len(ids), self.head.served_dim), dtype=np.float32)
        terms: list[dict[int, float]] = [{} for _ in ids]
        prefix = len(framing.prefix)
        for chunk in length_batches(ids, self.batch_size):
            input_ids, mask = padded_numpy([ids[i] for i in chunk])
            outputs = self.session.run(None, graph_inputs(self.session, input_ids, mask))
            dense[chunk] = self.head.dense(outputs[0], mask)
            if sparse:
                hidden = outputs[1] if self.graph.head_hidden else outputs[0]
                weights = self._sparse(hidden, mask, prefix)
                for i, doc_terms in zip(chunk, self.head.select_terms(weights), strict=True):
                    terms[i] = doc_terms
        return DocBatch(dense=dense, sparse=terms, truncated=truncated)
