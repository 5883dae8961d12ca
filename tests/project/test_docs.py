"""The front door stays true: every relative link in README.md and under docs/ resolves
(file and heading anchor), and every command of README.md and docs/getting-started.md
parses: its ``--help`` runs, and each option it shows is one its help lists."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINKED = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
COMMAND_PAGES = [ROOT / "README.md", ROOT / "docs" / "getting-started.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {slug(m.group(1)) for m in re.finditer(r"(?m)^#{1,6} (.+)$", text)}


def broken_links(path: Path) -> list[str]:
    """The relative links of a Markdown file that point nowhere (file or anchor)."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    bad = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            bad.append(f"{path.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{path.relative_to(ROOT)}: {target} (no such heading)")
    return bad


def test_every_relative_link_resolves() -> None:
    assert len(LINKED) > 10
    bad = [b for path in LINKED for b in broken_links(path)]
    assert not bad, "broken links:\n" + "\n".join(bad)


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# Real heading\n")
    page.write_text("[ok](b.md#real-heading) [gone](c.md) [no](b.md#other) [web](https://x.y)\n"
                    "```\n[in code](ignored.md)\n```\n")
    found = [b.split(": ", 1)[1] for b in broken_links_at(page, tmp_path)]
    assert found == ["c.md (no such file)", "b.md#other (no such heading)"]


def broken_links_at(page: Path, root: Path) -> list[str]:
    global ROOT
    saved, ROOT = ROOT, root
    try:
        return broken_links(page)
    finally:
        ROOT = saved


def commands(path: Path) -> list[str]:
    """Every command of the page's bash blocks (continuations and quoted line breaks
    joined, comments cut, ``a && b`` split)."""
    out, pending = [], ""
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(encoding="utf-8"), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if not pending:
                line = line.split(" #", 1)[0].strip()
                if not line or line.startswith("#"):
                    continue
            pending = f"{pending}\n{line}" if pending else line
            try:
                shlex.split(pending)
            except ValueError:  # a quote spans lines (a JSON body)
                continue
            out += [part.strip() for part in pending.split(" && ")]
            pending = ""
    assert not pending, f"{path.name}: unclosed quote in {pending!r}"
    return out


def help_of(words: list[str]) -> str:
    """The help text of a documented command, with its own words (a bad subcommand or
    choice fails here); raises AssertionError naming the command."""
    shown = " ".join(words)
    if words[0] == "lr":
        from lr_opensearch.cli import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
            main([*words[1:], "--help"])
        assert done.value.code == 0, shown
        return out.getvalue()
    if words[:2] in (["python", "-m"], ["python3", "-m"]):
        run = subprocess.run([sys.executable, *words[1:], "--help"], capture_output=True,
                             text=True, cwd=ROOT, timeout=300)
        assert run.returncode == 0, f"{shown}: {run.stderr[-800:]}"
        return run.stdout
    raise AssertionError(f"no way to check {shown!r}")


@pytest.mark.parametrize("page", COMMAND_PAGES, ids=lambda p: p.name)
def test_every_documented_command_parses(page: Path) -> None:
    found = commands(page)
    assert any(c.startswith("lr ") for c in found), found
    for command in found:
        words = shlex.split(command)
        if words[0] == "bash":  # a script of this repository
            assert (ROOT / words[1]).is_file(), command
            continue
        if words[0] == "curl":  # its JSON body parses (tests/project/test_readme.py runs the bodies)
            body = words[words.index("-d") + 1]
            json.loads(body)
            continue
        text = help_of(words)
        for option in (w.split("=", 1)[0] for w in words if w.startswith("--")):
            assert option in text, f"{command!r}: {option} is not in its --help"


def test_the_command_check_can_fail() -> None:
    with pytest.raises(AssertionError):
        help_of(["lr", "search", "--mode", "no-such-leg", "x"])
    assert "--no-such-option" not in help_of(["lr", "search", "--no-such-option", "x"])
