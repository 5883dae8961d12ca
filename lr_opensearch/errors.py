"""The typed error hierarchy of lr-opensearch.

Every error says what was wrong, where (file, line, document id, node) and what to do.
Catch ``LRError`` to handle anything this library raises on purpose.
"""

from __future__ import annotations


class LRError(Exception):
    """Base class of every error lr-opensearch raises on purpose."""


class ConfigError(LRError):
    """A setting, argument or configuration file is invalid."""


class BundleError(LRError):
    """A model bundle is missing, foreign, corrupt or inconsistent."""


class BundleMismatchError(BundleError):
    """An index was built with a different bundle than the one in use."""


class QueryError(LRError):
    """A query cannot be encoded (empty, tokenizes to nothing, ...)."""


class NodeError(LRError):
    """The local OpenSearch node could not be installed, started or reached."""


class EngineError(LRError):
    """The search engine (OpenSearch / Elasticsearch) refused or failed a request."""


class IngestError(LRError):
    """The ingest worker hit a problem it cannot recover from."""


class IndexRefusedError(IngestError):
    """The index itself refuses documents (closed, write-blocked, deleted): the run stops
    without dead-lettering anything or moving its checkpoint."""


class RequestRefusedError(IngestError):
    """The cluster (or a proxy in front of it) refused a bulk request as a whole (401, 403,
    404, 413 for a request of one small document, ...): the run stops without
    dead-lettering anything or moving its checkpoint."""


class CorpusError(IngestError):
    """A corpus record is malformed. Carries the file and line number."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None):
        where = f"{path}:{line}: " if path is not None and line is not None else ""
        super().__init__(f"{where}{message}")
        self.path = path
        self.line = line


class TrainingError(LRError):
    """Training cannot proceed (bad data, bad config, incompatible checkpoint)."""
