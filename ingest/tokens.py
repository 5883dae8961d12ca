"""``python -m ingest.tokens``: the name the UR²N token-index ingest had first; the code
is :mod:`ingest.token_index`."""

from __future__ import annotations

from ingest.token_index import main

if __name__ == "__main__":
    raise SystemExit(main())
