"""The local bundle store: where bundles built for you live on this machine, and how one
is found again.

``store_dir()`` is ``$LR_BUNDLE_STORE``, else ``<cache>/bundles`` (``$LR_CACHE_DIR`` or
``~/.cache/lr-opensearch``). ``find_bundle(bundle_id)`` looks a bundle up by the id an index
records in ``_meta.lightretriever.bundle_id``; ``bundle_of_index`` finds an index's bundle.
Filling the store (a model fitted on a corpus, built once) is the workshop's:
:mod:`lr_opensearch.fit.fitted`. Reading the store needs no torch.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from lr_opensearch.bundle.format import MANIFEST_FILE
from lr_opensearch.cache import cache_dir
from lr_opensearch.errors import ConfigError


def store_dir() -> Path:
    """Where built bundles live: ``$LR_BUNDLE_STORE``, else ``<cache>/bundles``."""
    env = os.environ.get("LR_BUNDLE_STORE")
    return Path(env) if env else cache_dir() / "bundles"


def is_bundle(path: Path) -> bool:
    return (path / MANIFEST_FILE).is_file()


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
