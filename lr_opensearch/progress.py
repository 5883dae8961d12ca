"""Progress bars that read well in a terminal and in a log.

``progress_bar(...)`` takes tqdm's arguments. On a terminal it is a normal tqdm bar. When
stderr is not a terminal (CI, ``lr demo > demo.log``, a job runner), redrawing one line
with carriage returns leaves a log full of half-lines, so each refresh becomes one whole
line instead, at most every ``LR_PROGRESS_INTERVAL`` seconds (default 30), plus the final
state.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Any, TextIO

from tqdm import tqdm

LOG_INTERVAL_S = 30.0


class _LogLines(io.TextIOBase):
    """The file tqdm writes to when stderr is not a terminal: every refresh, one line."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, s: str) -> int:
        text = s.replace("\r", "").replace("\x1b[A", "").strip()
        if text:
            self.stream.write(text + "\n")
            self.stream.flush()
        return len(s)

    def flush(self) -> None:
        self.stream.flush()


def is_terminal(stream: Any = None) -> bool:
    """Whether ``stream`` (default stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def progress_bar(iterable: Any = None, **kwargs: Any) -> tqdm:
    """A tqdm bar on stderr; one line per refresh (every 30 s) when stderr is no terminal."""
    stream = kwargs.pop("file", None) or sys.stderr
    if not is_terminal(stream) and not kwargs.get("disable"):
        interval = float(os.environ.get("LR_PROGRESS_INTERVAL", LOG_INTERVAL_S))
        kwargs["mininterval"] = interval
        kwargs["maxinterval"] = max(interval, kwargs.get("maxinterval", 10.0))
        kwargs["dynamic_ncols"] = False
        kwargs.setdefault("ncols", 100)
        kwargs.setdefault("ascii", True)
        stream = _LogLines(stream)
    return tqdm(iterable, file=stream, **kwargs)
