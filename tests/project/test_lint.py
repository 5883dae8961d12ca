"""ruff and mypy, as CI runs them (house style: both clean)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *cmd], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_ruff_is_clean() -> None:
    res = _run("ruff", "check", ".")
    assert res.returncode == 0, res.stdout + res.stderr


def test_mypy_is_clean() -> None:
    res = _run("mypy", "lr_opensearch", "ingest", "trainer")
    assert res.returncode == 0, res.stdout + res.stderr
