"""The ``--with-ml`` node flavour without a node: its lock, installation dir, pruning and the
native-library staging (the node itself: tests/cluster/test_incluster.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lr_opensearch.errors import NodeError
from lr_opensearch.node import load_lock
from lr_opensearch.node.install import MARKER, _fetch_pom, home_dir, prune_installations
from lr_opensearch.node.lock import LOCK_PATH, ML_LOCK_PATH
from lr_opensearch.node.ml import ML_SETTINGS, stage_ml_cache

TORCH_DIR = "pytorch/2.5.1-cpu-precxx11-linux-x86_64"


def test_ml_lock_extends_the_lean_lock() -> None:
    lean, ml = load_lock(), load_lock(ML_LOCK_PATH)
    assert (ml.flavour, lean.flavour) == ("ml", "")
    assert ml.artifacts[: len(lean.artifacts)] == lean.artifacts
    assert [p.name for p in ml.plugins] == ["opensearch-knn", "opensearch-neural-search",
                                             "opensearch-job-scheduler", "opensearch-ml"]
    assert ml.version == lean.version and ml.digest != lean.digest
    native = {a.artifact_id: a for a in ml.natives}
    cpu, jni = native["pytorch-native-cpu"], native["pytorch-jni"]
    assert cpu.coordinates == "ai.djl.pytorch:pytorch-native-cpu:2.5.1:jar:linux-x86_64"
    assert cpu.file_name == "pytorch-native-cpu-2.5.1-linux-x86_64.jar"
    assert jni.file_name == "pytorch-jni-2.5.1-0.32.0.jar"
    targets = {t for a in ml.natives for _, t in a.extract}
    assert f"{TORCH_DIR}/0.31.1-libdjl_torch.so" in targets
    assert {f"{TORCH_DIR}/{n}" for n in ("libc10.so", "libtorch.so", "libtorch_cpu.so")} <= targets
    assert all(len(a.sha256) == 64 for a in ml.artifacts)
    assert "<classifier>linux-x86_64</classifier>" in _fetch_pom([cpu])
    assert home_dir(Path("/c"), ml).name.startswith("opensearch-ml-3.6.0-")
    assert home_dir(Path("/c"), lean).name.startswith("opensearch-3.6.0-")
    assert ML_SETTINGS["plugins.ml_commons.only_run_on_ml_node"] is False


def test_ml_lock_digest_covers_its_base(tmp_path: Path) -> None:
    shutil.copy(LOCK_PATH, tmp_path / LOCK_PATH.name)
    shutil.copy(ML_LOCK_PATH, tmp_path / ML_LOCK_PATH.name)
    before = load_lock(tmp_path / ML_LOCK_PATH.name).digest
    base = json.loads((tmp_path / LOCK_PATH.name).read_text())
    base["notes"] = "changed"
    (tmp_path / LOCK_PATH.name).write_text(json.dumps(base))
    assert load_lock(tmp_path / ML_LOCK_PATH.name).digest != before


def test_prune_leaves_the_other_flavour_alone(tmp_path: Path) -> None:
    homes = {n: tmp_path / f"opensearch-{n}" for n in ("lean-old", "lean-new", "ml-3.6.0-x")}
    for name, home in homes.items():
        home.mkdir()
        (home / MARKER).write_text(json.dumps({"flavour": "ml" if "ml-" in name else ""}))
    assert prune_installations(tmp_path, keep=homes["lean-new"]) == [homes["lean-old"]]
    assert homes["ml-3.6.0-x"].exists()


def test_stage_ml_cache_links_once(tmp_path: Path) -> None:
    home, data = tmp_path / "home", tmp_path / "node" / "data"
    with pytest.raises(NodeError, match="--with-ml --force"):
        stage_ml_cache(home, data)
    (home / "ml_cache" / TORCH_DIR).mkdir(parents=True)
    (home / "ml_cache" / TORCH_DIR / "libc10.so").write_bytes(b"x" * 10)
    assert stage_ml_cache(home, data) == 1
    staged = data / "ml_cache" / TORCH_DIR / "libc10.so"
    assert staged.read_bytes() == b"x" * 10
    assert staged.stat().st_ino == (home / "ml_cache" / TORCH_DIR / "libc10.so").stat().st_ino
    assert stage_ml_cache(home, data) == 0
