"""The ``ml`` flavour of the local node: OpenSearch with ml-commons (``--with-ml``).

``lr node install --with-ml`` installs ``opensearch-ml.lock.json`` (the lean node plus
job-scheduler, ml-commons and DJL's libtorch files) beside the lean installation. At every
start of such a node:

* the ml-commons settings below are written into ``opensearch.yml`` (models run on this
  data node, may be registered from an upload, and are not refused by the memory circuit
  breakers of a small developer node);
* the libtorch files unpacked at install time (``<home>/ml_cache``) are hard-linked (copied
  across file systems) into ``<path.data>/ml_cache``, where DJL looks for them before it
  would try to download them: a model deploys with no network.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from lr_opensearch.errors import NodeError

logger = logging.getLogger(__name__)

ML_CACHE = "ml_cache"

#: opensearch.yml settings of a node started from the ml installation.
ML_SETTINGS: Mapping[str, object] = MappingProxyType({
    "plugins.ml_commons.only_run_on_ml_node": False,
    "plugins.ml_commons.allow_registering_model_via_url": True,
    "plugins.ml_commons.allow_registering_model_via_local_file": True,
    "plugins.ml_commons.native_memory_threshold": 100,
    "plugins.ml_commons.jvm_heap_memory_threshold": 100,
    "plugins.ml_commons.model_access_control_enabled": False,
})


def stage_ml_cache(home: Path, data_dir: Path) -> int:
    """Link the installation's native model-runtime files into ``<data_dir>/ml_cache``.

    Args:
        home: the ml installation (holds ``ml_cache/`` from install time).
        data_dir: the node's ``path.data``.

    Returns:
        How many files were linked or copied (0 when all were already there).

    Raises:
        NodeError: the installation has no ``ml_cache`` (a lean or broken installation).
    """
    source = home / ML_CACHE
    if not source.is_dir():
        raise NodeError(f"{home} has no {ML_CACHE}/: it is not a complete --with-ml installation; "
                        "run `lr node install --with-ml --force`")
    staged = 0
    for path in sorted(p for p in source.rglob("*") if p.is_file()):
        dest = data_dir / ML_CACHE / path.relative_to(source)
        if dest.is_file() and dest.stat().st_size == path.stat().st_size:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.unlink(missing_ok=True)
        try:
            os.link(path, dest)
        except OSError:  # another file system: copy (hundreds of MB, once per node dir)
            shutil.copyfile(path, dest)
        staged += 1
    if staged:
        logger.info("linked %d model-runtime file(s) into %s", staged, data_dir / ML_CACHE)
    return staged
