"""The store's fitted bundles: a model fitted on a corpus, built once into the bundle store
(:func:`lr_opensearch.bundle.store.store_dir`) and found again by name.

A bundle fitted on a corpus is stored under a name made of the model, the corpus content
(SHA-256) and the fit recipe, so the same corpus and model give the same bundle, built once
(``fitted_bundle``; ``lr bundle build --fit-corpus``, zero-config ingest and ``lr demo``).
Neither naming nor building one needs torch where the model runs on ONNX Runtime
(``fit.build.build_runtime``); both need scipy (the fit's ridge solve: ``.[build]``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
from pathlib import Path

from lr_opensearch.bundle.files import hash_file
from lr_opensearch.bundle.store import is_bundle, store_dir
from lr_opensearch.errors import ConfigError

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "packaged:minilm"
BUILD_HINT = "pip install 'lr-opensearch[build]'"


def require_build_packages(what: str = "lr bundle build") -> None:
    """ConfigError naming ``what`` and the extra, unless scipy (the fit's sparse ridge
    solve, ``fit.ridge``) is installed: one line before any work."""
    from lr_opensearch.model.onnx_graph import installed

    if not installed("scipy"):
        raise ConfigError(f"{what} needs scipy (the query table's fit), which is not installed: "
                          f"{BUILD_HINT}")


def default_model() -> str:
    """The model a bundle is built from when none is named: ``$LR_DEFAULT_MODEL`` (a local
    HF directory or a catalogue name such as ``packaged:smollm2``), else the packaged
    all-MiniLM-L6-v2."""
    return os.environ.get("LR_DEFAULT_MODEL") or DEFAULT_MODEL


def recipe_key() -> str:
    """A short hash of the fit recipe and fusion defaults: a stored fitted bundle is reused
    only while they are unchanged (an upgrade that changes them builds a fresh one)."""
    from lr_opensearch.fit import distill, pseudo, ridge, sparse
    from lr_opensearch.legs import default_weights

    facts = repr((pseudo.RECIPES, sorted(pseudo.RECIPE_WEIGHTS.items()), pseudo.PASSAGE_SHARE,
                  pseudo.PASSAGE_WORDS, pseudo.TARGET_QUERIES, pseudo.MAX_QUERIES,
                  pseudo.BASE_PER_DOC, pseudo.CAP_PER_DOC, ridge.LAMS, distill.DEFAULT_DISTILL,
                  *(() if sparse.DEFAULT_SPARSE_FIT is None else (sparse.DEFAULT_SPARSE_FIT,)),
                  *(() if sparse.DEFAULT_SPARSE_LOWRANK is None else (sparse.DEFAULT_SPARSE_LOWRANK,)),
                  sorted((leg, w) for leg, w in default_weights().items() if w > 0)))
    # (a leg of weight 0 is in no new bundle's weights: registering one keeps the stored ones)
    return hashlib.sha256(facts.encode()).hexdigest()[:8]


def fitted_name(corpus: Path, model: str | None = None) -> str:
    """The store name of ``model`` fitted on ``corpus``: model, corpus content, recipe."""
    model = model or default_model()
    label = model.removeprefix("packaged:") if model.startswith("packaged:") else Path(model).name
    model_key = hashlib.sha256(str(Path(model).resolve() if not model.startswith("packaged:")
                                   else model).encode()).hexdigest()[:6]
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "model"
    return f"{slug}-{model_key}-fit-{hash_file(corpus)[:16]}-{recipe_key()}"


def fitted_bundle(corpus: str | Path, *, model: str | None = None, progress: bool = True) -> Path:
    """The bundle of ``model`` (default ``default_model()``) fitted on ``corpus``, from the
    store, or built into it once (``lr bundle build --fit-corpus``'s library function)."""
    require_build_packages("a bundle fitted on the corpus (ingest or lr demo without --bundle)")
    corpus = Path(corpus)
    out = store_dir() / fitted_name(corpus, model)
    if is_bundle(out):
        logger.info("reusing bundle %s (%s fitted on %s)", out, model or default_model(),
                    corpus.name)
        return out
    from lr_opensearch.fit.build import build_bundle
    from lr_opensearch.fit.tables import FitRecipe

    logger.info("building bundle %s: %s with its query table fitted on %s (once for this "
                "corpus and model; minutes on a CPU; reused next time)", out,
                model or default_model(), corpus)
    return Path(build_bundle(model or default_model(), out, fit=FitRecipe(corpora=(corpus,)),
                             progress=progress))
