"""The query side must not import torch or transformers, even indirectly."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

QUERY_SIDE = ["lr_opensearch", "lr_opensearch.bundle.keys", "lr_opensearch.bundle", "lr_opensearch.bundle.files",
              "lr_opensearch.query", "lr_opensearch.query.tokens", "lr_opensearch.query.stopwords",
              "lr_opensearch.search", "lr_opensearch.search.fusion", "lr_opensearch.engine.client",
              "lr_opensearch.engine.templates", "lr_opensearch.cli.bundle",
              "lr_opensearch.ur2n.xtr"]
HEAVY = ["torch", "transformers"]


def heavy_after_importing(modules: list[str], heavy: list[str]) -> list[str]:
    """The ``heavy`` packages a fresh interpreter holds after importing ``modules``."""
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        f"print(json.dumps([m for m in {heavy!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_query_side_leaves_torch_and_transformers_out() -> None:
    present = [m for m in QUERY_SIDE if importlib.util.find_spec(m) is not None]
    assert {"lr_opensearch.bundle.keys", "lr_opensearch.bundle", "lr_opensearch.query"} <= set(present)
    assert heavy_after_importing(present, HEAVY) == []


def test_encoding_a_query_leaves_torch_out(tmp_path) -> None:  # noqa: ANN001
    code = (
        "import json, sys\n"
        "sys.path.insert(0, 'tests')\n"
        "from tiny_artifacts import tiny_bundle\n"
        "from lr_opensearch.bundle import load_bundle\n"
        "from lr_opensearch.query import QueryEncoder\n"
        f"b = load_bundle(tiny_bundle({str(tmp_path / 'b')!r}))\n"
        "q = QueryEncoder(b).encode('what is the capital of france')\n"
        "assert q.dense.shape == (16,)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_bundle_room_imports_neither_torch_nor_scipy() -> None:
    """``lr_opensearch.bundle`` is the artifact only (config, format, files, keys, the store's
    lookups): every module of it imports without torch, transformers or scipy (the workshop
    that builds and fits a bundle is ``lr_opensearch.fit``)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    modules = sorted("lr_opensearch.bundle." + p.stem for p in
                     (root / "lr_opensearch" / "bundle").glob("*.py") if p.stem != "__init__")
    assert "lr_opensearch.bundle.format" in modules
    assert heavy_after_importing(modules, [*HEAVY, "scipy"]) == []
