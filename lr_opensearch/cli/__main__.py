"""``python -m lr_opensearch.cli ...`` is ``lr ...``."""

from __future__ import annotations

import sys

from lr_opensearch.cli import main

if __name__ == "__main__":
    sys.exit(main())
