"""``python -m lr_opensearch.node ...``: the same commands as ``lr node ...``."""

from __future__ import annotations

import sys

from lr_opensearch.cli.node import main

if __name__ == "__main__":
    sys.exit(main())
