"""Building a model bundle from an HF checkpoint (no training needed) or a trained model.

``build_bundle(model_dir, out_dir)`` reads any local HF directory (default: the packaged
all-MiniLM-L6-v2), caches one query table per instruction (row t = the document forward of
``instruction + t``, see ``LightRetrieverModel.token_table``), copies the checkpoint's model
files as the doc encoder and writes the bundle with ``lr_opensearch.bundle.save_bundle``:
on ONNX Runtime without torch where ``build_runtime`` says (``fit.onnx_build``), else on
torch. ``trainer.export`` calls ``build_bundle_from_model`` with its merged model (saved by
HF): the same writer, ``write_bundle``.

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
from lr_opensearch.fit.parts import BackboneParts, TokenTable, fit_with
from lr_opensearch.fit.tables import FitRecipe, FitResult
from lr_opensearch.model.checkpoint import Checkpoint
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


def default_max_length(max_positions: int | None, model_dir: Path | None) -> int:
    """sentence-transformers' max_seq_length if recorded, else min(512, the position limit
    ``max_positions``, config.json's ``max_position_embeddings``)."""
    from lr_opensearch.model.checkpoint import sentence_transformers_settings

    if model_dir is not None:
        st = sentence_transformers_settings(model_dir)
        if "max_length" in st:
            return int(st["max_length"])
    return int(min(512, max_positions or 512))


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

    Where ``build_runtime`` chooses ONNX Runtime (``--runtime auto`` on a CPU, an encoder
    whose graph is a packaged jar's or cached), no torch is imported: the query table, the
    fit's vectors and the doc encoder's files (the checkpoint's own, copied) come from the
    checkpoint and its graph alone; otherwise the model is loaded on torch, as before.

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
            distillation, precision, runtime); None or no corpora: the unfitted table, count
            query weights. See ``build_bundle_from_model``.
        overwrite: replace an existing bundle.
        progress: show progress bars.
        **config_fields: further ``BundleConfig`` fields (sparse_top_k, weights, ...).

    Returns:
        The bundle path.
    """
    from lr_opensearch.model.checkpoint import (
        read_checkpoint,
        read_tokenizer,
        sentence_transformers_settings,
    )
    from lr_opensearch.model.settings import RetrieverSettings

    backbone = backbone or BackboneSettings()
    tables = tables or TableSettings()
    source, catalogue_name = resolve_model(None if model_dir is None else str(model_dir))
    prompts = sentence_transformers_settings(source)
    if tables.instructions is None and prompts.get("query_prompt"):
        # the model's own, verbatim
        tables = dataclasses.replace(tables, instructions={"default": prompts["query_prompt"]})
    if prompts.get("document_prompt"):
        config_fields.setdefault("document_prompt", prompts["document_prompt"])
    settings = RetrieverSettings(pooling=backbone.pooling, normalize=backbone.normalize,
                                 sparse_head=backbone.sparse_head)
    checkpoint = read_checkpoint(source, settings)
    config_fields.setdefault("backbone_name", catalogue_name or source.name)
    tokenizer = read_tokenizer(source)
    tables = dataclasses.replace(
        tables, max_length=tables.max_length or default_max_length(checkpoint.max_positions, source),
        cache_key=model_files_key(source), source_dir=source)
    recipe = fit or FitRecipe()
    if build_runtime(checkpoint, backbone.device, recipe) == "onnx":
        from lr_opensearch.fit.onnx_build import onnx_backbone

        parts = onnx_backbone(checkpoint, tokenizer, max_length=tables.max_length,
                              batch_size=tables.batch_size, progress=progress,
                              document_prompt=config_fields.get("document_prompt", ""))
        return write_bundle(parts, tokenizer, out_dir, tables=tables, fit=fit,
                            overwrite=overwrite, **config_fields)
    from lr_opensearch.model import LightRetrieverModel
    from lr_opensearch.model.device import check_device
    from lr_opensearch.model.doc_encoder import default_device

    target = check_device(backbone.device) if backbone.device is not None else default_device()
    model = LightRetrieverModel.from_pretrained(source, settings, name=catalogue_name).to(target)
    return build_bundle_from_model(model, tokenizer, out_dir, tables=tables, fit=fit,
                                   overwrite=overwrite, progress=progress, **config_fields)


def build_runtime(checkpoint: Checkpoint, device: str | None, recipe: FitRecipe) -> str:
    """Where ``lr bundle build`` runs the backbone (the table, the fit): "onnx" (no torch)
    where ``recipe.runtime`` allows it and the checkpoint has a graph here, else "torch".

    Raises:
        ConfigError: ``--runtime onnx`` where it cannot run, or torch needed and not
            installed: one line naming the option and the extra, before any work.
    """
    from lr_opensearch.model.runtime import onnx_obstacle, require_torch
    from lr_opensearch.options import RUNTIMES, choice

    runtime = choice("--runtime", recipe.runtime, RUNTIMES)
    obstacle = onnx_obstacle(checkpoint.kind, checkpoint.sparse_mode, device,
                             recipe.encode_precision)
    if obstacle is None and recipe.sparse_fits:
        obstacle = f"{' / '.join(recipe.sparse_fits)} (the sparse document side's fits train on torch)"
    if obstacle is None and checkpoint.sparse_head is None:
        obstacle = (f"a {checkpoint.architecture} checkpoint (its sparse head is told by the "
                    "loaded model; --sparse-head tied runs on ONNX Runtime)")
    if runtime == "onnx" and obstacle:
        raise ConfigError(f"--runtime onnx: not with {obstacle}; use --runtime torch")
    if runtime == "torch" or obstacle:
        require_torch(f"lr bundle build with {obstacle or '--runtime torch'}")
        return "torch"
    return "onnx"


def model_files_key(model_dir: Path) -> str:
    """sha256 over a model directory's weights, config and tokenizer: with the instruction
    and the model's settings it names an unfitted table in the table cache."""
    from lr_opensearch.bundle.files import hash_file

    files = sorted([*model_dir.glob("*.safetensors"), model_dir / "config.json",
                    model_dir / "tokenizer.json"])
    return hashlib.sha256("\n".join(f"{p.name} {hash_file(p)}" for p in files).encode()).hexdigest()


def table_cache_path(model: Checkpoint, model_key: str, ids: Sequence[int], vocab: int) -> Path:
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


def compute_tables(facts: Checkpoint, tokenizer: Any, instructions: Mapping[str, str],
                   token_table: TokenTable, *, model_key: str | None = None) -> dict[str, np.ndarray]:
    """One query table [V, H] float32 per instruction, V = the tokenizer's vocabulary size,
    from ``token_table`` (instruction ids, V) on the runtime that builds.

    With ``model_key`` (``model_files_key`` of the directory the model was loaded from) each
    table is read from / written to the table cache (``table_cache_path``), whichever
    runtime computed it (the two agree within 1e-5: tests/fit/test_build_without_torch.py)."""
    from safetensors.numpy import load_file, save_file

    from lr_opensearch.model.framing import instruction_ids

    vocab = int(tokenizer.get_vocab_size(with_added_tokens=True))
    if vocab > facts.vocab_size:
        raise ConfigError(f"the tokenizer has {vocab} tokens but the model's vocabulary has only "
                          f"{facts.vocab_size}; they do not belong together")
    tables: dict[str, np.ndarray] = {}
    for name, text in instructions.items():
        start = time.perf_counter()
        ids = instruction_ids(tokenizer, text)
        cached = table_cache_path(facts, model_key, ids, vocab) if model_key else None
        if cached is not None and cached.is_file():
            tables[name] = load_file(str(cached))["table"]
            logger.info("query table %r: reusing %s", name, cached)
            continue
        tables[name] = token_table(ids, vocab)
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
            served dims, batch size, table cache key; ``source_dir``: the model was loaded
            unchanged from there, whose model files become the doc encoder (else the model
            is saved: :class:`TableSettings`).
        fit: with corpora, every table is fitted to pseudo-queries cut from them and the
            bundle ships IDF sparse query weights; the manifest's ``fit`` records how
            (``fit.tables.FitRecipe``).
        overwrite: replace an existing bundle.
        progress: show progress bars.
        **config_fields: further ``BundleConfig`` fields (backbone_name, sparse_top_k, ...).

    Returns:
        The bundle path.
    """
    from lr_opensearch.fit.sparse_build import fit_doc_side
    from lr_opensearch.model.checkpoint import copy_checkpoint

    tables = tables or TableSettings()
    source = tables.source_dir
    config_fields.setdefault("backbone_name", model.name or model.architecture)
    facts = Checkpoint(
        path=source or Path(), architecture=model.architecture, kind=model.kind,
        pooling=model.pooling, normalize=model.normalize, query_norm=model.query_norm,
        sparse_mode=model.sparse_mode, sparse_head=model.head.kind,
        hidden_size=model.hidden_size, vocab_size=model.vocab_size, max_positions=None)
    parts = BackboneParts(
        facts=facts,
        token_table=lambda ids, vocab: model.token_table(
            ids, vocab, batch_size=tables.batch_size, progress=progress).numpy(),
        fit=lambda rows, instructions, doc, recipe: fit_tables(
            model, tokenizer, rows, instructions, doc, recipe, progress=progress, source_dir=source),
        save=model.save_pretrained if source is None else lambda out: model.save_sparse_fits(
            copy_checkpoint(source, out)),
        fields=medusa_fields(model),
        fit_sparse=lambda inputs, doc, recipe: fit_doc_side(
            model, tokenizer, inputs, recipe, doc, progress=progress))
    return write_bundle(parts, tokenizer, out_dir, tables=tables, fit=fit, overwrite=overwrite,
                        **config_fields)


def write_bundle(parts: BackboneParts, tokenizer: Any, out_dir: str | Path, *,
                 tables: TableSettings, fit: FitRecipe | None = None, overwrite: bool = False,
                 **config_fields: Any) -> Path:
    """The one bundle writer of both runtimes: config, unfitted tables (cached), the fit,
    the doc encoder's files, ``save_bundle``."""
    facts = parts.facts
    assert facts.sparse_head is not None  # the loaded model's, or told by build_runtime's check
    instructions = dict(tables.instructions or DEFAULT_INSTRUCTIONS)
    max_length = tables.max_length or 512
    config_fields.setdefault("default_instruction", next(iter(instructions)))
    config = BundleConfig(
        architecture=facts.architecture, kind=facts.kind, pooling=facts.pooling,
        normalize=facts.normalize, query_norm=facts.query_norm, dense_dim=facts.hidden_size,
        served_dim=tables.served_dim or facts.hidden_size, max_length=max_length,
        sparse_head=facts.sparse_head, instructions=instructions, **parts.fields,
        **config_fields)
    rows = compute_tables(facts, tokenizer, instructions, parts.token_table,
                          model_key=tables.cache_key)
    weights, stats = None, None
    if fit is not None and fit.enabled:
        doc = DocSettings(max_length=max_length, document_prompt=config.document_prompt)
        result = parts.fit(rows, instructions, doc, fit)
        rows, weights, stats = result.tables, result.idf, result.stats.to_dict()
        if fit.sparse_fits:
            if parts.fit_sparse is None or result.inputs is None:  # build_runtime refused it
                raise ConfigError(f"{', '.join(fit.sparse_fits)} runs on torch; use --runtime torch")
            stats.update(parts.fit_sparse(result.inputs, doc, fit))
            config = dataclasses.replace(
                config, sparse_term_affine=fit.sparse is not None,
                sparse_lowrank=0 if fit.sparse_lowrank is None else fit.sparse_lowrank.rank)
    with tempfile.TemporaryDirectory(prefix="lr-doc-encoder-") as tmp:
        doc_dir = Path(tmp) / "doc_encoder"
        parts.save(doc_dir)
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


def fit_tables(model: LightRetrieverModel, tokenizer: Any, tables: Mapping[str, np.ndarray],
               instructions: Mapping[str, str], doc: DocSettings, recipe: FitRecipe, *,
               progress: bool = True, source_dir: Path | None = None) -> FitResult:
    """``fit_with`` the model's document forward (``model.runtime.fit_encoder``: on ONNX
    Runtime where ``recipe.runtime`` chooses it and the model was loaded from
    ``source_dir``, else on torch at ``recipe.encode_precision``)."""
    from lr_opensearch.model.runtime import fit_encoder

    was_training = model.training
    encoder = fit_encoder(model, tokenizer, doc, precision=recipe.encode_precision,
                          runtime=recipe.runtime, source_dir=source_dir)
    try:
        return fit_with(encoder, tokenizer, tables, instructions, recipe, progress=progress)
    finally:
        model.train(was_training)
