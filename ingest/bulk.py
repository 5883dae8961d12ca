"""``python -m ingest.bulk CORPUS --bundle B --index I``: put a corpus into an index.

The app over the library's one indexing call (``lr_opensearch.indexing.run``): argument
parsing and the summary (``ingest.cli``), and ``--workers N`` local worker processes
(``ingest.launcher``). ``lr ingest ...`` is the same command.
"""

from __future__ import annotations

import sys

from ingest.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
