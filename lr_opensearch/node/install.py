"""Installing OpenSearch + plugins (or Elasticsearch) from Maven Central with ``mvn``.

The artifacts named in the engine version's lock (``opensearch.lock.json``,
``opensearch-2.19.lock.json`` or ``elasticsearch.lock.json``) are copied by ``mvn dependency:copy-dependencies`` (the
ordinary Maven client, honouring the user's ``~/.m2/settings.xml`` mirrors and proxies)
into ``<cache>/artifacts``, checked against the lock's sha256, unpacked into
``<cache>/<engine>-<version>-<lock digest>`` and the plugins (if any) are installed with the
distribution's own ``bin/<engine>-plugin``, after the modules the lock assembles from jars
(if any) are written into ``modules/``. The installation is complete only when its
marker file exists; a second install with the same lock returns at once.

``ml=True`` installs the ``ml`` flavour (``opensearch-ml.lock.json``: ml-commons and the
native libraries of its model runtime, unpacked into ``<home>/ml_cache``) beside the lean
one; the two never prune each other. Nor do installations of two packaged versions
(``version="2.19.1"`` beside the default 3.6.0).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from lr_opensearch.cache import cache_dir
from lr_opensearch.errors import NodeError
from lr_opensearch.node.java import JavaHome, find_java
from lr_opensearch.node.lock import (
    ML_LOCK_PATH,
    Artifact,
    NodeLock,
    load_lock,
    verify_artifact,
)
from lr_opensearch.node.products import Engine, get_engine

logger = logging.getLogger(__name__)

MARKER = ".lr-installed.json"
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"


@dataclass(frozen=True)
class Installation:
    """An installed engine home (OpenSearch with its plugins, or Elasticsearch)."""

    home: Path
    lock: NodeLock
    java: JavaHome

    @property
    def version(self) -> str:
        return self.lock.version

    @property
    def engine(self) -> Engine:
        return get_engine(self.lock.engine)

    @property
    def ml(self) -> bool:
        """True for the installation with ml-commons (``--with-ml``)."""
        return self.lock.flavour == "ml"


def home_dir(cache: Path, lock: NodeLock) -> Path:
    """Where the installation for ``lock`` lives inside ``cache``."""
    flavour = f"{lock.flavour}-" if lock.flavour else ""
    return cache / f"{lock.engine}-{flavour}{lock.version}-{lock.digest[:10]}"


def _select_lock(lock: NodeLock | None, engine: str | None, ml: bool,
                 version: str | None = None) -> NodeLock:
    if lock is not None:
        return lock
    kind = get_engine(engine)
    if ml:
        if kind.name != "opensearch":
            raise NodeError(f"--with-ml installs OpenSearch's ml-commons; {kind.display} "
                            "has no such plugin (see docs: in-cluster encoding on Elasticsearch)")
        ml_lock = load_lock(ML_LOCK_PATH)
        if kind.version(version) != ml_lock.version:
            raise NodeError(f"--with-ml is packaged for OpenSearch {ml_lock.version} only; "
                            f"drop --with-ml or --version {version}")
        return ml_lock
    return load_lock(engine=engine, version=version)


@contextmanager
def _install_lock(cache: Path) -> Iterator[None]:
    """Serialise installs into one cache (several test sessions may start together)."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".install.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _fetch_pom(artifacts: list[Artifact]) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{a.group_id}</groupId><artifactId>{a.artifact_id}</artifactId>"
        f"<version>{a.version}</version><type>{a.packaging}</type>"
        + (f"<classifier>{a.classifier}</classifier>" if a.classifier else "") + "</dependency>"
        for a in artifacts)
    return ("<project xmlns=\"http://maven.apache.org/POM/4.0.0\">\n"
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>lr-opensearch</groupId><artifactId>node-fetch</artifactId>"
            "<version>1</version><packaging>pom</packaging>\n"
            f"  <dependencies>\n{deps}\n  </dependencies>\n</project>\n")


def fetch_artifacts(artifacts: list[Artifact], dest: Path, *, mvn: str | None = None) -> None:
    """Copy ``artifacts`` from Maven (Central or the user's mirror) into ``dest`` with one mvn run.

    Raises:
        NodeError: mvn is missing or fails (its output tail is in the message).
    """
    mvn = mvn or os.environ.get("LR_MVN") or shutil.which("mvn")
    if not mvn:
        raise NodeError("`mvn` (Apache Maven) is not on PATH; install it (apt-get install maven) "
                        "or set LR_MVN to its path")
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="lr-mvn-") as tmp:
        pom = Path(tmp) / "pom.xml"
        pom.write_text(_fetch_pom(artifacts))
        cmd = [mvn, "-B", "--no-transfer-progress", "-f", str(pom),
               f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={dest}",
               "-DexcludeTransitive=true", "-Dmdep.overWriteReleases=true"]
        total = sum(a.size for a in artifacts) / 1e6
        logger.info("fetching %d artifact(s), %.0f MB, with %s: %s", len(artifacts), total,
                    mvn, ", ".join(a.coordinates for a in artifacts))
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
        raise NodeError(f"mvn failed (exit {proc.returncode}) fetching "
                        f"{[a.coordinates for a in artifacts]}. Is Maven Central (or your "
                        f"mirror in ~/.m2/settings.xml) reachable?\n{tail}")


def _ensure_artifacts(lock: NodeLock, cache: Path, mvn: str | None) -> dict[str, Path]:
    store = cache / "artifacts"
    paths = {a.coordinates: store / a.file_name for a in lock.artifacts}
    missing = []
    for artifact in lock.artifacts:
        path = paths[artifact.coordinates]
        try:
            verify_artifact(path, artifact)
        except NodeError as exc:
            if path.exists():
                logger.warning("%s; fetching it again", exc)
            missing.append(artifact)
    if missing:
        fetch_artifacts(missing, store, mvn=mvn)
    for artifact in lock.artifacts:
        verify_artifact(paths[artifact.coordinates], artifact)
    return paths


def _unpack_distribution(zip_path: Path, dest: Path, engine: Engine) -> Path:
    with zipfile.ZipFile(zip_path) as archive:
        archive.extractall(dest)
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
    for name, mode in modes.items():  # zipfile drops the exec bits; restore them
        if mode & 0o111:
            os.chmod(dest / name, mode & 0o7777)
    tops = [p for p in dest.iterdir() if p.is_dir()]
    if len(tops) != 1 or not (tops[0] / engine.launcher).is_file():
        raise NodeError(f"{zip_path} does not look like an {engine.display} distribution "
                        f"(no single top folder with {engine.launcher})")
    return tops[0]


def install_plugin(home: Path, plugin_zip: Path, java: JavaHome, engine: Engine) -> None:
    """Install ``plugin_zip`` into the engine ``home`` with its own ``bin/<engine>-plugin``."""
    env = dict(os.environ, JAVA_HOME=str(java.path))
    env[f"{engine.env_prefix}JAVA_HOME"] = str(java.path)
    env.pop(f"{engine.env_prefix}JAVA_OPTS", None)
    cmd = [str(home / engine.plugin_tool), "install", "--batch", plugin_zip.as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=home)
    if proc.returncode != 0:
        raise NodeError(f"installing plugin {plugin_zip.name} into {home} failed "
                        f"(exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")


def _in_use(home: Path) -> bool:
    """True if a running process was started from ``home`` (its command line names it)."""
    needle = str(home).encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if needle in (proc / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
    return False


def _flavour(home: Path) -> str | None:
    try:
        return str(json.loads((home / MARKER).read_text()).get("flavour", ""))
    except (OSError, ValueError):
        return None


def _write_modules(top: Path, lock: NodeLock, paths: dict[str, Path]) -> None:
    """Assemble ``<top>/modules/<name>/`` for each module the lock builds from jars: its
    jars, ``plugin-descriptor.properties`` and, if it has permissions,
    ``plugin-security.policy``."""
    java = lock.java_min_major
    for module in lock.modules:
        folder = top / "modules" / module.name
        if folder.exists():
            raise NodeError(f"{lock.distribution.coordinates} already has module "
                            f"{module.name}; remove it from `modules` in {lock.path.name}")
        folder.mkdir(parents=True)
        for artifact in lock.artifacts:
            if artifact.module == module.name:
                shutil.copyfile(paths[artifact.coordinates], folder / artifact.file_name)
        (folder / "plugin-descriptor.properties").write_text("\n".join([
            "# Written by lr-opensearch from the node lock (modules assembled from jars)",
            f"description={module.description}", f"version={lock.version}",
            f"name={module.name}", f"classname={module.classname}",
            f"java.version={java}", f"opensearch.version={lock.version}",
            "custom.foldername=", f"extended.plugins={','.join(module.extended_plugins)}",
            "has.native.controller=false", ""]))
        if module.permissions:
            grants = "".join(f"  permission {p};\n" for p in module.permissions)
            (folder / "plugin-security.policy").write_text(f"grant {{\n{grants}}};\n")


def _extract_natives(top: Path, lock: NodeLock, paths: dict[str, Path]) -> None:
    """Unpack the ``native`` artifacts' files into ``<top>/ml_cache`` (as the lock maps them)."""
    for artifact in lock.natives:
        with zipfile.ZipFile(paths[artifact.coordinates]) as jar:
            for member, target in artifact.extract:
                dest = top / "ml_cache" / target
                dest.parent.mkdir(parents=True, exist_ok=True)
                try:
                    with jar.open(member) as src, open(dest, "wb") as out:
                        shutil.copyfileobj(src, out, 1 << 20)
                except KeyError:
                    raise NodeError(f"{artifact.coordinates} has no {member} (lock "
                                    f"{lock.path.name}, field extract)") from None


def _version(home: Path) -> str | None:
    try:
        return str(json.loads((home / MARKER).read_text()).get("version", ""))
    except (OSError, ValueError):
        return None


def prune_installations(cache: Path, keep: Path, engine: str | None = None,
                        flavour: str = "", version: str | None = None) -> list[Path]:
    """Remove other installations of ``engine`` and ``flavour`` in ``cache`` that no running
    process uses, except those of the engine's other packaged versions.

    Args:
        cache: the cache directory.
        keep: the current installation.
        engine: whose installations to prune (default OpenSearch); others are left alone.
        flavour: only installations of this flavour ("" lean, "ml") are pruned.
        version: the version of ``keep`` (default: the engine's default version); the
            installations of the engine's other packaged versions stay.

    Returns:
        The removed directories.
    """
    kind = get_engine(engine)
    others = set(kind.versions) - {version or kind.default_version}
    removed = []
    for home in sorted(cache.glob(f"{kind.name}-*")):
        if home == keep or not (home / MARKER).is_file() or _in_use(home):
            continue
        if _flavour(home) != flavour or _version(home) in others:
            continue
        shutil.rmtree(home, ignore_errors=True)
        removed.append(home)
        logger.info("removed the superseded installation %s", home)
    return removed


def installed(cache: Path | str | None = None, lock: NodeLock | None = None, *,
              engine: str | None = None, ml: bool = False,
              version: str | None = None) -> Path | None:
    """The installed home for ``lock`` (default: the lock of ``engine`` and ``version``, the
    ml one with ``ml``) if complete, else None."""
    lock = _select_lock(lock, engine, ml, version)
    home = home_dir(cache_dir(cache), lock)
    marker = home / MARKER
    if not marker.is_file():
        return None
    try:
        recorded = json.loads(marker.read_text()).get("lock_digest")
    except ValueError:
        return None
    return home if recorded == lock.digest else None


def install(cache: Path | str | None = None, *, engine: str | None = None,
            lock: NodeLock | None = None, mvn: str | None = None,
            force: bool = False, ml: bool = False, version: str | None = None) -> Installation:
    """Install the pinned engine (OpenSearch + plugins by default) into the cache (idempotent).

    Args:
        cache: cache directory (default: ``cache_dir()``).
        engine: ``opensearch`` (default) or ``elasticsearch``; selects the packaged lock.
        lock: the lock to install (default: the packaged lock of ``engine`` and ``version``).
        mvn: path to ``mvn`` (default: env LR_MVN or PATH).
        force: reinstall even when a complete installation exists.
        ml: the ``ml`` flavour (OpenSearch with ml-commons, ``opensearch-ml.lock.json``).
        version: a packaged version of ``engine`` (``2.19.1`` or ``2.19``; default: the
            engine's default version, 3.6.0 for OpenSearch).

    Returns:
        The installation (home directory, lock, JDK).
    """
    lock = _select_lock(lock, engine, ml, version)
    kind = get_engine(lock.engine)
    cache = cache_dir(cache)
    java = find_java(lock.java_min_major, lock.java_preferred_major, lock.java_max_major)
    home = home_dir(cache, lock)
    with _install_lock(cache):
        if not force and installed(cache, lock) is not None:
            logger.info("%s %s already installed in %s", kind.display, lock.version, home)
            return Installation(home, lock, java)
        started = time.monotonic()
        paths = _ensure_artifacts(lock, cache, mvn)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=cache))
        try:
            logger.info("unpacking %s", lock.distribution.coordinates)
            top = _unpack_distribution(paths[lock.distribution.coordinates], staging, kind)
            _write_modules(top, lock, paths)
            for plugin in lock.plugins:
                logger.info("installing plugin %s", plugin.coordinates)
                install_plugin(top, paths[plugin.coordinates], java, kind)
            _extract_natives(top, lock, paths)
            (top / MARKER).write_text(json.dumps({
                "lock_digest": lock.digest, "engine": kind.name, "version": lock.version,
                "flavour": lock.flavour,
                "artifacts": [a.coordinates for a in lock.artifacts],
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, indent=2))
            if home.exists():
                shutil.rmtree(home)
            top.rename(home)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        logger.info("installed %s %s with %s in %s (%.0f s)", kind.display, lock.version,
                    ", ".join(p.name for p in lock.plugins) or "no plugins", home,
                    time.monotonic() - started)
        prune_installations(cache, keep=home, engine=kind.name, flavour=lock.flavour,
                            version=lock.version)
    return Installation(home, lock, java)
