"""Export a trained checkpoint as a model bundle.

``python -m trainer.export --checkpoint C --out BUNDLE [--overwrite] [--set export.key=value]``

The model is rebuilt from the checkpoint's config (backbone + LoRA settings), the trained
weights are loaded, LoRA is merged into the backbone, and the bundle is written by
``lr_opensearch.fit.build.build_bundle_from_model`` - the same code ``lr bundle build`` uses:
one query table per configured instruction (formatted with ``QUERY_PROMPT`` exactly as
in training), the merged doc encoder and the tokenizer.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lr_opensearch.errors import LRError
from trainer.checkpoint import load_weights, read_config, resolve_checkpoint
from trainer.config import TrainConfig, config_from_dict, format_instruction
from trainer.config_io import parse_override
from trainer.lora import merge_lora

logger = logging.getLogger(__name__)


def bundle_instructions(config: TrainConfig) -> dict[str, str]:
    """name -> prompt text for the tables (the instruction formatted as in training)."""
    return {name: format_instruction(text) for name, text in config.export.instructions.items()}


def export_model(model: Any, tokenizer: Any, config: TrainConfig, out: str | Path, *,
                 overwrite: bool = False, progress: bool = True,
                 fit_corpora: Sequence[str | Path] = ()) -> Path:
    """Merge LoRA in ``model`` and write its bundle to ``out``.

    Args:
        model: the trained LightRetrieverModel (peft-wrapped or not); merged in place.
        tokenizer: its ``tokenizers.Tokenizer``.
        config: the training config (its ``export`` section shapes the bundle).
        out: the bundle directory.
        overwrite: replace an existing bundle.
        progress: progress bars while caching tables.
        fit_corpora: fit the query table to the trained model's own query embeddings on
            pseudo-queries of these corpora (``lr bundle build --fit-corpus``); none: the
            trained per-token table as it is.
    """
    from lr_opensearch.fit.build import TableSettings, build_bundle_from_model
    from lr_opensearch.fit.tables import FitRecipe

    merge_lora(model)
    model.eval()
    export = config.export
    start = time.perf_counter()
    extra: dict[str, Any] = {} if export.sparse_top_k is None else {"sparse_top_k": export.sparse_top_k}
    path = build_bundle_from_model(
        model, tokenizer, out,
        tables=TableSettings(instructions=bundle_instructions(config),
                             max_length=export.max_length or config.data.max_length,
                             served_dim=export.served_dim, batch_size=export.batch_size),
        default_instruction=export.default_instruction, overwrite=overwrite, progress=progress,
        fit=FitRecipe(corpora=tuple(fit_corpora)), **extra)
    logger.info("bundle written to %s in %.1f s", path, time.perf_counter() - start)
    return path


def export_checkpoint(checkpoint: str | Path, out: str | Path, *, overrides: list[str] | None = None,
                      overwrite: bool = False, progress: bool = True,
                      fit_corpora: Sequence[str | Path] = ()) -> Path:
    """Rebuild the model of a checkpoint (a step dir or a run dir), load its weights, export."""
    from trainer.modeling import build_model

    ckpt = resolve_checkpoint(checkpoint)
    config = read_config(ckpt)
    if overrides:
        data = config.to_dict()
        for text in overrides:
            key, value = parse_override(text)
            node = data
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = value
        config = config_from_dict(data, source="export overrides")
    model, tokenizer = build_model(config)
    load_weights(ckpt, model)
    logger.info("loaded trained weights from %s", ckpt)
    return export_model(model, tokenizer, config, out, overwrite=overwrite, progress=progress,
                        fit_corpora=fit_corpora)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.export",
                                     description="Export a trained checkpoint as a model bundle.")
    parser.add_argument("--checkpoint", required=True, help="checkpoints/step-N or the run directory")
    parser.add_argument("--out", required=True, help="bundle directory to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing bundle")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a saved setting, e.g. --set export.served_dim=256")
    parser.add_argument("--fit-corpus", action="append", default=[], metavar="PATH",
                        help="fit the query table after training on pseudo-queries of this "
                        "corpus (repeatable; as lr bundle build --fit-corpus)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        path = export_checkpoint(args.checkpoint, args.out, overrides=args.set,
                                 overwrite=args.overwrite, fit_corpora=args.fit_corpus)
    except LRError as exc:
        logging.getLogger("trainer").error("%s", exc)
        return 1
    print(json.dumps({"bundle": str(path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
