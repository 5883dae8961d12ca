"""Saved objects for OpenSearch Dashboards / Kibana from an index's mapping and ``_meta``
(``lr dashboards export``); see :mod:`lr_opensearch.dashboards.saved_objects`."""

from __future__ import annotations
