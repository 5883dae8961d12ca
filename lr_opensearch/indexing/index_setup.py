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

from lr_opensearch.engine.adapter import VECTOR_FIELDS
from lr_opensearch.engine.seismic import layout_of
from lr_opensearch.errors import ConfigError, IndexRefusedError

from .config import BulkSettings

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.engine.adapter import EngineAdapter

logger = logging.getLogger(__name__)

LOAD_SETTINGS = {"refresh_interval": "-1", "number_of_replicas": 0}
# the index blocks that refuse document writes (index.blocks.*)
WRITE_BLOCKS = ("write", "read_only", "read_only_allow_delete")


def check_target(adapter: EngineAdapter, index: str) -> None:
    """Refuse an ingest target that is an alias: writing through it would change settings
    and documents of indices the user did not name. (Lists and wildcards are refused by
    ``IngestConfig``.)

    Raises:
        ConfigError: ``index`` is an alias, naming its indices.
    """
    targets = adapter.alias_targets(index)
    if targets:
        raise ConfigError(f"{index!r} is an alias (of {', '.join(targets)}), not an index: "
                          "ingest into one index by its name (--index NAME); nothing was "
                          "changed")


def check_writable(adapter: EngineAdapter, index: str) -> None:
    """Refuse, before anything is encoded, an index that cannot take documents: closed, or
    with a write block.

    Raises:
        IndexRefusedError: naming the state or the block and how to lift it.
    """
    if adapter.index_closed(index):
        raise IndexRefusedError(f"index {index!r} is closed, so it takes no documents; open "
                                f"it (POST /{index}/_open) and rerun the same command "
                                "(nothing was written)")
    blocks = adapter.index_settings(index).get("blocks") or {}
    on = [name for name in WRITE_BLOCKS if str(blocks.get(name, "false")).lower() == "true"]
    if on:
        raise IndexRefusedError(
            f"index {index!r} has index.blocks.{on[0]} set, so it takes no documents; lift "
            f"it (PUT /{index}/_settings {{\"index.blocks.{on[0]}\": false}}; a "
            "read_only_allow_delete block is set by the engine when a disk passes the "
            "flood-stage watermark: free space first) and rerun the same command (nothing was "
            "written)")


def check_same_copy(adapter: EngineAdapter, index: str, uuid: str | None) -> None:
    """The index the run writes to is still the copy it started with.

    Raises:
        IndexRefusedError: the index was deleted (and perhaps created again, without the
            LightRetriever mapping, by the engine from this run's own writes).
    """
    if uuid is None:
        return
    if not adapter.index_exists(index):
        raise IndexRefusedError(f"index {index!r} was deleted during the run; rerun with "
                                "--restart to create it again and ingest from the start")
    now = adapter.index_settings(index).get("uuid")
    if now != uuid:
        raise IndexRefusedError(
            f"index {index!r} was deleted during the run and another index of that name is "
            f"there now (uuid {now}, was {uuid}; the engine creates one, without the "
            f"LightRetriever mapping, when documents are written to a missing index): delete "
            f"it (DELETE /{index}) and rerun with --restart")


def check_fields(adapter: EngineAdapter, index: str) -> None:
    """The index's mapping has the vector fields its ``_meta`` promises.

    Raises:
        BundleMismatchError: a field is missing (the index was not made by ``lr index
            create`` / ingest, or its mapping was replaced).
    """
    from lr_opensearch.errors import BundleMismatchError

    properties = adapter.index_mapping(index).get("properties", {})
    missing = [f for f in VECTOR_FIELDS.values() if f not in properties]
    if missing:
        raise BundleMismatchError(
            f"index {index!r} claims to be a LightRetriever index (_meta.lightretriever) but "
            f"its mapping has no {' or '.join(missing)} field; it cannot hold documents: "
            "delete it, or ingest into a new index (nothing was written)")


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
    check_target(adapter, index)
    if adapter.index_exists(index) or not adapter.create_index(index, bundle, **create_opts):
        # (not created: another worker was first)
        adapter.check_bundle(index, bundle)
        check_fields(adapter, index)
        check_writable(adapter, index)
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
