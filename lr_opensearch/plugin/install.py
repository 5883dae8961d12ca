"""Putting the plugin into a node: an existing cluster's node (``lr plugin install --home``,
the engine's own ``bin/opensearch-plugin install --batch file:///...zip``), or the local node
(``lr node install|start --with-plugin``).

The local node with the plugin is its own installation beside the lean one, which stays as
it is (other nodes and test sessions run from it): ``<cache>/plugin-nodes/<lean home>-<zip
digest>``, the lean home's files hard-linked (no copy of the 400 MB) and the plugin installed
into it. A new build of the plugin is a new directory; other builds' homes that no process runs
from and that are a day old are removed.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from lr_opensearch.cache import cache_dir
from lr_opensearch.errors import NodeError
from lr_opensearch.node.install import (
    Installation,
    _in_use,
    _install_lock,
    install,
    install_plugin,
)
from lr_opensearch.plugin.build import PLUGIN_NAME, PluginBuild, build_plugin

logger = logging.getLogger(__name__)

PLUGIN_MARKER = ".lr-plugin.json"
PRUNE_AFTER_S = 24 * 3600  # another build's home is removed when unused and this old


def install_into(home: Path | str, build: PluginBuild, inst: Installation) -> None:
    """Install the built plugin into the engine ``home`` (an OpenSearch of the build's
    version), replacing an older LightRetriever plugin there."""
    home = Path(home)
    tool = home / inst.engine.plugin_tool
    if not tool.is_file():
        raise NodeError(f"{home} is not an OpenSearch home (no {inst.engine.plugin_tool})")
    if (home / "plugins" / PLUGIN_NAME).exists():
        shutil.rmtree(home / "plugins" / PLUGIN_NAME)
    install_plugin(home, build.zip_path, inst.java, inst.engine)


def _link_tree(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, symlinks=True, copy_function=os.link)


def _prune(root: Path, prefix: str, keep: Path) -> None:
    """Remove the other builds' homes of ``prefix`` that no process runs from and that were
    made more than :data:`PRUNE_AFTER_S` ago (another checkout's test session may have made
    one a moment ago and not started it yet)."""
    for other in root.glob(f"{prefix}-*"):
        marker = other / PLUGIN_MARKER
        old = marker.is_file() and time.time() - marker.stat().st_mtime > PRUNE_AFTER_S
        if other != keep and old and not _in_use(other):
            shutil.rmtree(other, ignore_errors=True)


def plugin_installation(cache: Path | str | None = None, *, version: str | None = None) -> Installation:
    """The local node's installation with the plugin (built and installed if need be)."""
    base = install(cache, version=version)
    build = build_plugin(cache=cache, installation=base)
    root = cache_dir(cache) / "plugin-nodes"
    home = root / f"{base.home.name}-{build.digest[:12]}"
    with _install_lock(cache_dir(cache)):
        if not (home / PLUGIN_MARKER).is_file():
            root.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
            try:
                _link_tree(base.home, staging / "home")
                install_into(staging / "home", build, base)
                (staging / "home" / PLUGIN_MARKER).write_text(json.dumps(
                    {"zip": str(build.zip_path), "digest": build.digest, "base": str(base.home)},
                    indent=2))
                shutil.rmtree(home, ignore_errors=True)
                (staging / "home").rename(home)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            logger.info("installed the LightRetriever plugin into %s (%.0f s)", home,
                        time.monotonic() - started)
        _prune(root, base.home.name, keep=home)
    return Installation(home, base.lock, base.java)
