"""Which corpora an index holds: recorded in its ``_meta`` by every run that ingests a corpus
file, so that a default index name (made from the file name) never lands a different corpus
in an index built from another one.

``_meta.lightretriever_corpora`` is a list of ``{name, path, size, sha256}`` (the same file
facts a fitted bundle's manifest records). A corpus is the same as a recorded one when its
resolved path and size match, or its size and sha256 (a copy elsewhere). Only runs whose
index name was *not* given (``IngestConfig.index_named``) are refused; naming the index is
how a user asks for a second corpus in it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lr_opensearch.errors import ConfigError
from lr_opensearch.fit.pseudo import file_facts, fitted_on

if TYPE_CHECKING:
    from lr_opensearch.engine.adapter import EngineAdapter

    from .config import IngestConfig

logger = logging.getLogger(__name__)

CORPORA_KEY = "lightretriever_corpora"  # beside _meta.lightretriever


def recorded_corpora(found: Any) -> list[dict[str, Any]]:
    """The corpora ``_meta.lightretriever_corpora`` (``found``) lists."""
    return [dict(c) for c in found if isinstance(c, dict)] if isinstance(found, list) else []


def check_default_target(adapter: EngineAdapter, config: IngestConfig) -> None:
    """Refuse a run whose index name was made from the corpus file name when that index
    exists and holds other corpora only (nothing is encoded or written).

    Raises:
        ConfigError: naming both corpora and how to ask for the index by name.
    """
    if config.index_named or config.is_stdin or not adapter.index_exists(config.index):
        return
    corpora = recorded_corpora(adapter.meta_value(config.index, CORPORA_KEY))
    if not corpora or fitted_on({"corpora": corpora}, config.corpus):
        return
    held = ", ".join(str(c.get("path", c.get("name"))) for c in corpora)
    raise ConfigError(
        f"index {config.index!r} (the default name for {config.corpus}) already holds another "
        f"corpus ({held}); nothing was written. Name an index for this corpus with --index "
        f"NAME, or add its documents to this one with --index {config.index}")


def record_corpus(adapter: EngineAdapter, config: IngestConfig) -> None:
    """Add this run's corpus file to the index's record (once; one ``update_meta`` of its
    key, so the other ``_meta`` keys written meanwhile are kept)."""
    if config.is_stdin:
        return

    def add(found: Any) -> Any:
        corpora = recorded_corpora(found)
        if corpora and fitted_on({"corpora": corpora}, config.corpus):
            return found
        return [*corpora, file_facts(config.corpus)]

    adapter.update_meta(config.index, CORPORA_KEY, add)
    logger.debug("index %s: corpus %s recorded", config.index, config.corpus)
