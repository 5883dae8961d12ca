"""The lock files: every Maven artifact of the local node, pinned with its sha256.

One lock per engine version, next to this module: ``opensearch.lock.json`` (OpenSearch
3.6.0, the default), ``opensearch-2.19.lock.json`` (2.19.1) and ``elasticsearch.lock.json``.
Each is the single record of what that node is made of. Install fetches exactly these coordinates and refuses files whose checksum differs.

A lock may extend another (``"extends": "<file>"``, next to it) and name a ``flavour``:
``opensearch-ml.lock.json`` is the lean OpenSearch lock plus ml-commons and the native
libraries its model runtime needs (``lr node install --with-ml``). Its artifacts follow the
base lock's; its digest covers both files, so each flavour is its own installation.

An engine may have several packaged versions, one lock each
(:attr:`lr_opensearch.node.products.Engine.lock_files`). A lock whose distribution lacks
modules the node needs (OpenSearch 2.19.1's integ-test-zip has only transport-netty4)
lists them under ``modules`` (name -> plugin class, description, extended plugins, security
permissions) and their jars as artifacts of role ``module``; install assembles
``modules/<name>/`` from them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from lr_opensearch.errors import NodeError
from lr_opensearch.node.products import DEFAULT_ENGINE, get_engine

LOCK_PATH = get_engine(DEFAULT_ENGINE).lock_path
ML_LOCK_PATH = LOCK_PATH.with_name("opensearch-ml.lock.json")
LOCK_FORMAT = "lr-opensearch-node-lock"


@dataclass(frozen=True)
class Artifact:
    """One pinned Maven artifact.

    Attributes:
        role: ``distribution`` (the engine's zip), ``plugin`` (installed into it),
            ``module`` (a jar of a module assembled into ``modules/<module>/``) or
            ``native`` (files unpacked from a jar into the installation's ``ml_cache``).
        name: the plugin / distribution name as the engine knows it.
        group_id, artifact_id, version, packaging: Maven coordinates.
        size: file size in bytes.
        sha256: hex digest of the file.
        classifier: Maven classifier ("" for none).
        extract: ``native`` only: (member in the jar, path below ``ml_cache``) pairs.
        module: ``module`` only: the module whose folder the jar goes into.
    """

    role: str
    name: str
    group_id: str
    artifact_id: str
    version: str
    packaging: str
    size: int
    sha256: str
    classifier: str = ""
    extract: tuple[tuple[str, str], ...] = ()
    module: str = ""

    @property
    def coordinates(self) -> str:
        """``groupId:artifactId:version:packaging[:classifier]`` as ``mvn`` accepts it."""
        base = f"{self.group_id}:{self.artifact_id}:{self.version}:{self.packaging}"
        return f"{base}:{self.classifier}" if self.classifier else base

    @property
    def file_name(self) -> str:
        """The file name Maven gives the artifact."""
        tail = f"-{self.classifier}" if self.classifier else ""
        return f"{self.artifact_id}-{self.version}{tail}.{self.packaging}"


@dataclass(frozen=True)
class Module:
    """A module assembled from jars (``modules/<name>/`` of the installation).

    Attributes:
        name: the module's name (its folder and ``name=`` in the descriptor).
        classname: the plugin class the node loads.
        description: the descriptor's description.
        extended_plugins: modules / plugins whose class loader it extends.
        permissions: Java security permissions of its ``plugin-security.policy``
            (none: no policy file).
    """

    name: str
    classname: str
    description: str
    extended_plugins: tuple[str, ...] = ()
    permissions: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeLock:
    """The parsed lock file."""

    engine: str  # "opensearch" | "elasticsearch" (lr_opensearch.node.products)
    version: str  # the engine's version
    java_min_major: int
    java_preferred_major: int
    artifacts: tuple[Artifact, ...]
    digest: str  # sha256 of the lock file itself (and the one it extends): names an installation
    path: Path = LOCK_PATH
    flavour: str = ""  # "" (lean) or "ml" (with ml-commons): installed side by side
    java_max_major: int = 0  # the newest Java the engine runs on (0: no limit known)
    modules: tuple[Module, ...] = ()  # modules assembled from jars (role "module")

    @property
    def natives(self) -> tuple[Artifact, ...]:
        return tuple(a for a in self.artifacts if a.role == "native")

    @property
    def opensearch_version(self) -> str:
        """The engine version (name kept from when OpenSearch was the only engine)."""
        return self.version

    @property
    def distribution(self) -> Artifact:
        return next(a for a in self.artifacts if a.role == "distribution")

    @property
    def plugins(self) -> tuple[Artifact, ...]:
        return tuple(a for a in self.artifacts if a.role == "plugin")


def _artifact(entry: dict, where: str) -> Artifact:
    try:
        return Artifact(
            role=entry["role"], name=entry["name"], group_id=entry["groupId"],
            artifact_id=entry["artifactId"], version=entry["version"],
            packaging=entry["packaging"], size=int(entry["size"]), sha256=entry["sha256"].lower(),
            classifier=entry.get("classifier", ""),
            extract=tuple((str(k), str(v)) for k, v in entry.get("extract", {}).items()),
            module=str(entry.get("module", "")),
        )
    except KeyError as exc:
        raise NodeError(f"{where}: artifact entry {entry!r} lacks field {exc}") from exc


def _modules(data: dict, artifacts: tuple[Artifact, ...], where: str) -> tuple[Module, ...]:
    try:
        modules = tuple(
            Module(name=str(name), classname=str(spec["classname"]),
                   description=str(spec["description"]),
                   extended_plugins=tuple(map(str, spec.get("extended_plugins", ()))),
                   permissions=tuple(map(str, spec.get("permissions", ()))))
            for name, spec in data.get("modules", {}).items())
    except KeyError as exc:
        raise NodeError(f"{where}: a module entry lacks field {exc}") from exc
    names = {m.name for m in modules}
    for artifact in artifacts:
        if (artifact.role == "module") != bool(artifact.module) or (
                artifact.module and artifact.module not in names):
            raise NodeError(f"{where}: artifact {artifact.coordinates} has role "
                            f"{artifact.role!r} and module {artifact.module!r}; a jar of role "
                            "'module' names one of the lock's modules, and only such a jar")
    empty = names - {a.module for a in artifacts}
    if empty:
        raise NodeError(f"{where}: module(s) {sorted(empty)} have no jar (role 'module')")
    return modules


def load_lock(path: Path | str | None = None, *, engine: str | None = None,
              version: str | None = None) -> NodeLock:
    """Read and validate a node lock file.

    Args:
        path: the lock file (default: the packaged lock of ``engine`` and ``version``).
        engine: ``opensearch`` (default) or ``elasticsearch``; with ``path`` given, the
            file must be a lock of that engine.
        version: one of the engine's packaged versions (default: its default version);
            ignored when ``path`` is given.

    Raises:
        NodeError: the file is missing, not JSON, foreign, of another engine, or lacks a
            field.
        ConfigError: ``version`` is not packaged.
    """
    path = Path(path) if path is not None else get_engine(engine).lock_path_for(version)
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise NodeError(f"cannot read node lock file {path}: {exc}") from exc
    if data.get("format") != LOCK_FORMAT:
        raise NodeError(f"{path} is not a node lock file (format {data.get('format')!r}, "
                        f"expected {LOCK_FORMAT!r})")
    artifacts = tuple(_artifact(e, str(path)) for e in data.get("artifacts", []))
    if data.get("extends"):
        base = load_lock(path.with_name(str(data["extends"])), engine=data.get("engine", engine))
        if base.flavour or "extends" in json.loads(base.path.read_bytes()):
            raise NodeError(f"{path}: extends {base.path.name}, which extends another lock; "
                            "one level only")
        return dataclasses.replace(
            base, artifacts=base.artifacts + artifacts, path=path,
            digest=hashlib.sha256(base.digest.encode() + raw).hexdigest(),
            flavour=str(data.get("flavour", "")))
    if sum(a.role == "distribution" for a in artifacts) != 1:
        raise NodeError(f"{path}: exactly one artifact must have role 'distribution'")
    java = data.get("java", {})
    kind = get_engine(data.get("engine", DEFAULT_ENGINE)).name
    if engine is not None and kind != get_engine(engine).name:
        raise NodeError(f"{path} is a lock of engine {kind!r}, not {engine!r}")
    version = data.get("version", data.get("opensearch_version"))
    if not version:
        raise NodeError(f"{path}: field 'version' (the {kind} version) is missing")
    return NodeLock(
        engine=kind,
        version=str(version),
        java_min_major=int(java.get("min_major", 21)),
        java_preferred_major=int(java.get("preferred_major", 21)),
        artifacts=artifacts,
        digest=hashlib.sha256(raw).hexdigest(),
        path=path,
        flavour=str(data.get("flavour", "")),
        java_max_major=int(java.get("max_major", 0)),
        modules=_modules(data, artifacts, str(path)),
    )


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_artifact(path: Path, artifact: Artifact) -> None:
    """Check a downloaded file against the lock.

    Raises:
        NodeError: the file is missing or its size / sha256 differ from the lock.
    """
    if not path.is_file():
        raise NodeError(f"{artifact.coordinates}: expected file {path} is missing")
    size = path.stat().st_size
    if size != artifact.size:
        raise NodeError(f"{artifact.coordinates}: {path} has {size} bytes, the lock says "
                        f"{artifact.size}; delete it and run `lr node install` again")
    actual = sha256_file(path)
    if actual != artifact.sha256:
        raise NodeError(f"{artifact.coordinates}: sha256 of {path} is {actual}, the node lock "
                        f"file (lr_opensearch/node/*.lock.json) says {artifact.sha256}; the "
                        "download is corrupt or the repository serves a different file. "
                        "Delete it and install again.")
