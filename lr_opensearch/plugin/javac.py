"""Compiling the plugin's encoder core (``plugin/src/main/java/org/lightretriever/encode``).

The core is pure JDK, so ``javac --release 11`` alone builds it (no engine jars, no Maven):
the equality tests run its ``EncodeMain`` against :class:`~lr_opensearch.query.QueryEncoder`,
and the plugin build compiles the same sources into the plugin jar. Classes are cached
under ``<cache>/plugin-encoder/<hash of the sources and JDK>``.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from lr_opensearch.cache import cache_dir
from lr_opensearch.errors import ConfigError, NodeError
from lr_opensearch.node.java import JavaHome, find_java

# The plugin's Java sources travel with the package: in a checkout ``java`` is a link to the
# repository's plugin/src/main/java, in a wheel the files themselves (pyproject's
# package-data), so `lr plugin build` works from a pip install too.
PLUGIN_SRC = Path(__file__).resolve().parent / "java"
ENCODER_PACKAGE = "org/lightretriever/encode"
JAVA_RELEASE = 11  # OpenSearch 2.19 runs on Java 11+
ENCODE_MAIN = "org.lightretriever.encode.EncodeMain"


def encoder_sources(src: Path = PLUGIN_SRC) -> list[Path]:
    """The encoder core's Java files (ConfigError when the checkout has none)."""
    files = sorted((src / ENCODER_PACKAGE).glob("*.java"))
    if not files:
        raise ConfigError(f"no Java sources in {src / ENCODER_PACKAGE}; reinstall lr-opensearch "
                          "(the wheel carries them) or set LR_PLUGIN_SOURCE to a checkout's "
                          "plugin/src/main/java")
    return files


def build_jdk() -> JavaHome:
    """A JDK (11 or newer, with javac) to compile with: as the node's JDK is chosen."""
    try:
        home = find_java(min_major=JAVA_RELEASE, preferred=25)
    except NodeError as exc:
        raise ConfigError(f"no JDK to compile the plugin encoder: {exc}") from None
    if not (home.path / "bin" / "javac").is_file():
        raise ConfigError(f"{home.path} ({home.source}) has no bin/javac; install a JDK, not a JRE")
    return home


def compile_encoder(cache: Path | None = None, jdk: JavaHome | None = None) -> Path:
    """Compile the encoder core once per source state and JDK; returns the classes directory."""
    jdk = jdk or build_jdk()
    sources = encoder_sources()
    h = hashlib.sha256(f"{jdk.path}:{jdk.major}:{JAVA_RELEASE}".encode())
    for path in sources:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    out = cache_dir(cache) / "plugin-encoder" / h.hexdigest()[:16]
    if (out / ".done").is_file():
        return out
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(jdk.path / "bin" / "javac"), "--release", str(JAVA_RELEASE), "-Xlint:all", "-Werror",
           "-encoding", "UTF-8", "-d", str(out), *map(str, sources)]
    run = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise ConfigError(f"javac failed on the plugin encoder ({jdk.path}):\n{run.stdout}{run.stderr}")
    (out / ".done").write_text("ok\n")
    return out


def encode_main_command(parts_dir: Path, classes: Path | None = None,
                        jdk: JavaHome | None = None) -> list[str]:
    """The command that runs ``EncodeMain`` on the parts in ``parts_dir`` (texts on stdin)."""
    jdk = jdk or build_jdk()
    classes = classes or compile_encoder(jdk=jdk)
    return [str(jdk.path / "bin" / "java"), "-Xss4m", "-cp", str(classes), ENCODE_MAIN, str(parts_dir)]
