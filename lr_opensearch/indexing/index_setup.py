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

from opensearchpy.exceptions import RequestError

from .config import BulkSettings

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

LOAD_SETTINGS = {"refresh_interval": "-1", "number_of_replicas": 0}


def ensure_index(client: Any, index: str, bundle: Bundle) -> bool:
    """Create ``index`` for ``bundle`` if absent, else check its ``_meta`` names this bundle.

    Returns:
        True if the index was created by this call.

    Raises:
        BundleMismatchError: the index exists and was built with another bundle (nothing is
            written in that case).
    """
    from lr_opensearch.search.templates import check_index_bundle, create_index

    if client.indices.exists(index=index):
        check_index_bundle(client, index, bundle)
        return False
    try:
        create_index(client, index, bundle)
    except RequestError as exc:  # another worker created it first
        if "resource_already_exists" not in str(exc):
            raise
        check_index_bundle(client, index, bundle)
        return False
    logger.info("created index %s for bundle %s", index, bundle.bundle_id)
    return True


def current_settings(client: Any, index: str) -> dict[str, Any]:
    """The explicitly set ``refresh_interval`` / ``number_of_replicas`` (None = engine default)."""
    body = client.indices.get_settings(index=index)
    settings = next(iter(body.values()))["settings"]["index"]
    return {name: settings.get(name) for name in LOAD_SETTINGS}


def apply_load_settings(client: Any, index: str) -> None:
    client.indices.put_settings(index=index, body={"index": dict(LOAD_SETTINGS)})
    logger.info("index %s: refresh off and 0 replicas during the load", index)


def restore_settings(client: Any, index: str, original: dict[str, Any] | None,
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
    client.indices.put_settings(index=index, body={"index": body})
    logger.info("index %s: settings after the load: %s", index, body)


def final_refresh(client: Any, index: str) -> None:
    client.indices.refresh(index=index)
