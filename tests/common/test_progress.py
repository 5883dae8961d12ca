"""Progress bars in a log: one whole line per refresh when stderr is not a terminal, the
usual redrawn bar when it is (a pseudo-terminal here)."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

SCRIPT = """
from lr_opensearch.progress import progress_bar
for _ in progress_bar(range(40), desc="work", unit="item"):
    pass
"""


def _log_lines(interval: str) -> list[str]:
    """The bar's stderr lines when stderr is a pipe, refreshed at most every ``interval`` s
    (no clock in the test: 0 refreshes on every item, a day never between start and end)."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=60, check=True,
                          env={**os.environ, "LR_PROGRESS_INTERVAL": interval})
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert all(line.startswith("work:") and "/40" in line for line in lines)
    assert "100%" in lines[-1] and "40/40" in lines[-1]
    return lines


def test_a_log_gets_whole_lines_not_redraws() -> None:
    assert len(_log_lines("0")) > 40  # a whole line per refresh
    assert len(_log_lines("86400")) == 2  # the interval holds refreshes back: start and end


def test_a_terminal_gets_the_redrawn_bar() -> None:
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    out = b""
    try:
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stderr=follower,
                                stdout=subprocess.DEVNULL)
        os.close(follower)
        while True:  # read while it runs: a full pty buffer would block the child
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed its end
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
    assert b"\r" in out and b"40/40" in out
