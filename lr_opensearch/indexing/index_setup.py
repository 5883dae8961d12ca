"""The target index before and after a load: creation, bundle check, bulk-load settings.

During a load ``refresh_interval`` is ``-1`` (no periodic refresh) and
``number_of_replicas`` is 0; afterwards the values found before the load come back (or the
ones asked for) and the index is refreshed, so every document is searchable when the
command returns. The values found before are saved in the checkpoint *before* they are
changed, so a run killed mid-load restores the user's values, not ``-1``, when rerun.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from lr_opensearch.engine.seismic import layout_of
from lr_opensearch.errors import ConfigError

from .config import BulkSettings

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.engine.adapter import EngineAdapter

logger = logging.getLogger(__name__)

LOAD_SETTINGS = {"refresh_interval": "-1", "number_of_replicas": 0}


def ensure_index(adapter: EngineAdapter, index: str, bundle: Bundle,
                 **create_opts: Any) -> bool:
    """Create ``index`` for ``bundle`` if absent (``create_opts``: the index template's,
    e.g. ``sparse_layout``, see ``adapter.index_body``), else check its ``_meta`` names
    this bundle.

    Returns:
        True if the index was created by this call.

    Raises:
        BundleMismatchError: the index exists and was built with another bundle (nothing is
            written in that case).
    """
    if adapter.index_exists(index):
        adapter.check_bundle(index, bundle)
        return False
    if not adapter.create_index(index, bundle, **create_opts):  # another worker was first
        adapter.check_bundle(index, bundle)
        return False
    return True


def index_layout(adapter: EngineAdapter, index: str, wanted: str | None = None) -> str:
    """The sparse layout ``index`` records (``lr_opensearch.engine.seismic``); the documents
    are written for it.

    Raises:
        ConfigError: ``wanted`` (a layout asked for) is not the existing index's.
    """
    layout = layout_of(adapter.index_meta(index))
    if wanted is not None and wanted != layout:
        raise ConfigError(f"index {index!r} exists with the {layout} sparse layout, not "
                          f"{wanted}; ingest into a new index for {wanted} (or leave "
                          "--sparse-layout out)")
    return layout


def current_settings(adapter: EngineAdapter, index: str) -> dict[str, Any]:
    """The explicitly set ``refresh_interval`` / ``number_of_replicas`` (None = engine default)."""
    settings = adapter.index_settings(index)
    return {name: settings.get(name) for name in LOAD_SETTINGS}


def apply_load_settings(adapter: EngineAdapter, index: str) -> None:
    adapter.put_index_settings(index, LOAD_SETTINGS)
    logger.info("index %s: refresh off and 0 replicas during the load", index)


def restore_settings(adapter: EngineAdapter, index: str, original: dict[str, Any] | None,
                     wanted: BulkSettings) -> None:
    """Put back the settings found before the load, or the ones the user asked for.

    A value that was not set explicitly before is reset to the engine default (null).
    """
    original = original or {}
    body = {
        "refresh_interval": (wanted.refresh_interval if wanted.refresh_interval is not None
                             else original.get("refresh_interval")),
        "number_of_replicas": (wanted.replicas if wanted.replicas is not None
                               else original.get("number_of_replicas")),
    }
    adapter.put_index_settings(index, body)
    logger.info("index %s: settings after the load: %s", index, body)


def final_refresh(adapter: EngineAdapter, index: str) -> None:
    """Refresh; an index of the ``sparse_vector`` layout then fills its companion index
    (``OpenSearchAdapter.sync_sparse_index``)."""
    adapter.refresh(index)
    sync = getattr(adapter, "sync_sparse_index", None)
    if sync is not None:
        sync(index)
