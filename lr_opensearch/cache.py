"""The cache directory of local nodes and converted models (no dependencies, so any part
of the library can name it without an import circle)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(override: Path | str | None = None) -> Path:
    """The cache directory (nodes, converted models): ``override``, else env ``LR_CACHE_DIR``,
    else ``~/.cache/lr-opensearch``."""
    if override is not None:
        return Path(override).expanduser()
    env = os.environ.get("LR_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lr-opensearch"
