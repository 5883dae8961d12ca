"""The files a run writes, checked before anything is opened for writing: none may be the
corpus, and none may be an existing file that is not the project's own.

What a run writes: the dead-letter file (appended to), the checkpoint (replaced), the
summary JSON (replaced), all under or beside the state directory. An existing file at one
of those paths is the project's own, and may be written, when it is empty or reads as what
the run would write there:

- a dead-letter file: every complete line is a JSON object with the dead-letter record's
  ``line``, ``kind`` and ``reason`` (a last line without its newline is a killed run's torn
  entry);
- a checkpoint: a JSON object whose ``format`` is the ingest checkpoint's;
- a summary: a JSON object with the summary's ``index``, ``corpus`` and ``counts``.

Anything else (the corpus under another spelling of its path, a link to it, a user's
notes, a directory) is refused with a ``ConfigError`` that names the option and the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lr_opensearch.errors import ConfigError

from .checkpoint import FORMAT, CheckpointFile
from .config import IngestConfig
from .session import dead_letter_path

DEAD_LETTER_KEYS = {"line", "kind", "reason"}
SUMMARY_KEYS = {"index", "corpus", "counts"}


def check_outputs(config: IngestConfig, ck: CheckpointFile | None) -> None:
    """Refuse the run when a file it would write is its corpus or a file not its own.

    Args:
        config: the run's settings.
        ck: the run's checkpoint, when known (None: only the paths the user named).

    Raises:
        ConfigError: naming the option, the file and what to do; nothing was changed.
    """
    corpus = None if config.is_stdin else Path(config.corpus)
    state = Path(config.state_dir)
    if corpus is not None and _same_file(state, corpus):
        raise ConfigError(f"--state-dir {state} is the corpus file; give --state-dir a folder "
                          "(nothing was changed)")
    outputs: list[tuple[str, Path, Callable[[Path], bool]]] = []
    if config.dead_letter is not None or ck is not None or config.is_stdin:
        outputs.append(("--dead-letter", dead_letter_path(config, ck), _is_dead_letter_file))
    if ck is not None:
        outputs.append(("--state-dir", ck.path, _is_checkpoint))
    if config.summary_json is not None:
        outputs.append(("--summary-json", Path(config.summary_json), _is_summary))
    for option, path, ours in outputs:
        if corpus is not None and _same_file(path, corpus):
            raise ConfigError(f"{option} {path} is the corpus file {config.corpus}: the run "
                              f"would overwrite its input. Give {option} another path "
                              "(nothing was changed)")
        if path.is_dir():
            example = {"--dead-letter": "dead-letter.jsonl", "--summary-json": "summary.json"}
            todo = (f"{option} names a file (e.g. {path / example[option]})" if option in
                    example else "move that directory away")
            raise ConfigError(f"{option} {path} is a directory; {todo}. Nothing was changed")
        if path.is_file() and not ours(path):
            raise ConfigError(f"{option} {path} is an existing file that this ingest did not "
                              f"write (not {_what(option)}); it is left as it is. Give "
                              f"{option} a new path, or move the file away (nothing was changed)")


def _same_file(path: Path, other: Path) -> bool:
    try:
        return path.exists() and other.exists() and path.samefile(other)
    except OSError:
        return False


def _what(option: str) -> str:
    return {"--dead-letter": "a dead-letter file of lr-opensearch",
            "--state-dir": "an ingest checkpoint",
            "--summary-json": "an ingest summary"}[option]


def _is_dead_letter_file(path: Path) -> bool:
    """Empty, or dead-letter records (a torn last line allowed)."""
    try:
        with open(path, "rb") as f:
            for raw in f:
                if not raw.endswith(b"\n"):
                    return True  # the torn entry of a killed run
                if not _is_record(raw, DEAD_LETTER_KEYS):
                    return False
    except OSError:
        return False
    return True


def _is_checkpoint(path: Path) -> bool:
    data = _json_of(path)
    return data == {} or (isinstance(data, dict) and data.get("format") == FORMAT)


def _is_summary(path: Path) -> bool:
    data = _json_of(path)
    return data == {} or (isinstance(data, dict) and SUMMARY_KEYS <= data.keys())


def _json_of(path: Path) -> Any:
    """The file's JSON (``{}`` for an empty file), or None when it is not JSON."""
    try:
        text = path.read_bytes()
        return json.loads(text) if text.strip() else {}
    except (OSError, ValueError):
        return None


def _is_record(raw: bytes, keys: set[str]) -> bool:
    try:
        entry = json.loads(raw)
    except ValueError:
        return False
    return isinstance(entry, dict) and keys <= entry.keys()
