"""Building the LightRetriever OpenSearch plugin from source: ``javac`` against the installed
node's own jars, one zip per engine version (``lr plugin build``).

The source tree is ``plugin/src/main/java`` of the repository, which the package carries as
``lr_opensearch/plugin/java`` (env ``LR_PLUGIN_SOURCE`` names another). One tree builds for 3.x and 2.x: the only class that names the node client
(``Cluster``) imports it from its 3.x package, and the build rewrites that import for 2.x
(:data:`CLIENT_PACKAGES`). The classes target the oldest Java the engine version runs on
(the node lock's ``java_min_major``: 21 for 3.6.0, 11 for 2.19.1) and are compiled with the
JDK the installer picked for that version.

The zip holds the plugin jar and ``plugin-descriptor.properties`` at its top level; it is
cached in ``<cache>/plugin/`` by engine version and a digest of the sources, so a second
build of the same sources returns at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lr_opensearch.cache import cache_dir
from lr_opensearch.errors import NodeError
from lr_opensearch.node.install import Installation, install
from lr_opensearch.plugin.javac import PLUGIN_SRC
from lr_opensearch.version import __version__

logger = logging.getLogger(__name__)

PLUGIN_NAME = "opensearch-lightretriever"  # as opensearch-knn, opensearch-neural-search
PLUGIN_CLASS = "org.lightretriever.opensearch.LightRetrieverPlugin"
DESCRIPTION = "LightRetriever hybrid search inside the node: text in, fused hits out"
# the node client's package per engine major version (it moved in OpenSearch 3.0)
CLIENT_PACKAGES = {3: "org.opensearch.transport.client.", 2: "org.opensearch.client."}
VERSIONED_CLASS = "org/lightretriever/opensearch/Cluster.java"
BUILD_FORMAT = "2"  # bump when the zip's layout or the plugin's name changes


@dataclass(frozen=True)
class PluginBuild:
    """A built plugin zip for one engine version."""

    zip_path: Path
    engine_version: str
    digest: str  # of the sources, the engine version and the build format


def source_dir() -> Path:
    """The plugin's Java sources (the package's ``plugin/java``, or env ``LR_PLUGIN_SOURCE``)."""
    env = os.environ.get("LR_PLUGIN_SOURCE")
    path = Path(env) if env else PLUGIN_SRC
    if not (path / VERSIONED_CLASS).is_file():
        raise NodeError(f"the plugin's Java sources are not in {path} (no {VERSIONED_CLASS}); "
                        "reinstall lr-opensearch (the wheel carries them), or set "
                        "LR_PLUGIN_SOURCE to a checkout's plugin/src/main/java")
    return path


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.java") if p.is_file())


def source_digest(root: Path, engine_version: str) -> str:
    """sha256 of every source file (path and bytes), the engine version and the build format."""
    h = hashlib.sha256(f"{BUILD_FORMAT}\n{engine_version}\n{__version__}\n".encode())
    for path in _sources(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(path.read_bytes() + b"\0")
    return h.hexdigest()


def _major(version: str) -> int:
    major = int(version.split(".")[0])
    if major not in CLIENT_PACKAGES:
        raise NodeError(f"the plugin builds for OpenSearch {', '.join(f'{m}.x' for m in sorted(CLIENT_PACKAGES))}; "
                        f"got {version}")
    return major


def _stage_sources(root: Path, dest: Path, major: int) -> list[Path]:
    """Copy the sources into ``dest``, the client import rewritten for ``major``."""
    out = []
    for path in _sources(root):
        target = dest / path.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        text = path.read_text(encoding="utf-8")
        if path.relative_to(root).as_posix() == VERSIONED_CLASS:
            text = text.replace(f"import {CLIENT_PACKAGES[3]}", f"import {CLIENT_PACKAGES[major]}")
        target.write_text(text, encoding="utf-8")
        out.append(target)
    return out


def _javac(inst: Installation, sources: list[Path], classes: Path) -> None:
    javac = inst.java.path / "bin" / "javac"
    if not javac.is_file():
        raise NodeError(f"{inst.java.path} is a Java runtime without javac; install the JDK "
                        f"(e.g. apt-get install openjdk-{inst.java.major}-jdk-headless) or set "
                        "LR_JAVA_HOME to one")
    cmd = [str(javac), "--release", str(inst.lock.java_min_major), "-encoding", "UTF-8",
           "-cp", str(inst.home / "lib" / "*"), "-d", str(classes), *map(str, sources)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise NodeError(f"javac failed building the plugin for OpenSearch {inst.version} "
                        f"(exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")


def _descriptor(inst: Installation) -> str:
    return "\n".join([
        "# Written by lr_opensearch.plugin.build", f"description={DESCRIPTION}",
        f"version={__version__}", f"name={PLUGIN_NAME}", f"classname={PLUGIN_CLASS}",
        f"java.version={inst.lock.java_min_major}", f"opensearch.version={inst.version}",
        "custom.foldername=", "extended.plugins=", "has.native.controller=false", ""])


def _write_zip(inst: Installation, classes: Path, dest: Path) -> None:
    jar = dest.with_suffix(".jar.tmp")
    with zipfile.ZipFile(jar, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
        for path in sorted(classes.rglob("*.class")):
            out.write(path, path.relative_to(classes).as_posix())
    tmp = dest.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as out:
        out.write(jar, f"{PLUGIN_NAME}-{__version__}.jar")
        out.writestr("plugin-descriptor.properties", _descriptor(inst))
    jar.unlink()
    tmp.replace(dest)


def build_plugin(version: str | None = None, *, cache: Path | str | None = None,
                 force: bool = False, installation: Installation | None = None) -> PluginBuild:
    """The plugin zip for OpenSearch ``version`` (default the packaged default), built from
    source against that version's jars (installed first if need be) unless cached.

    Raises:
        NodeError: no sources, no javac, or javac refused them (its output in the message).
    """
    inst = installation or install(cache, version=version)
    major = _major(inst.version)
    root = source_dir()
    digest = source_digest(root, inst.version)
    out_dir = cache_dir(cache) / "plugin"
    dest = out_dir / f"{PLUGIN_NAME}-{__version__}-os{inst.version}-{digest[:12]}.zip"
    if dest.is_file() and not force:
        return PluginBuild(dest, inst.version, digest)
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lr-plugin-") as tmp:
        sources = _stage_sources(root, Path(tmp) / "src", major)
        classes = Path(tmp) / "classes"
        _javac(inst, sources, classes)
        _write_zip(inst, classes, dest)
    logger.info("built the LightRetriever plugin for OpenSearch %s: %s", inst.version, dest)
    return PluginBuild(dest, inst.version, digest)

