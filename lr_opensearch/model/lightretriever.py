"""``LightRetrieverModel``: an HF backbone with the LightRetriever document and query forwards.

- ``encode_documents``: THE document forward (dense pooled vector + sparse vocabulary
  vector via the fused projection+max). Training, table caching and ingest all call it.
- ``encode_query_dense``: the training-side query forward: every query token encoded as
  ``instruction + token`` in one block-masked sequence per query, mean over the tokens.
- ``token_table``: the same per-token forward over the whole vocabulary (the query table).

Subclasses differ only in pooling (``LastTokenRetriever``, ``ClsRetriever``,
``MeanRetriever``); ``LightRetrieverModel.from_pretrained`` picks the right one.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from lr_opensearch.errors import ConfigError, QueryError
from lr_opensearch.model.framing import Framing
from lr_opensearch.model.fused import projection_max, sparse_activation
from lr_opensearch.model.heads import SparseHead, unwrap
from lr_opensearch.model.loading import (
    build_hf,
    eos_token_id,
    infer_kind,
    load_hf,
)
from lr_opensearch.model.medusa import MEDUSA_FILE, MedusaHeads, aggregate
from lr_opensearch.model.packing import pack_blocks
from lr_opensearch.model.settings import RetrieverSettings
from lr_opensearch.model.sparse_fits import LOWRANK_FILE, TERM_AFFINE_FILE, SparseFits
from lr_opensearch.model.sparse_lowrank import LowRankCorrection
from lr_opensearch.model.term_affine import TermAffine
from lr_opensearch.options import POOLINGS, choice

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class DocOutput:
    """Output of the document forward.

    Attributes:
        dense: [B, H] pooled (optionally L2-normalised) vectors.
        sparse: [B, V] non-negative vocabulary weights, log(1 + relu(max_t logits)) (the
            "max" sparse mode), or the Medusa aggregation (``medusa.aggregate``).
        head_logits: Medusa modes only: [B, V] head 0's last-position logits.
        base_logits: Medusa modes only: [B, V] the original head's logits there.
    """

    dense: torch.Tensor
    sparse: torch.Tensor
    head_logits: torch.Tensor | None = None
    base_logits: torch.Tensor | None = None


class LightRetrieverModel(nn.Module):
    """HF backbone + pooling + sparse head. Subclasses override ``pooling_weights`` only.

    Args:
        hf: the HF model (``BertModel``, ``BertForMaskedLM``, ``LlamaForCausalLM``, ...);
            may later be wrapped by peft.
        framing: special tokens around documents and query-token blocks.
        settings: the kind (resolved: "encoder" or "decoder"), normalisation, query norm
            and sparse head and mode (:class:`~lr_opensearch.model.settings.RetrieverSettings`;
            its pooling is the subclass's).
        architecture: the HF architecture name (recorded in bundles).
        name: the backbone's name (recorded in bundles).
    """

    pooling: ClassVar[str] = ""
    hf: Any  # the HF model, possibly wrapped by peft

    def __init__(self, hf: nn.Module, *, framing: Framing, settings: RetrieverSettings,
                 architecture: str = "", name: str = "") -> None:
        super().__init__()
        if settings.kind is None:
            raise ConfigError("LightRetrieverModel needs settings.kind, 'encoder' or 'decoder' "
                              "(from_pretrained and from_config detect it)")
        self.hf = hf
        self.kind = settings.kind
        self.framing = framing
        self.normalize = bool(settings.normalize)
        self.query_norm = settings.query_norm
        self.head = SparseHead.detect(hf, settings.sparse_head)
        self.architecture = architecture or type(unwrap(hf)).__name__
        self.name = name
        self.sparse_mode = settings.sparse_mode
        self.soft_top_k_temperature = float(settings.soft_top_k_temperature)
        #: the body's matrix products in this dtype under autocast (float32 elsewhere);
        #: None: the body's own dtype. ``precision.prepare`` sets it on a copy ("mixed").
        self.body_autocast: torch.dtype | None = None
        self.medusa: MedusaHeads | None = None
        #: the fitted per-term scale and bias of the "max" sparse vector (``term_affine``);
        #: None: the head as it is
        self.term_affine: TermAffine | None = None
        #: the fitted low-rank correction of the sparse projection (``sparse_lowrank``)
        self.sparse_lowrank: LowRankCorrection | None = None
        if self.sparse_mode != "max":
            if not framing.suffix:
                raise ConfigError(f"sparse_mode {self.sparse_mode!r} reads p_eos at the framing's end "
                                  "token, but this model's framing adds none; use sparse_mode 'max'")
            self.medusa = MedusaHeads(*self.head.projection(hf), heads=settings.medusa_heads)

    # ---- construction -------------------------------------------------------------------
    @staticmethod
    def create(hf: nn.Module, *, framing: Framing, settings: RetrieverSettings,
               architecture: str = "", name: str = "") -> LightRetrieverModel:
        """Instantiate the subclass for ``settings.pooling`` ("cls" | "mean" | "last")."""
        classes = {c.pooling: c for c in (ClsRetriever, MeanRetriever, LastTokenRetriever)}
        pooling = choice("pooling", str(settings.pooling), POOLINGS)
        return classes[pooling](hf, framing=framing, settings=settings,
                                architecture=architecture, name=name)

    @classmethod
    def from_pretrained(cls, model_dir: str | Path,
                        settings: RetrieverSettings | None = None, *,
                        dtype: torch.dtype = torch.float32, name: str | None = None,
                        tokenizer: Any = None, term_affine: bool | None = None) -> LightRetrieverModel:
        """Load from a local HF directory (config.json, *.safetensors, tokenizer.json).

        ``tokenizer`` (a ``tokenizers.Tokenizer``) overrides the directory's tokenizer.json.
        In a Medusa sparse mode the heads are read from ``medusa.safetensors`` in the
        directory when it has one (a bundle's doc encoder), else start from the projection
        (training). ``term_affine``: read the fitted sparse scale and bias
        (``sparse_term_affine.safetensors``, ``model.term_affine``): True requires the file,
        False ignores it, None reads it if the directory has one.

        ``settings.kind`` None is detected from config.json; ``pooling`` None takes the
        directory's sentence-transformers setting, else "last" for decoders and "cls" for
        encoders; ``normalize=None`` likewise takes the sentence-transformers setting.
        """
        from lr_opensearch.model.checkpoint import read_tokenizer, resolved_pooling

        model_dir = Path(model_dir)
        hf, architecture = load_hf(model_dir, dtype)
        settings = settings or RetrieverSettings()
        kind = settings.kind or infer_kind(hf.config, architecture)
        if tokenizer is None:
            tokenizer = read_tokenizer(model_dir)
        framing = Framing.derive(tokenizer, kind, eos_token_id(hf.config))
        pooling, normalize = resolved_pooling(model_dir, settings, kind)
        name = name or getattr(hf.config, "_name_or_path", "") or model_dir.name
        resolved = dataclasses.replace(settings, kind=kind, pooling=pooling, normalize=normalize)
        model = cls.create(hf, framing=framing, settings=resolved, architecture=architecture,
                           name=str(name))
        if model.medusa is not None and (model_dir / MEDUSA_FILE).is_file():
            model.medusa.load(model_dir / MEDUSA_FILE)
        affine_file = model_dir / TERM_AFFINE_FILE
        if term_affine or (term_affine is None and affine_file.is_file()):
            if not affine_file.is_file():
                raise ConfigError(f"{model_dir}: no {TERM_AFFINE_FILE} (the fitted sparse scale and "
                                  "bias the bundle names); rebuild the bundle")
            model.set_term_affine(TermAffine.load(affine_file, model.vocab_size))
        if (model_dir / LOWRANK_FILE).is_file():  # a bundle's config names it (DocEncoder checks)
            model.sparse_lowrank = LowRankCorrection.load(model_dir / LOWRANK_FILE, model.vocab_size,
                                                          model.hidden_size)
        return model

    def set_term_affine(self, head: TermAffine | None) -> None:
        """Use ``head`` on the "max" sparse vector (None: the head as it is)."""
        if head is not None and self.medusa is not None:
            raise ConfigError(f"a fitted sparse scale and bias applies to sparse_mode 'max', "
                              f"not {self.sparse_mode!r}")
        self.term_affine = None if head is None else head.to(self.device)

    def use_sparse_fits(self, fits: SparseFits) -> None:
        """Use a bundle's fitted sparse head (``sparse_fits.SparseFits.of_bundle``, the reader
        ONNX Runtime's encoder uses too); a fit it lacks is removed."""
        fits.check_sizes(self.vocab_size, self.hidden_size, "the doc encoder")
        self.set_term_affine(None if fits.scale is None else TermAffine(
            torch.from_numpy(fits.scale), torch.from_numpy(fits.bias)))
        self.sparse_lowrank = None if fits.up is None else LowRankCorrection(
            torch.from_numpy(fits.up), torch.from_numpy(fits.down)).to(self.device)

    @classmethod
    def from_config(cls, config: Any, settings: RetrieverSettings | None = None, *,
                    architecture: str | None = None, framing: Framing | None = None,
                    tokenizer: Any = None) -> LightRetrieverModel:
        """A randomly initialised model from an HF config (tests, tiny demos); ``settings``
        as in :meth:`from_pretrained` (no sentence-transformers files here).

        ``framing`` defaults to the tokenizer's (if given), else no special tokens for
        encoders and ``(bos?, ..., eos)`` from the config for decoders.
        """
        hf, architecture = build_hf(config, architecture)
        settings = settings or RetrieverSettings()
        kind = settings.kind or infer_kind(config, architecture)
        if framing is None and tokenizer is not None:
            framing = Framing.derive(tokenizer, kind, eos_token_id(config))
        if framing is None:
            eos = eos_token_id(config)
            framing = Framing(suffix=(eos,) if kind == "decoder" and eos is not None else ())
        pooling = settings.pooling or ("last" if kind == "decoder" else "cls")
        resolved = dataclasses.replace(settings, kind=kind, pooling=pooling,
                                       normalize=bool(settings.normalize))
        return cls.create(hf, framing=framing, settings=resolved, architecture=architecture,
                          name=str(getattr(config, "model_type", "")))

    # ---- properties ---------------------------------------------------------------------
    @property
    def hidden_size(self) -> int:
        return int(unwrap(self.hf).config.hidden_size)

    @property
    def vocab_size(self) -> int:
        return int(self.head.projection(self.hf)[0].shape[0])

    @property
    def device(self) -> torch.device:
        return next(self.hf.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.hf.parameters()).dtype

    # ---- pooling (what subclasses override) ----------------------------------------------
    def pooling_weights(self, visible: torch.Tensor) -> torch.Tensor:
        """Pooling as weights over positions.

        Args:
            visible: [..., T] bool, the positions of one sequence (or one packed block).
        Returns:
            [..., T] float weights; the pooled vector is ``weights @ hidden``.
        """
        raise NotImplementedError

    def pool(self, hidden: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
        """Pool hidden [N, T, H] over visible [N, T] -> [N, H] or [N, K, T] -> [N, K, H]."""
        weights = self.pooling_weights(visible.bool()).to(hidden.dtype)
        if weights.dim() == 2:
            return torch.bmm(weights.unsqueeze(1), hidden).squeeze(1)
        return torch.bmm(weights, hidden)

    def _finish(self, dense: torch.Tensor) -> torch.Tensor:
        return F.normalize(dense, dim=-1) if self.normalize else dense

    # ---- forwards -----------------------------------------------------------------------
    def body(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             position_ids: torch.Tensor) -> torch.Tensor:
        """The transformer body: last hidden states [B, T, H]. Mask 2D [B, T] or 4D additive."""
        base = unwrap(self.hf).base_model
        cast = self.body_autocast
        with nullcontext() if cast is None else torch.autocast(input_ids.device.type, dtype=cast):
            hidden = base(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, use_cache=False).last_hidden_state
        return hidden if cast is None else hidden.float()

    def encode_documents(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                         exact_top: int | None = None, prompt_tokens: int = 0) -> DocOutput:
        """THE document forward.

        Args:
            input_ids: [B, T] framed token ids (see ``framing.tokenize_texts``), any padding side.
            attention_mask: [B, T], 1 = real token.
            exact_top: "max" mode without gradients: the vocabulary projection screened
                in bfloat16, the ``exact_top`` largest sparse weights of a document
                float32's, proved (``fused.projection_max``); ``DocEncoder`` sets it
                where bfloat16 is fast.
            prompt_tokens: positions after the framing's prefix that hold a document
                prompt (``DocEncoder.document_prompt``): pooled densely, kept out of the
                sparse max like the framing's special tokens.
        Returns:
            DocOutput(dense [B, H], sparse [B, V]); differentiable. The sparse vector is the
            ``sparse_mode``'s (Medusa modes add the self-distillation logits).
        """
        hidden, mask, dense = self._dense_forward(input_ids, attention_mask)
        weight, bias = self.sparse_projection()
        if self.medusa is not None:
            out = aggregate(self.medusa, self.head.transform(self.hf, hidden), mask,
                            self.content_mask(mask, prompt_tokens), (weight, bias), self.framing.suffix[-1],
                            self.sparse_mode)
            return DocOutput(dense=dense, sparse=out.sparse, head_logits=out.head_logits,
                             base_logits=out.base_logits)
        if self.term_affine is not None:
            exact_top = None  # the screen proves the top of the raw maxima, not of a*z + c
        maxima = projection_max(self.head.transform(self.hf, hidden), self.content_mask(mask, prompt_tokens),
                                weight, bias, exact_top=exact_top)
        if self.term_affine is not None:
            maxima = self.term_affine(maxima)
        return DocOutput(dense=dense, sparse=sparse_activation(maxima))

    def document_maxima(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                        prompt_tokens: int = 0) -> torch.Tensor:
        """[B, V] the "max" mode's pre-activation maxima of documents, before any
        ``term_affine`` (what ``fit.sparse`` fits it on); arguments as ``encode_documents``."""
        states, content = self.document_states(input_ids, attention_mask, prompt_tokens=prompt_tokens)
        weight, bias = self.sparse_projection()
        return projection_max(states, content, weight, bias)

    def document_states(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                        prompt_tokens: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """([B, T, H] the sparse projection's input, [B, T] bool the positions its max reads):
        what ``fit.sparse_lowrank`` caches; arguments as ``encode_documents``."""
        hidden, mask, _ = self._dense_forward(input_ids, attention_mask)
        return self.head.transform(self.hf, hidden), self.content_mask(mask, prompt_tokens)

    def sparse_projection(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(weight [V, H], bias [V] or None) of the sparse head, with the fitted low-rank
        correction when there is one."""
        weight, bias = self.head.projection(self.hf)
        if self.sparse_lowrank is not None:
            weight = self.sparse_lowrank.corrected(weight)
        return weight, bias

    def content_mask(self, mask: torch.Tensor, prompt_tokens: int = 0) -> torch.Tensor:
        """[B, T] bool: the real tokens minus the framing's special positions (the first
        ``len(prefix)`` and the last ``len(suffix)`` real tokens of each row, any padding
        side). The sparse max runs over these only, as the reference does: a BOS/CLS or
        EOS/SEP position would otherwise put the same terms into every document. So are
        ``prompt_tokens`` positions after the prefix (a document prompt)."""
        pos = mask.long().cumsum(-1) - 1
        n = mask.long().sum(-1, keepdim=True)
        head, tail = len(self.framing.prefix) + prompt_tokens, len(self.framing.suffix)
        return mask & (pos >= head) & (pos < n - tail)

    def encode_documents_dense(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                               ) -> torch.Tensor:
        """The dense half of :meth:`encode_documents` alone ([B, H], identical values), for
        work that needs no sparse vector (the table fit's targets): skips the vocabulary
        projection."""
        return self._dense_forward(input_ids, attention_mask)[2]

    def _dense_forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mask = attention_mask.bool()
        position_ids = (mask.long().cumsum(-1) - 1).clamp(min=0)
        hidden = self.body(input_ids, attention_mask.long(), position_ids)
        return hidden, mask, self._finish(self.pool(hidden, mask))

    def query_layout(self, instruction_ids: Sequence[int]) -> tuple[list[int], list[int], list[int]]:
        """How ``instruction + token`` is laid out: (shared ids, block head, block tail).

        The block of token t is ``head + [t] + tail``; the independent sequence it stands
        for is ``shared + block`` = ``framing.prefix + instruction + [t] + framing.suffix``.
        Decoders share the framed prompt; encoders share nothing (see ``packing``).
        """
        prompt = [*self.framing.prefix, *instruction_ids]
        if self.kind == "decoder":
            return prompt, [], list(self.framing.suffix)
        return [], prompt, list(self.framing.suffix)

    def encode_token_blocks(self, instruction_ids: Sequence[int],
                            sequences: Sequence[Sequence[int]]) -> torch.Tensor:
        """Per-token dense vectors, packed one sequence per entry of ``sequences``.

        Args:
            instruction_ids: the instruction's ids (no special tokens).
            sequences: token ids per packed sequence (each non-empty).
        Returns:
            [N, K, H] per-token vectors (L2-normalised when ``normalize`` and
            ``query_norm == "rows"``, raw otherwise); entries k >= len(seq n)
            are padding.
        """
        shared, head, tail = self.query_layout(instruction_ids)
        blocks = [[[*head, int(t), *tail] for t in seq] for seq in sequences]
        packed = pack_blocks(shared, blocks, causal=self.kind == "decoder",
                             dtype=self.dtype, device=self.device)
        hidden = self.body(packed.input_ids, packed.attention_mask, packed.position_ids)
        pooled = self.pool(hidden, packed.visible)
        return self._finish(pooled) if self.query_norm == "rows" else pooled

    def encode_query_dense(self, instruction_ids: Sequence[int],
                           queries_token_ids: Sequence[Sequence[int]]) -> torch.Tensor:
        """Training-side dense query vectors: mean over tokens of Enc(instruction + token).

        Args:
            instruction_ids: the instruction's ids (no special tokens).
            queries_token_ids: per query, its token ids (no special tokens; repeats count).
        Returns:
            [B, H]; differentiable. The mean of the query-table rows of its tokens
            (then L2-normalised with ``query_norm == "mean"``: the same ranking).
        """
        for i, tokens in enumerate(queries_token_ids):
            if len(tokens) == 0:
                raise QueryError(f"query {i} of the batch has no tokens; drop it before encoding")
        per_token = self.encode_token_blocks(instruction_ids, queries_token_ids)  # [B, K, H]
        counts = torch.tensor([len(q) for q in queries_token_ids], device=per_token.device)
        keep = torch.arange(per_token.shape[1], device=per_token.device) < counts.unsqueeze(1)
        summed = (per_token * keep.unsqueeze(-1).to(per_token.dtype)).sum(1)
        mean = summed / counts.unsqueeze(1).to(per_token.dtype)
        return self._finish(mean) if self.query_norm == "mean" else mean

    def token_table(self, instruction_ids: Sequence[int], vocab_size: int | None = None, *,
                    batch_size: int = 256, tokens_per_sequence: int | None = None,
                    progress: bool = True) -> torch.Tensor:
        """The query table: row t = Enc(instruction + t), for every t < vocab_size.

        Args:
            instruction_ids: the instruction's ids (no special tokens).
            vocab_size: rows to compute (default: the sparse head's vocabulary size).
            batch_size: table rows per forward pass.
            tokens_per_sequence: rows packed into one sequence (default: 128 when a prompt
                is shared, i.e. decoders; else 1, a plain batch of independent sequences).
            progress: show a tqdm bar.
        Returns:
            [V, H] float32 on the CPU.
        """
        from lr_opensearch.progress import progress_bar

        vocab_size = vocab_size or self.vocab_size
        shared = self.query_layout(instruction_ids)[0]
        per_seq = tokens_per_sequence or (128 if shared else 1)
        table = torch.empty(vocab_size, self.hidden_size, dtype=torch.float32)
        was_training = self.training
        self.eval()
        try:
            with torch.inference_mode(), progress_bar(total=vocab_size, desc="query table", unit="tok",
                                              disable=not progress) as bar:
                for start in range(0, vocab_size, batch_size):
                    stop = min(start + batch_size, vocab_size)
                    seqs = [list(range(s, min(s + per_seq, stop))) for s in range(start, stop, per_seq)]
                    vectors = self.encode_token_blocks(instruction_ids, seqs)
                    flat = torch.cat([v[: len(s)] for v, s in zip(vectors, seqs, strict=True)])
                    table[start:stop] = flat.float().cpu()
                    bar.update(stop - start)
        finally:
            self.train(was_training)
        return table

    def save_pretrained(self, out_dir: str | Path) -> Path:
        """Save the HF model (safetensors) to ``out_dir``; peft adapters are merged first.
        Medusa heads go beside it as ``medusa.safetensors``."""
        hf = self.hf
        if callable(getattr(hf, "merge_and_unload", None)):
            logger.info("merging LoRA adapters into the backbone before saving")
            hf = hf.merge_and_unload()
            self.hf = hf
        out = Path(out_dir)
        hf.save_pretrained(out)
        if self.medusa is not None:
            self.medusa.save(out / MEDUSA_FILE)
        return self.save_sparse_fits(out)

    def save_sparse_fits(self, out: Path) -> Path:
        """Write the fitted sparse head's files (``term_affine``, ``sparse_lowrank``) into
        the doc encoder directory ``out`` (beside a checkpoint's copied files)."""
        if self.term_affine is not None:
            self.term_affine.save(out / TERM_AFFINE_FILE)
        if self.sparse_lowrank is not None:
            self.sparse_lowrank.save(out / LOWRANK_FILE)
        return out


class LastTokenRetriever(LightRetrieverModel):
    """Pooling = the last real position (decoders: the EOS of the framing)."""

    pooling = "last"

    def pooling_weights(self, visible: torch.Tensor) -> torch.Tensor:
        return (visible & (visible.cumsum(-1) == visible.sum(-1, keepdim=True))).float()


class ClsRetriever(LightRetrieverModel):
    """Pooling = the first real position (BERT's [CLS])."""

    pooling = "cls"

    def pooling_weights(self, visible: torch.Tensor) -> torch.Tensor:
        return (visible & (visible.cumsum(-1) == 1)).float()


class MeanRetriever(LightRetrieverModel):
    """Pooling = the mean over real positions (sentence-transformers' mean pooling)."""

    pooling = "mean"

    def pooling_weights(self, visible: torch.Tensor) -> torch.Tensor:
        weights = visible.float()
        return weights / weights.sum(-1, keepdim=True).clamp(min=1.0)
