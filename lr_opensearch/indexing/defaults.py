"""What ``python -m ingest.bulk CORPUS`` uses when no index is named: a valid index name
made from the corpus file name."""

from __future__ import annotations

import re
from pathlib import Path

from lr_opensearch.errors import ConfigError

from .config import STDIN

MAX_INDEX_BYTES = 255
SUFFIXES = (".gz", ".jsonl", ".json", ".ndjson")


def default_index_name(corpus: str) -> str:
    """``data/SciFact Corpus.jsonl.gz`` -> ``scifact-corpus``: lowercase letters, digits and
    ``-`` / ``_``, not starting with ``-``, ``_`` or ``+``; a ``corpus`` file takes its
    folder's name too (``scifact/corpus.jsonl`` -> ``scifact-corpus``)."""
    if corpus == STDIN:
        raise ConfigError("reading stdin: name the index with --index (or LR_INDEX)")
    path = Path(corpus)
    name = path.name
    while name.lower().endswith(SUFFIXES):
        name = name[: name.lower().rfind(".")]
    if name.lower() == "corpus" and path.resolve().parent.name:
        name = f"{path.resolve().parent.name}-{name}"
    slug = re.sub(r"[^a-z0-9_]+", "-", name.lower()).strip("-_+") or "corpus"
    return slug[:MAX_INDEX_BYTES]
