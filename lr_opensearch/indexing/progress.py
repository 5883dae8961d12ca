"""The progress bar of a run: lines for plain files (counted up front), compressed bytes for
gzip (size known, line count not), plain counting for stdin; docs/s in the postfix."""

from __future__ import annotations

import os
import time
from types import TracebackType
from typing import Any

from lr_opensearch.progress import progress_bar

from .config import IngestConfig
from .gzstream import count_lines, is_gzip
from .reader import CorpusReader

POSTFIX_EVERY_S = 0.5


class Progress:
    """A tqdm bar driven by the reader's position; disabled by ``config.progress=False``."""

    def __init__(self, config: IngestConfig, reader: CorpusReader, *, initial_line: int) -> None:
        self.reader = reader
        self.bar: Any = None
        self._bytes = False
        self._t0 = time.perf_counter()
        self._last_postfix = 0.0
        self._line = initial_line
        if not config.progress:
            return
        desc = f"ingest {config.index}" + (f" [{config.split[0]}/{config.workers}]"
                                           if config.workers > 1 else "")
        if config.is_stdin:
            self.bar = progress_bar(desc=desc, unit="line", dynamic_ncols=True)
        elif is_gzip(config.corpus):
            self._bytes = True
            self.bar = progress_bar(desc=desc, total=os.path.getsize(config.corpus), unit="B",
                            unit_scale=True, dynamic_ncols=True)
        else:
            self.bar = progress_bar(desc=desc, total=count_lines(config.corpus), initial=initial_line,
                            unit="line", dynamic_ncols=True)

    def update(self, encoded: int, *, force: bool = False) -> None:
        """Move the bar to the reader's position; ``encoded`` = documents encoded so far."""
        if self.bar is None:
            return
        if self._bytes:
            pos = self.reader.file_position()
            if pos > self.bar.n:
                self.bar.update(pos - self.bar.n)
        else:
            self.bar.update(1)
        now = time.perf_counter()
        if force or now - self._last_postfix >= POSTFIX_EVERY_S:
            self._last_postfix = now
            rate = encoded / (now - self._t0) if now > self._t0 else 0.0
            self.bar.set_postfix_str(f"{encoded} docs, {rate:.1f} docs/s", refresh=False)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.close()
