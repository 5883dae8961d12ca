"""The README's two commands are the ones CI and newcomers actually run."""

from __future__ import annotations

import re
from pathlib import Path

from incluster_support import DOCS_WITH_CURLS, text_only_hybrid_curls

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## Two commands.*?```bash\n(.*?)```", text, re.S)
    assert block, "README.md must open with a 'Two commands' section holding a bash block"
    return [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]


def test_readme_has_exactly_two_commands() -> None:
    commands = _readme_commands()
    assert len(commands) == 2, commands
    assert "lr demo" in commands[0]
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command() -> None:
    ci_lines = [ln.strip() for ln in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert _readme_commands()[1] in ci_lines, "keep .ci/run and the README's test command in sync"


def test_setup_script_installs_the_node() -> None:
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "lr_opensearch.node install" in setup
    assert "requirements-models.txt" in setup


def test_the_documented_text_only_hybrid_is_what_lr_search_sends_by_default() -> None:
    """The curl of README.md (and of the docs that show one) asks for the candidates ``lr search
    --in-cluster`` asks for with its defaults (one definition: options.DEFAULT_CANDIDATES):
    the body equals the text-only body built with the search defaults, leg for leg."""
    from lr_opensearch.cluster import text_hybrid_body
    from lr_opensearch.options import DEFAULT_CANDIDATES
    from lr_opensearch.search.request import SearchOptions

    defaults = SearchOptions()
    assert defaults.candidates == DEFAULT_CANDIDATES
    record = {"legs": ["dense", "sparse", "bm25"], "weights": [0.4, 0.2, 0.4],
              "models": {"dense": "D", "sparse": "S"}, "dense_field": "lr_dense",
              "sparse_field": "lr_sparse"}
    curls = text_only_hybrid_curls()
    assert {name for name, *_ in curls} == set(DOCS_WITH_CURLS), curls
    for name, _command, body in curls:
        text = body["query"]["hybrid"]["queries"][0]["neural"]["lr_dense"]["query_text"]
        sent = text_hybrid_body(record, text, size=defaults.k, candidates=defaults.candidates)
        assert text_hybrid_body(record, text) == sent  # its own defaults are the search's
        assert {key: sent[key] for key in body} == body, name
