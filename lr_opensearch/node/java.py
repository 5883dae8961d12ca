"""Choosing the JDK that runs the node.

OpenSearch 3.x needs Java 21 or newer; its 3.6 jvm.options are written for 25 (compact
object headers), which is the version the official distribution bundles. OpenSearch 2.x
runs under the Java security manager, which Java 24+ no longer has: 2.19 needs Java 11-21
(the lock's ``max_major``). Order of preference: ``LR_JAVA_HOME`` (must be in range, else
an error), ``JAVA_HOME`` (used if in range, skipped with a warning otherwise), then the
JDK in range found under ``/usr/lib/jvm`` (the preferred major first, then the newest).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lr_opensearch.errors import NodeError

logger = logging.getLogger(__name__)

JVM_ROOTS = (Path("/usr/lib/jvm"), Path("/opt/java"), Path("/usr/local/lib/jvm"))


@dataclass(frozen=True)
class JavaHome:
    """A JDK installation: its directory and major version."""

    path: Path
    major: int
    source: str  # where it came from: LR_JAVA_HOME, JAVA_HOME, /usr/lib/jvm scan


def java_major(home: Path) -> int | None:
    """Major version of the JDK at ``home`` or None if it is not a JDK.

    Reads ``release`` (JAVA_VERSION="25.0.3"); falls back to ``java -version``.
    """
    java = home / "bin" / "java"
    if not java.is_file():
        return None
    release = home / "release"
    text = release.read_text(errors="replace") if release.is_file() else ""
    match = re.search(r'^JAVA_VERSION="(\d+)(?:\.(\d+))?', text, re.MULTILINE)
    if match is None:
        try:
            out = subprocess.run([str(java), "-version"], capture_output=True, text=True,
                                 timeout=30).stderr
        except (OSError, subprocess.TimeoutExpired):
            return None
        match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
        if match is None:
            return None
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def _in_range(major: int | None, min_major: int, max_major: int) -> bool:
    return major is not None and major >= min_major and (not max_major or major <= max_major)


def _range(min_major: int, max_major: int) -> str:
    return f"{min_major}-{max_major}" if max_major else f"{min_major}+"


def _scan(min_major: int, preferred: int, max_major: int = 0) -> JavaHome | None:
    found: list[tuple[int, Path]] = []
    for root in JVM_ROOTS:
        if not root.is_dir():
            continue
        for home in sorted(root.iterdir()):
            if home.is_symlink():  # aliases such as java-1.17.0-openjdk-amd64
                continue
            major = java_major(home)
            if major is not None and _in_range(major, min_major, max_major):
                found.append((major, home))
    if not found:
        return None
    # The preferred major first, then the newest.
    found.sort(key=lambda mh: (mh[0] == preferred, mh[0]), reverse=True)
    major, home = found[0]
    return JavaHome(home, major, f"scan of {home.parent}")


def find_java(min_major: int = 21, preferred: int = 25, max_major: int = 0) -> JavaHome:
    """Pick the JDK for the node.

    Args:
        min_major: the oldest Java major version the pinned engine accepts.
        preferred: the version the engine's distribution bundles (chosen first when scanning).
        max_major: the newest major it runs on (0: no limit).

    Raises:
        NodeError: no suitable JDK, or LR_JAVA_HOME points to an unusable one.
    """
    wanted = _range(min_major, max_major)
    explicit = os.environ.get("LR_JAVA_HOME")
    if explicit:
        major = java_major(Path(explicit))
        if not _in_range(major, min_major, max_major):
            raise NodeError(f"LR_JAVA_HOME={explicit} is not a JDK {wanted} "
                            f"(found major {major}); point it at a Java {wanted} JDK")
        return JavaHome(Path(explicit), int(major or 0), "LR_JAVA_HOME")
    env_home = os.environ.get("JAVA_HOME")
    if env_home:
        major = java_major(Path(env_home))
        if major is not None and _in_range(major, min_major, max_major):
            return JavaHome(Path(env_home), major, "JAVA_HOME")
        logger.warning("JAVA_HOME=%s is Java %s; the node needs %s, looking elsewhere "
                       "(set LR_JAVA_HOME to choose explicitly)", env_home, major, wanted)
    scanned = _scan(min_major, preferred, max_major)
    if scanned is None:
        suggest = max_major or min_major
        raise NodeError(
            f"no Java {wanted} JDK found (looked at LR_JAVA_HOME, JAVA_HOME and "
            f"{', '.join(map(str, JVM_ROOTS))}). Install one, e.g. "
            f"`apt-get install openjdk-{suggest}-jdk-headless`, or set LR_JAVA_HOME.")
    return scanned
