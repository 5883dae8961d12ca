"""The document side: read a corpus, encode it with the bundle's document encoder, and
bulk-write it into an index, resumably (checkpoints, dead letters, bulk-load settings).

``run(IngestConfig) -> IngestSummary`` is the one indexing call; ``python -m ingest.bulk``
(the app, with its worker launcher), ``lr eval`` and ``lr demo`` use it. Importing this
package is light; torch is imported only when a run loads the document encoder.
"""

from __future__ import annotations

from lr_opensearch.indexing.config import (
    BulkSettings,
    ConnectionConfig,
    IngestConfig,
    RetryPolicy,
    default_state_dir,
)
from lr_opensearch.indexing.report import IngestSummary
from lr_opensearch.indexing.run import exit_code, run

__all__ = ["BulkSettings", "ConnectionConfig", "IngestConfig", "IngestSummary", "RetryPolicy",
           "default_state_dir", "exit_code", "run"]
