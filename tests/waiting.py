"""The one wait-for-condition helper of the tests: poll until the event itself (a
checkpoint reached, a node dropped, a page rendered), never a fixed sleep."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def wait_until(condition: Callable[[], T], what: str, *, timeout: float = 240.0,
               pause: float = 0.01, process: subprocess.Popen[Any] | None = None) -> T:
    """Poll ``condition()`` every ``pause`` seconds until it is truthy and return it; fail
    naming ``what`` after ``timeout`` seconds, or as soon as ``process`` (the run whose
    progress is awaited) has ended, with the end of its stderr."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if process is not None and process.poll() is not None:
            err = process.communicate()[1] or b""
            err = err.decode(errors="replace") if isinstance(err, bytes) else err
            raise AssertionError(f"waiting for {what}: the process ended first (exit "
                                 f"{process.returncode}): {err[-2000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(pause)
