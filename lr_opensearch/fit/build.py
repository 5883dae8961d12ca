"""Building a model bundle from an HF checkpoint (no training needed) or a trained model.

``build_bundle(model_dir, out_dir)`` loads any local HF directory (default: the packaged
all-MiniLM-L6-v2), caches one query table per instruction (row t = the document forward of
``instruction + t``, see ``LightRetrieverModel.token_table``), saves the doc encoder and
writes the bundle with ``lr_opensearch.bundle.save_bundle``. ``trainer.export`` calls
``build_bundle_from_model`` with its merged model: the same code path.

With fit corpora (``lr bundle build --fit-corpus``), the tables are then fitted so that the
mean of a query's rows approximates the full model's embedding of the query, and IDF
sparse query weights are computed (``lr_opensearch.fit.tables``); the targets come from
the model's own document forward through ``DocEncoder``, exactly as the ``full-dense``
evaluation run encodes a query.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch.bundle import BundleConfig, save_bundle
from lr_opensearch.errors import ConfigError
from lr_opensearch.fit.tables import FitInputs, FitRecipe, FitResult, fit_bundle_tables
from lr_opensearch.model.settings import DocSettings
from lr_opensearch.packaged import resolve_model

if TYPE_CHECKING:
    from lr_opensearch.model import LightRetrieverModel

logger = logging.getLogger(__name__)

DEFAULT_INSTRUCTIONS: Mapping[str, str] = {"default": ""}
#: part of every table cache key: raise it when the table's computation changes
TABLE_CACHE_VERSION = 1


@dataclass(frozen=True)
class BackboneSettings:
    """How a checkpoint is read (``build_bundle``); None: the checkpoint's own.

    Attributes:
        pooling: "cls" | "mean" | "last"; default from sentence-transformers files, else
            "last" (decoders) / "cls" (encoders).
        normalize: L2-normalise dense vectors; default from sentence-transformers files.
        sparse_head: "lm" | "mlm" | "tied"; default the best head the checkpoint has.
        device: the torch device of the table's and the fit's forwards (``cpu``, ``cuda``,
            ``cuda:1``); default the GPU if there is one, else the CPU, as ingest's
            ``DocEncoder`` (``model.doc_encoder.default_device``). The saved files do not
            depend on it beyond float rounding.
    """

    pooling: str | None = None
    normalize: bool | None = None
    sparse_head: str | None = None
    device: str | None = None


@dataclass(frozen=True)
class TableSettings:
    """What a bundle serves and how its query tables are computed (both builders).

    Attributes:
        instructions: name -> instruction text; default the query prompt the model's
            sentence-transformers files record (bge-small's "Represent this sentence for
            searching relevant passages: ", e5-small's "query: "), else ``{"default": ""}``.
        max_length: doc encoder max tokens; default sentence-transformers' or
            min(512, the position limit) (``build_bundle``), 512 (``build_bundle_from_model``).
        served_dim: leading dense dims served (Matryoshka); default all.
        batch_size: table rows per forward pass.
        cache_key: ``model_files_key`` of the directory the model was loaded from: the
            unfitted tables go through the table cache (none for a model in training).
        source_dir: that directory: the fit may then run the model on ONNX Runtime
            (``FitRecipe.runtime``); a model in training is fitted on torch.
    """

    instructions: Mapping[str, str] | None = None
    max_length: int | None = None
    served_dim: int | None = None
    batch_size: int = 256
    cache_key: str | None = field(default=None, repr=False)
    source_dir: Path | None = field(default=None, repr=False)


def default_max_length(model: LightRetrieverModel, model_dir: Path | None) -> int:
    """sentence-transformers' max_seq_length if recorded, else min(512, position limit)."""
    from lr_opensearch.model.loading import sentence_transformers_settings

    if model_dir is not None:
        st = sentence_transformers_settings(model_dir)
        if "max_length" in st:
            return int(st["max_length"])
    limit = getattr(model.hf.config, "max_position_embeddings", None) or 512
    return int(min(512, limit))


def build_bundle(
    model_dir: str | Path | None,
    out_dir: str | Path,
    *,
    backbone: BackboneSettings | None = None,
    tables: TableSettings | None = None,
    fit: FitRecipe | None = None,
    overwrite: bool = False,
    progress: bool = True,
    **config_fields: Any,
) -> Path:
    """Build a bundle from a local HF checkpoint directory.

    Args:
        model_dir: HF save_pretrained directory with tokenizer.json, or a catalogue name
            (``packaged:minilm``, ``packaged:smollm2``, ``packaged:bge-small``,
            ``packaged:e5-small``: see ``packaged.resolve_model``); None = the packaged
            all-MiniLM-L6-v2 (mean pooling + L2 normalisation, as it was trained).
        out_dir: the bundle directory to write.
        backbone: how the checkpoint is read (pooling, normalisation, sparse head, device).
        tables: instructions, max length, served dims, batch size (:class:`TableSettings`).
            The document prompt the model's sentence-transformers files record (e5's
            "passage: ") becomes the bundle's ``document_prompt``.
        fit: how the tables are fitted (``fit.tables.FitRecipe``: corpora, queries, cap,
            distillation, precision); None or no corpora: the unfitted table, count query
            weights. See ``build_bundle_from_model``.
        overwrite: replace an existing bundle.
        progress: show progress bars.
        **config_fields: further ``BundleConfig`` fields (sparse_top_k, weights, ...).

    Returns:
        The bundle path.
    """
    from lr_opensearch.model.runtime import require_torch

    require_torch("lr bundle build (the query table is the backbone's forward of every token; "
                  "ingest with --bundle BUNDLE needs no build)")
    from lr_opensearch.model import LightRetrieverModel, RetrieverSettings
    from lr_opensearch.model.device import check_device
    from lr_opensearch.model.doc_encoder import default_device
    from lr_opensearch.model.loading import sentence_transformers_settings

    backbone = backbone or BackboneSettings()
    tables = tables or TableSettings()
    target = check_device(backbone.device) if backbone.device is not None else default_device()
    source, catalogue_name = resolve_model(None if model_dir is None else str(model_dir))
    prompts = sentence_transformers_settings(source)
    if tables.instructions is None and prompts.get("query_prompt"):
        # the model's own, verbatim
        tables = dataclasses.replace(tables, instructions={"default": prompts["query_prompt"]})
    if prompts.get("document_prompt"):
        config_fields.setdefault("document_prompt", prompts["document_prompt"])
    settings = RetrieverSettings(pooling=backbone.pooling, normalize=backbone.normalize,
                                 sparse_head=backbone.sparse_head)
    model = LightRetrieverModel.from_pretrained(source, settings, name=catalogue_name).to(target)
    config_fields.setdefault("backbone_name", catalogue_name or source.name)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tables = dataclasses.replace(
        tables, max_length=tables.max_length or default_max_length(model, source),
        cache_key=model_files_key(source), source_dir=source)
    return build_bundle_from_model(model, tokenizer, out_dir, tables=tables, fit=fit,
                                   overwrite=overwrite, progress=progress, **config_fields)


def model_files_key(model_dir: Path) -> str:
    """sha256 over a model directory's weights, config and tokenizer: with the instruction
    and the model's settings it names an unfitted table in the table cache."""
    from lr_opensearch.bundle.files import hash_file

    files = sorted([*model_dir.glob("*.safetensors"), model_dir / "config.json",
                    model_dir / "tokenizer.json"])
    return hashlib.sha256("\n".join(f"{p.name} {hash_file(p)}" for p in files).encode()).hexdigest()


def table_cache_path(model: LightRetrieverModel, model_key: str, ids: Sequence[int], vocab: int) -> Path:
    """Where the unfitted table of (model files, settings, instruction ids, vocabulary) is
    kept: ``$LR_TABLE_CACHE/<sha256>.safetensors``, by default ``<cache>/tables``. The table
    does not depend on the corpus (bge-small's, 12 layers and an 8-token prompt: 136 s on
    two idle CPU cores, far longer on a loaded machine); a second fitted bundle of the same
    model reuses it."""
    from lr_opensearch.cache import cache_dir

    recipe = json.dumps([model_key, model.kind, model.pooling, model.normalize, model.query_norm,
                         list(ids), vocab, TABLE_CACHE_VERSION])
    root = Path(os.environ.get("LR_TABLE_CACHE") or cache_dir() / "tables")
    return root / f"{hashlib.sha256(recipe.encode()).hexdigest()}.safetensors"


def compute_tables(model: LightRetrieverModel, tokenizer: Any, instructions: Mapping[str, str], *,
                   batch_size: int = 256, progress: bool = True,
                   model_key: str | None = None) -> dict[str, np.ndarray]:
    """One query table [V, H] float32 per instruction, V = the tokenizer's vocabulary size.

    With ``model_key`` (``model_files_key`` of the directory the model was loaded from) each
    table is read from / written to the table cache (``table_cache_path``)."""
    from safetensors.numpy import load_file, save_file

    from lr_opensearch.model import instruction_ids

    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    if vocab > model.vocab_size:
        raise ConfigError(f"the tokenizer has {vocab} tokens but the model's vocabulary has only "
                          f"{model.vocab_size}; they do not belong together")
    tables: dict[str, np.ndarray] = {}
    for name, text in instructions.items():
        start = time.perf_counter()
        ids = instruction_ids(tokenizer, text)
        cached = table_cache_path(model, model_key, ids, vocab) if model_key else None
        if cached is not None and cached.is_file():
            tables[name] = load_file(str(cached))["table"]
            logger.info("query table %r: reusing %s", name, cached)
            continue
        tables[name] = model.token_table(ids, vocab, batch_size=batch_size, progress=progress).numpy()
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            tmp = cached.with_name(f"{cached.name}.{os.getpid()}.tmp")
            save_file({"table": tables[name]}, str(tmp))
            tmp.replace(cached)
        table = tables[name]
        logger.info("query table %r (%d prompt tokens): %d x %d in %.1f s", name, len(ids),
                    *table.shape, time.perf_counter() - start)
    return tables


def build_bundle_from_model(
    model: LightRetrieverModel,
    tokenizer: Any,
    out_dir: str | Path,
    *,
    tables: TableSettings | None = None,
    fit: FitRecipe | None = None,
    overwrite: bool = False,
    progress: bool = True,
    **config_fields: Any,
) -> Path:
    """Write a bundle for an in-memory model (trainer.export passes its merged model).

    Args:
        model: the retriever (LoRA merged; a peft wrapper is merged when saving).
        tokenizer: its ``tokenizers.Tokenizer``.
        out_dir: the bundle directory.
        tables: instructions (default ``{"default": ""}``), max length (default 512),
            served dims, batch size, table cache key (:class:`TableSettings`).
        fit: with corpora, every table is fitted to pseudo-queries cut from them and the
            bundle ships IDF sparse query weights; the manifest's ``fit`` records how
            (``fit.tables.FitRecipe``).
        overwrite: replace an existing bundle.
        progress: show progress bars.
        **config_fields: further ``BundleConfig`` fields (backbone_name, sparse_top_k, ...).

    Returns:
        The bundle path.
    """
    tables = tables or TableSettings()
    instructions = dict(tables.instructions or DEFAULT_INSTRUCTIONS)
    max_length = tables.max_length or 512
    config_fields.setdefault("backbone_name", model.name or model.architecture)
    config_fields.setdefault("default_instruction", next(iter(instructions)))
    config = BundleConfig(
        architecture=model.architecture, kind=model.kind, pooling=model.pooling,
        normalize=model.normalize, query_norm=model.query_norm, dense_dim=model.hidden_size,
        served_dim=tables.served_dim or model.hidden_size, max_length=max_length,
        sparse_head=model.head.kind, instructions=instructions, **medusa_fields(model),
        **config_fields)
    rows = compute_tables(model, tokenizer, instructions, batch_size=tables.batch_size,
                          progress=progress, model_key=tables.cache_key)
    weights, stats = None, None
    if fit is not None and fit.enabled:
        doc = DocSettings(max_length=max_length, document_prompt=config.document_prompt)
        result = fit_tables(model, tokenizer, rows, instructions, doc, fit, progress=progress,
                            source_dir=tables.source_dir)
        rows, weights, stats = result.tables, result.idf, result.stats.to_dict()
        if fit.sparse_lowrank is not None and result.inputs is not None:
            stats["sparse_lowrank"] = fit_lowrank(model, tokenizer, result.inputs, fit, doc, progress=progress)
            config = dataclasses.replace(config, sparse_lowrank=fit.sparse_lowrank.rank)
        if fit.sparse is not None and result.inputs is not None:
            stats["sparse_doc"] = fit_sparse(model, tokenizer, result.inputs, fit, doc, progress=progress)
            config = dataclasses.replace(config, sparse_term_affine=True)
    with tempfile.TemporaryDirectory(prefix="lr-doc-encoder-") as tmp:
        doc_dir = Path(tmp) / "doc_encoder"
        model.save_pretrained(doc_dir)
        tokenizer.save(str(doc_dir / "tokenizer.json"))
        return save_bundle(out_dir, config, tokenizer=tokenizer, tables=rows,
                           doc_encoder_dir=doc_dir, overwrite=overwrite,
                           sparse_weights=weights, fit=stats)


def medusa_fields(model: LightRetrieverModel) -> dict[str, Any]:
    """The BundleConfig fields of a Medusa sparse mode (none for LightRetriever's "max")."""
    if model.medusa is None:
        return {}
    return {"sparse_mode": model.sparse_mode, "medusa_heads": model.medusa.heads,
            "soft_top_k_temperature": model.soft_top_k_temperature}


def fit_sparse(model: LightRetrieverModel, tokenizer: Any, inputs: FitInputs, recipe: FitRecipe,
               doc: DocSettings, *, progress: bool = True) -> dict[str, Any]:
    """Fit the sparse head's per-term scale and bias (``fit.sparse``) on the table fit's
    documents and pseudo-queries, set it on ``model`` (saved with its doc encoder) and
    return the record of the fit. Documents are encoded as ingest encodes them, at the
    recipe's precision."""
    from lr_opensearch.fit.sparse_head import fit_sparse_head

    if recipe.sparse is None:
        raise ValueError("fit_sparse needs a recipe with sparse settings")
    model.set_term_affine(None)
    head, stats = _fit_doc_side(model, tokenizer, doc, recipe, "--fit-sparse",
                                lambda enc: fit_sparse_head(enc, inputs, recipe.sparse, progress=progress))
    model.set_term_affine(head)
    return stats.to_dict()


def fit_lowrank(model: LightRetrieverModel, tokenizer: Any, inputs: FitInputs, recipe: FitRecipe,
                doc: DocSettings, *, progress: bool = True) -> dict[str, Any]:
    """Fit a low-rank correction of the sparse projection (``fit.sparse_lowrank``) on the
    table fit's documents and pseudo-queries, set it on ``model`` (saved with its doc
    encoder) and return the record of the fit."""
    from lr_opensearch.fit.sparse_lowrank import fit_sparse_lowrank

    if recipe.sparse_lowrank is None:
        raise ValueError("fit_lowrank needs a recipe with low-rank settings")
    model.sparse_lowrank = None
    head, stats = _fit_doc_side(model, tokenizer, doc, recipe, "--fit-sparse-lowrank",
                                lambda enc: fit_sparse_lowrank(enc, inputs, recipe.sparse_lowrank, progress=progress))
    model.sparse_lowrank = head.to(model.device)
    return stats.to_dict()


def _fit_doc_side(model: LightRetrieverModel, tokenizer: Any, doc: DocSettings, recipe: FitRecipe,
                  flag: str, fit: Any) -> Any:
    """``fit(encoder)`` with the model's documents encoded as ingest encodes them, at the
    recipe's precision; the model's training mode restored."""
    from lr_opensearch.model import DocEncoder

    if model.medusa is not None:
        raise ConfigError(f"{flag} fits the 'max' sparse head; this model's sparse_mode is "
                          f"{model.sparse_mode!r}; build without {flag}")
    was_training = model.training
    encoder = DocEncoder(model, tokenizer, doc, device=model.device, batch_size=32,
                         precision=recipe.encode_precision)
    try:
        return fit(encoder)
    finally:
        model.train(was_training)


def fit_tables(model: LightRetrieverModel, tokenizer: Any, tables: Mapping[str, np.ndarray],
               instructions: Mapping[str, str], doc: DocSettings, recipe: FitRecipe, *,
               progress: bool = True, source_dir: Path | None = None) -> FitResult:
    """``fit.fit_bundle_tables`` with targets from the model's document forward.

    A target is ``DocEncoder.encode_dense([instruction + query])`` at the full dense dim:
    what the ``full-dense`` evaluation run computes for a query; with ``distill``, the
    candidate documents are encoded by the same ``encode_dense`` with the document prompt, as
    ingest encodes them;
    both at ``precision`` (``options.ENCODE_PRECISIONS``), on ONNX Runtime where
    ``recipe.runtime`` chooses it and the model was loaded from ``source_dir``
    (``model.runtime.fit_encoder``).
    """
    from lr_opensearch.model.runtime import fit_encoder

    was_training = model.training
    encoder = fit_encoder(model, tokenizer, doc, precision=recipe.encode_precision,
                          runtime=recipe.runtime, source_dir=source_dir)
    try:
        return fit_bundle_tables(tokenizer, tables, instructions, encoder.encode_dense, recipe,
                                 progress=progress, embed_docs=lambda texts: encoder.encode_dense(texts, documents=True))
    finally:
        model.train(was_training)
