"""What a checkpoint directory says about its backbone, read without torch.

``read_checkpoint`` gives the facts a bundle records and the document forward needs
(architecture, kind, pooling, normalisation, sparse head, sizes) from config.json and the
sentence-transformers files alone, as ``LightRetrieverModel.from_pretrained`` resolves them:
what ``lr bundle build`` runs on ONNX Runtime with (``fit.build``). ``copy_checkpoint``
puts the checkpoint's model files into a bundle's ``doc_encoder/`` unchanged. The HF
config readers here (``default_architecture``, ``infer_kind``, ``eos_token_id``) serve
``model.loading`` too: they take any object with the config's attributes.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from lr_opensearch.errors import ConfigError
from lr_opensearch.model.settings import RetrieverSettings
from lr_opensearch.model.sparse_fits import SPARSE_FIT_FILES
from lr_opensearch.options import SPARSE_HEADS, choice

#: a sharded checkpoint's index of its safetensors files (``copy_checkpoint`` copies it)
INDEX_FILE = "model.safetensors.index.json"

# model_type values of decoder-only families we know (others are inferred from the
# architecture name: "...ForCausalLM" is a decoder).
DECODER_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma",
    "gemma2", "gemma3_text", "phi", "phi3", "olmo", "olmo2", "granite", "smollm3", "gpt2",
})


def default_architecture(config: Any) -> str:
    """The architecture to build: the config's own, else a sensible one for its model_type."""
    archs = getattr(config, "architectures", None) or []
    if archs:
        return str(archs[0])
    if config.model_type in DECODER_MODEL_TYPES:
        return "ForCausalLM"
    return "Model"


def infer_kind(config: Any, architecture: str) -> str:
    """"decoder" for causal LMs and known decoder families, else "encoder"."""
    if architecture.endswith("ForCausalLM") or config.model_type in DECODER_MODEL_TYPES:
        return "decoder"
    return "encoder"


def sentence_transformers_settings(model_dir: Path) -> dict[str, Any]:
    """Pooling / normalize / max_length / prompts recorded by a sentence-transformers directory.

    Returns a dict with any of "pooling" ("cls" | "mean" | "last"), "normalize" (bool),
    "max_length" (int), "query_prompt" and "document_prompt" (non-empty str: the
    ``prompts`` of config_sentence_transformers.json named "query" and "document" or
    "passage"); empty for a plain HF directory.
    """
    found: dict[str, Any] = {}
    st_prompts = model_dir / "config_sentence_transformers.json"
    if st_prompts.is_file():
        prompts = json.loads(st_prompts.read_text()).get("prompts") or {}
        for key, names in (("query_prompt", ("query",)), ("document_prompt", ("document", "passage"))):
            text = next((prompts[n] for n in names if prompts.get(n)), "")
            if text:
                found[key] = str(text)
    modules_file = model_dir / "modules.json"
    if not modules_file.is_file():
        return found
    modules = json.loads(modules_file.read_text())
    found["normalize"] = any(m.get("type", "").endswith("Normalize") for m in modules)
    for module in modules:
        if not module.get("type", "").endswith("Pooling"):
            continue
        pooling_file = model_dir / module.get("path", "") / "config.json"
        if pooling_file.is_file():
            pooling = json.loads(pooling_file.read_text())
            for key, name in (("pooling_mode_cls_token", "cls"),
                              ("pooling_mode_mean_tokens", "mean"),
                              ("pooling_mode_lasttoken", "last")):
                if pooling.get(key):
                    found["pooling"] = name
                    break
    st_config = model_dir / "sentence_bert_config.json"
    if st_config.is_file():
        max_len = json.loads(st_config.read_text()).get("max_seq_length")
        if max_len:
            found["max_length"] = int(max_len)
    return found


def resolved_pooling(model_dir: Path, settings: RetrieverSettings, kind: str) -> tuple[str, bool]:
    """(pooling, normalize) as a model from ``model_dir`` uses them: ``settings``' where set,
    else the directory's sentence-transformers files, else "last" for decoders and "cls"
    for encoders, unnormalised."""
    st = sentence_transformers_settings(model_dir)
    pooling = settings.pooling or st.get("pooling") or ("last" if kind == "decoder" else "cls")
    normalize = settings.normalize
    if normalize is None:
        normalize = bool(st.get("normalize", False))
    return str(pooling), bool(normalize)


def read_tokenizer(model_dir: Path) -> Any:
    """The ``tokenizers.Tokenizer`` of ``model_dir``'s tokenizer.json.

    Raises:
        ConfigError: there is none (named, with what to do).
    """
    from tokenizers import Tokenizer

    tok_file = model_dir / "tokenizer.json"
    if not tok_file.is_file():
        raise ConfigError(f"{model_dir}: no tokenizer.json (HF tokenizers format) beside the "
                          "weights; save the tokenizer with save_pretrained")
    return Tokenizer.from_file(str(tok_file))


def eos_token_id(config: Any) -> int | None:
    """The first EOS id of an HF config (some configs hold a list)."""
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if eos else None
    return None if eos is None else int(eos)


@dataclass(frozen=True)
class Checkpoint:
    """A backbone's facts, resolved as ``LightRetrieverModel.from_pretrained`` resolves them.

    Attributes:
        path: the checkpoint directory.
        architecture: the HF architecture name (``default_architecture``).
        kind: "encoder" or "decoder".
        pooling, normalize, query_norm, sparse_mode: as ``RetrieverSettings`` resolves them.
        sparse_head: "tied" | "mlm" | "lm", or None where only the loaded model tells
            (``head_kind``).
        hidden_size, vocab_size: from config.json.
        max_positions: config.json's ``max_position_embeddings`` (None if absent).
    """

    path: Path
    architecture: str
    kind: str
    pooling: str
    normalize: bool
    query_norm: str
    sparse_mode: str
    sparse_head: str | None
    hidden_size: int
    vocab_size: int
    max_positions: int | None


def head_kind(architecture: str, wanted: str | None) -> str | None:
    """The sparse head ``SparseHead.detect`` picks for ``architecture``, told from the name:
    a bare encoder (``BertModel``) has only its tied embeddings, ``BertForMaskedLM`` a
    BERT-style MLM head; None where the name does not tell (the loaded model does).

    Raises:
        ConfigError: ``wanted`` is a head the architecture does not have.
    """
    if wanted is not None:
        choice("sparse head", wanted, SPARSE_HEADS)
    with_head = architecture.endswith(("ForMaskedLM", "ForCausalLM", "LMHeadModel"))
    if not with_head:
        if wanted in ("lm", "mlm"):
            raise ConfigError(f"sparse head {wanted!r} needs an LM/MLM head, but {architecture} "
                              "has none; use sparse_head='tied'")
        return "tied"
    if wanted == "tied" or (architecture == "BertForMaskedLM" and wanted in (None, "mlm")):
        return wanted or "mlm"
    return None


def read_checkpoint(model_dir: Path, settings: RetrieverSettings | None = None) -> Checkpoint:
    """The facts of the checkpoint in ``model_dir`` (config.json, sentence-transformers files).

    Raises:
        ConfigError: no config.json or no safetensors weights (named), or a sparse head the
            architecture lacks.
    """
    settings = settings or RetrieverSettings()
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{model_dir}: no config.json; pass an HF save_pretrained directory")
    if not any(model_dir.glob("*.safetensors")):
        raise ConfigError(f"{model_dir}: no *.safetensors weights (pickled .bin weights are "
                          "never loaded); convert the checkpoint to safetensors first")
    raw = json.loads(config_file.read_text())
    config = SimpleNamespace(**{"model_type": "", **raw})
    architecture = default_architecture(config)
    kind = settings.kind or infer_kind(config, architecture)
    pooling, normalize = resolved_pooling(model_dir, settings, kind)
    max_positions = raw.get("max_position_embeddings")
    return Checkpoint(
        path=model_dir, architecture=architecture, kind=kind, pooling=pooling,
        normalize=normalize, query_norm=settings.query_norm, sparse_mode=settings.sparse_mode,
        sparse_head=head_kind(architecture, settings.sparse_head),
        hidden_size=int(raw["hidden_size"]), vocab_size=int(raw["vocab_size"]),
        max_positions=None if max_positions is None else int(max_positions))


def weight_files(model_dir: Path) -> list[Path]:
    """The backbone's safetensors files in ``model_dir``, sorted: not the fitted sparse head's
    files a bundle's doc encoder keeps beside them (``sparse_fits.SPARSE_FIT_FILES``), which
    neither the ONNX graph (its key, a jar's match) nor a copied checkpoint depends on."""
    return sorted(p for p in model_dir.glob("*.safetensors") if p.name not in SPARSE_FIT_FILES)


def copy_checkpoint(model_dir: Path, out: Path) -> Path:
    """Copy the checkpoint's model files (config.json, the safetensors weights and their
    index) into ``out``, byte for byte: a bundle built from a checkpoint serves its weights
    as they are, whichever runtime built the tables."""
    out.mkdir(parents=True, exist_ok=True)
    names = ["config.json", *(p.name for p in weight_files(model_dir))]
    if (model_dir / INDEX_FILE).is_file():
        names.append(INDEX_FILE)
    for name in names:
        shutil.copyfile(model_dir / name, out / name)
    return out
