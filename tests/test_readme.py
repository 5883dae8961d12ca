"""The README's two commands are the ones CI and newcomers actually run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
