"""docker/stage_artifacts.py's project staging, in the default run: the Docker tier builds
its images from what it writes, so a break here shows before the image builds (CI once
failed every Docker test on a KeyError after pyproject's version became dynamic)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from lr_opensearch.version import __version__

ROOT = Path(__file__).resolve().parents[2]


def _stager():
    spec = importlib.util.spec_from_file_location("stage_artifacts",
                                                  ROOT / "docker" / "stage_artifacts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_project_staging_writes_both_requirement_lists_and_returns_the_version(
        tmp_path: Path) -> None:
    version = _stager().stage_requirements(out_root=tmp_path)
    assert version == __version__
    full = (tmp_path / "project" / "requirements.txt").read_text(encoding="utf-8").split()
    search = (tmp_path / "project" / "requirements-search.txt").read_text(
        encoding="utf-8").split()
    assert any(line.startswith("onnxruntime") for line in full)  # documents on ONNX Runtime
    assert not any(line.startswith(("torch", "transformers")) for line in full + search)
    assert set(search) <= set(full)


def test_the_stager_prints_the_version_as_build_sh_reads_it() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # build.sh's python has the package installed
    done = subprocess.run([sys.executable, "docker/stage_artifacts.py", "project"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == __version__
