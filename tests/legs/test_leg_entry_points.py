"""A leg registered by an installed package (entry-point group ``lr_opensearch.legs``)
reaches every fresh process: the registry, ``lr search``'s modes, ``lr eval``'s runs.

A throwaway distribution (a ``.dist-info`` with ``entry_points.txt`` and its module) is put
on ``PYTHONPATH`` of a subprocess, as ``pip install`` would put it on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

MODULE = '''
from lr_opensearch.legs import QUERY_TEXT, Leg


def _title_query(adapter, text, ctx):
    query = {"match": {"title": text}}
    return {"bool": {"must": [query], "filter": [ctx.filter]}} if ctx.filter else query


TITLE_BM25 = Leg(name="title_bm25", label="BM25 on titles", input=QUERY_TEXT,
                 needs="the query texts", sub_query=_title_query, run="title-bm25")
NOT_A_LEG = "title"
'''

ENTRY_POINTS = """[lr_opensearch.legs]
title_bm25 = lrlegs_example:TITLE_BM25
gone = lrlegs_example:NO_SUCH_NAME
title = lrlegs_example:NOT_A_LEG
"""


def _installed(root: Path) -> dict[str, str]:
    (root / "lrlegs_example.py").write_text(MODULE)
    info = root / "lrlegs_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lrlegs-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(REPO)])}


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=120)


def test_an_installed_leg_reaches_every_app(tmp_path: Path) -> None:
    env = _installed(tmp_path)
    code = ("import json; from lr_opensearch import legs; "
            "from lr_opensearch.evaluation.config import run_names; "
            "print(json.dumps([legs.names(), run_names()]))")
    out = _run(env, "-c", code)
    assert out.returncode == 0, out.stderr
    names, runs = json.loads(out.stdout)
    assert names[:3] == ["dense", "sparse", "bm25"] and names[-1] == "title_bm25"
    assert "title-bm25" in runs  # lr eval's one-leg run of it
    # the two broken entry points are left out, each with a warning naming it and its package
    assert "gone" not in names and "title" not in names
    assert "'gone' (lrlegs_example:NO_SUCH_NAME) of package lrlegs-example 0.1" in out.stderr
    assert "does not load" in out.stderr and "fix or uninstall" in out.stderr
    assert "'title'" in out.stderr and "must name a lr_opensearch.legs.Leg" in out.stderr
    helped = _run(env, "-m", "lr_opensearch.cli", "search", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "title_bm25" in helped.stdout  # a --mode of lr search


def test_without_the_package_only_the_library_legs() -> None:
    out = _run({**os.environ, "PYTHONPATH": str(REPO)}, "-c",
               "from lr_opensearch import legs; print(','.join(legs.names()))")
    assert out.returncode == 0, out.stderr
    assert "title_bm25" not in out.stdout.split(",")
