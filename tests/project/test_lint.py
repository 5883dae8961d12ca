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


# bench/ modules not yet clean under mypy (typing noise around transformers, numpy and a
# reused loop variable; none is imported by the figures' main benches). Remove a name when
# its file is fixed; every other bench module must stay clean.
BENCH_NOT_YET_TYPED = {"doc_prune.py", "e2e.py", "fit_variants.py", "fuzz_queries.py",
                       "instruct_queries.py", "model_choice.py", "query_encode.py",
                       "sparse_prune.py"}


def test_mypy_is_clean_on_the_benches() -> None:
    """A bench broken by a library change shows here (bench/load.py and hybrid_cost.py once
    assigned to the retriever's read-only ``candidates``: an AttributeError at run time)."""
    files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "bench").glob("*.py")
                   if p.name not in BENCH_NOT_YET_TYPED)
    assert "bench/scale.py" in files and "bench/load.py" in files
    res = _run("mypy", "--follow-imports=silent", *files)
    assert res.returncode == 0, res.stdout + res.stderr
