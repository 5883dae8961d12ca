"""Every script under bench/ runs from a fresh ``scripts/setup.sh`` install: each module
imports, and every package it imports (also inside functions) is the standard library, this
project's own code, or a dependency pyproject.toml declares (a package that merely happens to
be on this machine would hide a ModuleNotFoundError elsewhere)."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = REPO / "bench"
BENCH = sorted(BENCH_DIR.glob("*.py"))
OWN = {"lr_opensearch", "ingest", "trainer", "bench"} | {p.stem for p in BENCH} | {
    p.stem for p in (REPO / "tests").glob("*.py")}  # bench scripts import tests' helpers


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared_distributions() -> set[str]:
    """Every distribution pyproject.toml names: dependencies and every extra."""
    import tomllib  # Python 3.11+, as tests/engine/test_templates.py

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        specs += extra
    return {_norm(re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0]) for spec in specs}


def imported_packages(path: Path) -> set[str]:
    """The top-level names of every absolute import in ``path``, wherever it sits."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module.split(".")[0])
    return out


def undeclared(path: Path) -> list[str]:
    """The packages ``path`` imports that are neither the standard library, this project's
    code, nor provided by a distribution pyproject.toml declares."""
    declared = declared_distributions()
    providers = packages_distributions()
    bad = []
    for name in sorted(imported_packages(path) - OWN - set(sys.stdlib_module_names)):
        dists = {_norm(d) for d in providers.get(name, [])}
        if not dists & declared:
            bad.append(f"{path.name} imports {name} (from {sorted(dists) or 'nothing'}), which "
                       "pyproject.toml does not declare")
    return bad


def test_bench_imports_only_declared_packages() -> None:
    bad = [line for path in BENCH for line in undeclared(path)]
    assert not bad, "\n".join(bad)


def test_the_declared_check_can_fail(tmp_path: Path) -> None:
    script = tmp_path / "script.py"
    script.write_text("import numpy\nimport yaml\n\ndef load():\n"
                      "    import not_a_package_anywhere\n    from tqdm import tqdm\n")
    flagged = [line.split(" (")[0] for line in undeclared(script)]
    assert flagged == ["script.py imports not_a_package_anywhere"]


@pytest.mark.parametrize("path", BENCH, ids=[p.name for p in BENCH])
def test_each_bench_module_imports(path: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"bench_import_check_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    path_before, modules_before = list(sys.path), set(sys.modules)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)  # its main() runs only under __main__
    finally:
        # A bench script puts bench/ first on sys.path, where bench/ingest.py would stand in
        # for the ingest package in every later test: undo its path and its imports.
        sys.path[:] = path_before
        for name in set(sys.modules) - modules_before:
            if str(getattr(sys.modules[name], "__file__", None) or "").startswith(str(BENCH_DIR)):
                del sys.modules[name]
        sys.modules.pop(spec.name, None)
    assert sys.path == path_before


def test_importing_the_bench_leaves_the_ingest_package(tmp_path: Path) -> None:
    """After every bench module was imported, ``ingest`` is still the application package
    (bench/ingest.py shares its name)."""
    for path in BENCH:
        test_each_bench_module_imports(path)
    ingest = sys.modules.get("ingest") or importlib.import_module("ingest")
    assert hasattr(ingest, "__path__"), f"'ingest' is {ingest.__file__}, not the package"
