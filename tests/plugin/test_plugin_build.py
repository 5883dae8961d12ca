"""``lr plugin build``: one source tree, one zip per packaged OpenSearch version (javac
against that version's own jars), the descriptor the engine checks, the node client's
package of that version, and the cache by source digest."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from lr_opensearch.cli import main as cli_main
from lr_opensearch.cli.plugin import home_version
from lr_opensearch.errors import ConfigError
from lr_opensearch.node import get_engine
from lr_opensearch.plugin.build import (
    CLIENT_PACKAGES,
    PLUGIN_CLASS,
    PLUGIN_NAME,
    build_plugin,
    source_digest,
    source_dir,
)

pytestmark = pytest.mark.node  # needs the installed nodes' jars


def _descriptor(archive: zipfile.ZipFile) -> dict[str, str]:
    text = archive.read("plugin-descriptor.properties").decode()
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line and
                not line.startswith("#"))


@pytest.mark.parametrize("version", get_engine("opensearch").versions)
def test_one_zip_per_engine_version(version: str) -> None:
    built = build_plugin(version)
    assert built.engine_version == version and version in built.zip_path.name
    with zipfile.ZipFile(built.zip_path) as archive:
        names = archive.namelist()
        assert sorted(names) == sorted(["plugin-descriptor.properties",
                                        next(n for n in names if n.endswith(".jar"))])
        props = _descriptor(archive)
        jar_name = next(n for n in names if n.endswith(".jar"))
        with archive.open(jar_name) as raw, zipfile.ZipFile(raw) as jar:
            cluster = jar.read("org/lightretriever/opensearch/Cluster$Handler.class")
            assert jar.read("org/lightretriever/encode/QueryModel.class")
    assert props["opensearch.version"] == version
    assert props["name"] == PLUGIN_NAME and props["classname"] == PLUGIN_CLASS
    major = int(version.split(".")[0])
    package = CLIENT_PACKAGES[major].replace(".", "/").encode()
    assert package + b"node/NodeClient" in cluster
    assert all(package + b"node/NodeClient" not in cluster
               for m, p in CLIENT_PACKAGES.items() if m != major
               for package in [p.replace(".", "/").encode()])
    java = int(props["java.version"])
    assert java == (21 if major == 3 else 11)
    started = time.monotonic()
    assert build_plugin(version).zip_path == built.zip_path  # cached: no javac
    assert time.monotonic() - started < 5


def test_digest_follows_sources_and_version() -> None:
    root = source_dir()
    assert source_digest(root, "3.6.0") != source_digest(root, "2.19.1")
    assert source_digest(root, "3.6.0") == source_digest(root, "3.6.0")


def test_home_version_reads_the_engine_jar(tmp_path: Path) -> None:
    (tmp_path / "lib").mkdir()
    with pytest.raises(ConfigError, match="not an OpenSearch home"):
        home_version(tmp_path)
    (tmp_path / "lib" / "opensearch-core-2.19.1.jar").touch()
    (tmp_path / "lib" / "opensearch-2.19.1.jar").touch()
    assert home_version(tmp_path) == "2.19.1"


def test_lr_plugin_build_prints_the_zip_and_the_install_command(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["plugin", "build"]) == 0
    out = capsys.readouterr().out
    built = build_plugin()
    assert str(built.zip_path) in out and f"install --batch {built.zip_path.as_uri()}" in out


def test_the_wheel_carries_the_plugin_sources(tmp_path: Path) -> None:
    """`lr plugin build` from a pip install: the wheel holds every Java file of the plugin,
    and the installed package finds them with the checkout's source digest."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(root), "--no-deps",
                           "--no-build-isolation", "-q", "-w", str(tmp_path / "wheel")],
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "wheel").glob("lr_opensearch-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    java = sorted(p.relative_to(source_dir()) for p in source_dir().rglob("*.java"))
    packed = site / "lr_opensearch" / "plugin" / "java"
    assert java and sorted(p.relative_to(packed) for p in packed.rglob("*.java")) == java
    assert not packed.is_symlink()
    probe = ("from lr_opensearch.plugin.build import source_dir, source_digest; "
             "print(source_dir()); print(source_digest(source_dir(), '3.6.0'))")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "LR_PLUGIN_SOURCE")}
    got = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path,
                         env={**env, "PYTHONPATH": str(site)}, capture_output=True, text=True,
                         timeout=120, check=False)
    assert got.returncode == 0, got.stderr
    where, digest = got.stdout.split()
    assert Path(where) == packed
    assert digest == source_digest(source_dir(), "3.6.0")
