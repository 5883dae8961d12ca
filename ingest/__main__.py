"""``python -m ingest`` is ``python -m ingest.bulk``."""

from __future__ import annotations

import sys

from ingest.cli import main

if __name__ == "__main__":
    sys.exit(main())
