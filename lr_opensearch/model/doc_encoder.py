"""``DocEncoder``: the inference wrapper ingest uses to turn texts into index vectors.

It loads the bundle's doc encoder, tokenizes with the bundle's tokenizer exactly as training
did (``framing.tokenize_texts``), batches documents of similar length, runs THE document
forward (``LightRetrieverModel.encode_documents``) under ``torch.inference_mode`` and applies
the bundle's sparse settings (top-k, min weight, special tokens dropped). In a Medusa sparse
mode the kept weights are ``medusa.soft_top_k`` at the bundle's k: the vector the
S-Matryoshka loss trained.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from lr_opensearch.errors import IngestError
from lr_opensearch.model.batching import DocBatch, length_batches, padded_numpy
from lr_opensearch.model.device import check_device
from lr_opensearch.model.framing import Framing, instruction_ids, special_token_ids, tokenize_texts
from lr_opensearch.model.lightretriever import LightRetrieverModel
from lr_opensearch.model.medusa import MEDUSA_FILE, soft_top_k
from lr_opensearch.model.precision import (
    check_precision,
    prepare,
    sparse_exact_top,
)
from lr_opensearch.model.settings import DocSettings, RetrieverSettings
from lr_opensearch.model.sparse_fits import SparseFits
from lr_opensearch.options import DEFAULT_ENCODE_PRECISION

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class DocEncoder:
    """Encodes documents with a loaded ``LightRetrieverModel``.

    Args:
        model: the model (put in eval mode and moved to ``device`` here).
        tokenizer: a ``tokenizers.Tokenizer`` (the bundle's).
        doc: what a document becomes (:class:`DocSettings`: max length, served dims,
            sparse terms kept, document prompt).
        batch_size: documents per forward pass.
        device: default GPU if available, else CPU.
        precision: one of ``options.ENCODE_PRECISIONS`` (``model.precision``); bf16
            encodes with a converted copy of ``model``.
    """

    def __init__(self, model: LightRetrieverModel, tokenizer: Any, doc: DocSettings, *,
                 batch_size: int = 32, device: torch.device | str | None = None,
                 precision: str = DEFAULT_ENCODE_PRECISION) -> None:
        max_length, top_k, document_prompt = doc.max_length, doc.top_k, doc.document_prompt
        self.device = check_device(device) if device is not None else default_device()
        self.precision = check_precision(precision, self.device)
        self.model = prepare(model.to(self.device).eval(), self.precision)
        self.tokenizer = tokenizer
        self.document_prompt = document_prompt
        prompt = instruction_ids(tokenizer, document_prompt)
        self._prompt_tokens = len(prompt)
        self._doc_framing = Framing(prefix=(*model.framing.prefix, *prompt), suffix=model.framing.suffix)
        self.max_length = max_length
        self.served_dim = doc.served_dim or model.hidden_size
        self.top_k = top_k
        self.min_weight = max(float(doc.min_weight), 0.0)
        self.batch_size = batch_size
        self.excluded = torch.tensor(special_token_ids(tokenizer), dtype=torch.long)
        # the model's vocabulary may be padded beyond the tokenizer's: those ids have no token
        self.vocab_limit = int(tokenizer.get_vocab_size(with_added_tokens=True))
        # the sparse projection screened in bfloat16 where that is fast; the kept weights
        # stay float32's (fused.projection_max)
        self._exact_top = sparse_exact_top(self.precision, self.device, top_k, len(self.excluded))

    @classmethod
    def from_bundle(cls, bundle: Bundle, device: torch.device | str | None = None,
                    batch_size: int = 32, dtype: torch.dtype = torch.float32,
                    precision: str = DEFAULT_ENCODE_PRECISION) -> DocEncoder:
        """Load the doc encoder of a bundle (``lr_opensearch.bundle.load_bundle``) to
        encode at ``precision`` (``options.ENCODE_PRECISIONS``)."""
        cfg = bundle.config
        if cfg.sparse_mode != "max" and not (bundle.doc_encoder_dir / MEDUSA_FILE).is_file():
            raise IngestError(f"bundle {bundle.path}: sparse_mode {cfg.sparse_mode!r} needs "
                              f"doc_encoder/{MEDUSA_FILE} (the Medusa heads), which is missing; "
                              "re-export the bundle from the trained checkpoint")
        settings = RetrieverSettings(
            kind=cfg.kind, pooling=cfg.pooling, normalize=cfg.normalize,
            sparse_head=cfg.sparse_head, sparse_mode=cfg.sparse_mode,
            medusa_heads=cfg.medusa_heads or 1, soft_top_k_temperature=cfg.soft_top_k_temperature)
        fits = SparseFits.of_bundle(bundle)  # the config rules: a stray file is not read
        model = LightRetrieverModel.from_pretrained(bundle.doc_encoder_dir, settings, dtype=dtype,
                                                    tokenizer=bundle.tokenizer, term_affine=False)
        model.use_sparse_fits(fits)
        return cls(model, bundle.tokenizer, DocSettings.of_bundle(cfg), batch_size=batch_size, device=device,
                   precision=precision)

    def encode(self, texts: Sequence[str]) -> DocBatch:
        """Encode documents; see ``DocBatch``. Batches by length, returns input order."""
        return self._run(texts, sparse=True, documents=True)

    def encode_dense(self, texts: Sequence[str], *, documents: bool = False) -> np.ndarray:
        """Dense vectors alone, no sparse projection: of texts as given (a query with its
        prompt: the fit's targets, ``full-dense``), or with ``documents`` of documents
        (``encode(texts).dense``: the document prompt added)."""
        return self._run(texts, sparse=False, documents=documents).dense

    def encode_maxima(self, texts: Sequence[str]) -> np.ndarray:
        """[N, V] float16: documents' pre-activation sparse maxima before any fitted scale
        and bias (``LightRetrieverModel.document_maxima``; the input of ``fit.sparse``),
        framed and batched as ``encode`` frames them. A document without a content token (``-inf``
        maxima) is stored as -1e4 (no term: float16 has no room for less)."""
        ids, _ = tokenize_texts(self.tokenizer, texts, self._doc_framing, self.max_length)
        out: np.ndarray | None = None
        for chunk in length_batches(ids, self.batch_size):
            input_ids, mask = padded([ids[i] for i in chunk])
            with torch.inference_mode():
                maxima = self.model.document_maxima(input_ids.to(self.device), mask.to(self.device),
                                                    prompt_tokens=self._prompt_tokens)
            values = maxima[:, : self.vocab_limit].float().cpu().numpy()
            if out is None:
                out = np.empty((len(ids), values.shape[1]), np.float16)
            out[chunk] = np.nan_to_num(values, neginf=-1e4).astype(np.float16)
        assert out is not None
        return out

    def encode_states(self, texts: Sequence[str]) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per document, float16 [T_d, H] the sparse projection's inputs at the positions its
        max reads, and int32 [T_d] their token ids (``LightRetrieverModel.document_states``;
        what ``fit.sparse_lowrank`` fits on), framed and batched as ``encode`` frames them."""
        ids, _ = tokenize_texts(self.tokenizer, texts, self._doc_framing, self.max_length)
        states: list[np.ndarray] = [np.empty(0)] * len(ids)
        tokens: list[np.ndarray] = [np.empty(0)] * len(ids)
        for chunk in length_batches(ids, self.batch_size):
            input_ids, mask = padded([ids[i] for i in chunk])
            with torch.inference_mode():
                hidden, content = self.model.document_states(input_ids.to(self.device), mask.to(self.device),
                                                             prompt_tokens=self._prompt_tokens)
            h, keep = hidden.float().cpu().numpy(), content.cpu().numpy()
            for row, i in enumerate(chunk):
                states[i] = h[row][keep[row]].astype(np.float16)
                tokens[i] = input_ids[row].numpy()[keep[row]].astype(np.int32)
        return states, tokens

    def _run(self, texts: Sequence[str], *, sparse: bool, documents: bool) -> DocBatch:
        framing = self._doc_framing if documents else self.model.framing
        ids, truncated = tokenize_texts(self.tokenizer, texts, framing, self.max_length)
        for i, row in enumerate(ids):
            if not row:
                raise IngestError(f"document {i} of the batch tokenizes to nothing and the "
                                  "model adds no special tokens; drop empty documents")
        dense = np.zeros((len(ids), self.served_dim), dtype=np.float32)
        terms: list[dict[int, float]] = [{} for _ in ids]
        for chunk in length_batches(ids, self.batch_size):
            out_dense, out_sparse = self._encode_ids([ids[i] for i in chunk], sparse=sparse,
                                                     prompt_tokens=self._prompt_tokens if documents else 0)
            dense[chunk] = out_dense
            for i, doc_terms in zip(chunk, out_sparse, strict=True):
                terms[i] = doc_terms
        return DocBatch(dense=dense, sparse=terms, truncated=truncated)

    def _serve(self, dense: torch.Tensor) -> np.ndarray:
        """The served prefix of the dense vectors, L2-normalised again when the model
        normalises and the prefix is shorter (as the Matryoshka loss scores it): a cut unit
        vector is no longer unit, and documents would otherwise rank by their prefix norm."""
        cut = dense[:, : self.served_dim].float()
        if self.model.normalize and self.served_dim < dense.shape[1]:
            cut = torch.nn.functional.normalize(cut, dim=-1)
        return cut.cpu().numpy()

    def _encode_ids(self, rows: list[list[int]], *, sparse: bool = True, prompt_tokens: int = 0,
                    ) -> tuple[np.ndarray, list[dict[int, float]]]:
        """Dense [b, served_dim] and top-k sparse dicts (empty without ``sparse``) for
        framed id lists."""
        input_ids, mask = padded(rows)
        with torch.inference_mode():
            if not sparse:
                vecs = self.model.encode_documents_dense(input_ids.to(self.device), mask.to(self.device))
                return self._serve(vecs), [{} for _ in rows]
            out = self.model.encode_documents(input_ids.to(self.device), mask.to(self.device),
                                              exact_top=self._exact_top, prompt_tokens=prompt_tokens)
            return self._serve(out.dense), self.select_terms(out.sparse)

    def select_terms(self, sparse: torch.Tensor) -> list[dict[int, float]]:
        """The stored terms of documents from the forward's sparse vectors [B, V]: special
        and padded-vocabulary ids dropped, the top_k kept (Medusa modes: their
        ``soft_top_k`` weights at top_k), weights above min_weight."""
        weights = sparse[:, : self.vocab_limit].float()
        if self.model.medusa is not None:
            values, indices = soft_top_k(weights, self.top_k, self.model.soft_top_k_temperature,
                                         self.excluded.to(weights.device))
        else:
            if len(self.excluded):
                weights[:, self.excluded.to(weights.device)] = 0.0
            values, indices = torch.topk(weights, min(self.top_k, weights.shape[1]), dim=1)
        return [_keep(v, i, self.min_weight) for v, i in zip(values.cpu(), indices.cpu(), strict=True)]


def padded(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids [b, T] (0 after each row) and attention mask [b, T] of id lists."""
    input_ids, mask = padded_numpy(rows)
    return torch.from_numpy(input_ids), torch.from_numpy(mask)


def _keep(values: torch.Tensor, indices: torch.Tensor, min_weight: float) -> dict[int, float]:
    """{token_id: weight} of the finite weights above ``min_weight``."""
    ok = torch.isfinite(values) & (values > min_weight)
    return {int(t): float(w) for t, w in zip(indices[ok].tolist(), values[ok].tolist(), strict=True)}
