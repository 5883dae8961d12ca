"""The local bundle store: where bundles built for you live on this machine, and how one
is found again.

``store_dir()`` is ``$LR_BUNDLE_STORE``, else ``<cache>/bundles`` (``$LR_CACHE_DIR`` or
``~/.cache/lr-opensearch``). A bundle fitted on a corpus is stored under a name made of the
model, the corpus content (SHA-256) and the fit recipe, so the same corpus and model give
the same bundle, built once (``fitted_bundle``). ``find_bundle(bundle_id)`` looks a bundle
up by the id an index records in ``_meta.lightretriever.bundle_id``.

Query side: reading the store needs no torch; only building a bundle imports it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path

from lr_opensearch.bundle.format import MANIFEST_FILE
from lr_opensearch.errors import ConfigError
from lr_opensearch.packaged import cache_dir

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "packaged:minilm"


def store_dir() -> Path:
    """Where built bundles live: ``$LR_BUNDLE_STORE``, else ``<cache>/bundles``."""
    env = os.environ.get("LR_BUNDLE_STORE")
    return Path(env) if env else cache_dir() / "bundles"


def default_model() -> str:
    """The model a bundle is built from when none is named: ``$LR_DEFAULT_MODEL`` (a local
    HF directory or a catalogue name such as ``packaged:smollm2``), else the packaged
    all-MiniLM-L6-v2."""
    return os.environ.get("LR_DEFAULT_MODEL") or DEFAULT_MODEL


def recipe_key() -> str:
    """A short hash of the fit recipe and fusion defaults: a stored fitted bundle is reused
    only while they are unchanged (an upgrade that changes them builds a fresh one)."""
    from lr_opensearch.bundle import distill, pseudo, ridge
    from lr_opensearch.legs import default_weights

    facts = repr((pseudo.RECIPES, sorted(pseudo.RECIPE_WEIGHTS.items()), pseudo.PASSAGE_SHARE,
                  pseudo.PASSAGE_WORDS, pseudo.TARGET_QUERIES, pseudo.MAX_QUERIES,
                  pseudo.BASE_PER_DOC, pseudo.CAP_PER_DOC, ridge.LAMS, distill.DEFAULT_DISTILL,
                  sorted((leg, w) for leg, w in default_weights().items() if w > 0)))
    # (a leg of weight 0 is in no new bundle's weights: registering one keeps the stored ones)
    return hashlib.sha256(facts.encode()).hexdigest()[:8]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def fitted_name(corpus: Path, model: str | None = None) -> str:
    """The store name of ``model`` fitted on ``corpus``: model, corpus content, recipe."""
    model = model or default_model()
    label = model.removeprefix("packaged:") if model.startswith("packaged:") else Path(model).name
    model_key = hashlib.sha256(str(Path(model).resolve() if not model.startswith("packaged:")
                                   else model).encode()).hexdigest()[:6]
    slug = re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-") or "model"
    return f"{slug}-{model_key}-fit-{file_sha256(corpus)[:16]}-{recipe_key()}"


def is_bundle(path: Path) -> bool:
    return (path / MANIFEST_FILE).is_file()


def fitted_bundle(corpus: str | Path, *, model: str | None = None, progress: bool = True) -> Path:
    """The bundle of ``model`` (default ``default_model()``) fitted on ``corpus``, from the
    store, or built into it once (``lr bundle build --fit-corpus``'s library function)."""
    corpus = Path(corpus)
    out = store_dir() / fitted_name(corpus, model)
    if is_bundle(out):
        logger.info("reusing bundle %s (%s fitted on %s)", out, model or default_model(),
                    corpus.name)
        return out
    from lr_opensearch.bundle.build import build_bundle
    from lr_opensearch.bundle.fit import FitRecipe

    logger.info("building bundle %s: %s with its query table fitted on %s (once for this "
                "corpus and model; minutes on a CPU; reused next time)", out,
                model or default_model(), corpus)
    return Path(build_bundle(model or default_model(), out, fit=FitRecipe(corpora=(corpus,)),
                             progress=progress))


def find_bundle(bundle_id: str, store: Path | None = None) -> Path | None:
    """The bundle in the store (``store`` or ``store_dir()``) whose id is ``bundle_id``, or
    None. Reads only the manifests."""
    root = store or store_dir()
    if not root.is_dir():
        return None
    for manifest in sorted(root.glob(f"*/{MANIFEST_FILE}")):
        try:
            found = json.loads(manifest.read_text(encoding="utf-8")).get("bundle_id")
        except (OSError, ValueError):
            continue
        if found == bundle_id:
            return manifest.parent
    return None


def bundle_of_index(index: str, meta: dict[str, object]) -> Path:
    """The bundle an index was built with, on this machine: the path recorded in its
    ``_meta`` at creation if that bundle is there (same id), else the store's bundle of
    that id.

    Raises:
        ConfigError: the index is not a LightRetriever index, or its bundle is not here
            (the message says where it was and what to do).
    """
    bundle_id = str(meta.get("bundle_id") or "")
    if not bundle_id:
        raise ConfigError(f"index {index!r} has no _meta.lightretriever.bundle_id: it was not "
                          "made by lr-opensearch; give --bundle DIR")
    recorded = meta.get("bundle_path")
    if isinstance(recorded, str) and is_bundle(Path(recorded)):
        try:
            found = json.loads((Path(recorded) / MANIFEST_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            found = {}
        if found.get("bundle_id") == bundle_id:
            return Path(recorded)
    stored = find_bundle(bundle_id)
    if stored is not None:
        return stored
    where = f" (it was at {recorded} where the index was made)" if recorded else ""
    raise ConfigError(f"index {index!r} was built with bundle {bundle_id}{where}, which is not "
                      f"on this machine: copy that bundle here and give --bundle DIR, or put it "
                      f"in the bundle store {store_dir()}")
