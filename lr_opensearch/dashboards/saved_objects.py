"""Saved objects for OpenSearch Dashboards (or Kibana) that help look at an LR index.

:func:`saved_objects` builds, from the index's mapping and ``_meta``: an index pattern
(every field typed from the mapping; the vector fields marked not searchable and not
aggregatable; the bundle id in a custom label of both vector fields), a saved search of
the text fields, and visualisations (document count, documents per index - one bundle
per index - and the top values of the keyword metadata fields). :func:`to_ndjson` writes
them in the ``_import`` API's format; every reference points at an object of the file.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from lr_opensearch.engine.adapter import DENSE_FIELD, METADATA_FIELD, SPARSE_FIELD, TEXT_FIELDS

KINDS = ("opensearch-dashboards", "kibana")
_TYPES = {"text": "string", "keyword": "string", "match_only_text": "string", "long": "number",
          "integer": "number", "short": "number", "byte": "number", "double": "number",
          "float": "number", "half_float": "number", "scaled_float": "number",
          "boolean": "boolean", "date": "date", "ip": "ip", "geo_point": "geo_point"}
INDEX_REF = "kibanaSavedObjectMeta.searchSourceJSON.index"
MAX_METADATA_CHARTS = 4


def _id(*parts: str) -> str:
    return "lr-" + hashlib.sha1("/".join(parts).encode()).hexdigest()[:16]


def _fields(properties: dict[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Index-pattern field entries for a mapping's properties (keyword sub-fields too)."""
    out = []
    for name, spec in properties.items():
        full = f"{prefix}{name}"
        if "properties" in spec:
            out += _fields(spec["properties"], f"{full}.")
            continue
        kind = spec.get("type", "object")
        vector = full in (DENSE_FIELD, SPARSE_FIELD)
        out.append({"name": full, "type": "unknown" if vector else _TYPES.get(kind, "unknown"),
                    "esTypes": [kind], "searchable": not vector and kind in _TYPES,
                    "aggregatable": kind not in ("text", "match_only_text") and kind in _TYPES,
                    "readFromDocValues": kind in _TYPES and kind not in ("text", "match_only_text"),
                    "count": 0, "scripted": False})
        for sub, sub_spec in spec.get("fields", {}).items():
            sub_kind = sub_spec.get("type", "keyword")
            out.append({"name": f"{full}.{sub}", "type": _TYPES.get(sub_kind, "unknown"),
                        "esTypes": [sub_kind], "searchable": True, "aggregatable": True,
                        "readFromDocValues": True, "count": 0, "scripted": False,
                        "subType": {"multi": {"parent": full}}})
    for meta in ("_id", "_index"):
        if not prefix:
            out.append({"name": meta, "type": "string", "esTypes": [meta], "searchable": True,
                        "aggregatable": True, "readFromDocValues": False, "count": 0,
                        "scripted": False})
    return out


def _search_source(query: str = "") -> str:
    return json.dumps({"query": {"query": query, "language": "kuery"}, "filter": [],
                       "indexRefName": INDEX_REF})


def _visualization(pattern_id: str, vid: str, title: str, vis_type: str,
                   aggs: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    return {"type": "visualization", "id": vid,
            "attributes": {"title": title, "description": "lr-opensearch", "uiStateJSON": "{}",
                           "version": 1,
                           "visState": json.dumps({"title": title, "type": vis_type,
                                                   "aggs": aggs, "params": params}),
                           "kibanaSavedObjectMeta": {"searchSourceJSON": _search_source()}},
            "references": [{"name": INDEX_REF, "type": "index-pattern", "id": pattern_id}]}


def saved_objects(index: str, mapping: dict[str, Any], meta: dict[str, Any], *,
                  pattern: str | None = None, kind: str = "opensearch-dashboards",
                  ) -> list[dict[str, Any]]:
    """The saved objects for ``index`` (``mapping``: its ``mappings``; ``meta``: its
    ``_meta.lightretriever``); ``pattern`` (default the index name) is the index pattern's
    title, e.g. ``lr-*`` to look at several LR indices at once."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    title = pattern or index
    bundle = str(meta.get("bundle_id", "?"))
    pattern_id = _id(kind, "pattern", title)
    fields = _fields(mapping.get("properties", {}))
    labels = {DENSE_FIELD: f"LR dense vector ({meta.get('dense_dim', '?')} dims, bundle {bundle})",
              SPARSE_FIELD: f"LR sparse terms (keys {meta.get('key_encoding', '?')}, bundle {bundle})"}
    objects: list[dict[str, Any]] = [{
        "type": "index-pattern", "id": pattern_id,
        "attributes": {"title": title, "fields": json.dumps(fields),
                       "fieldAttrs": json.dumps({f: {"customLabel": label}
                                                 for f, label in labels.items()})},
        "references": []}]
    columns = [f for f in TEXT_FIELDS if f in mapping.get("properties", {})]
    objects.append({
        "type": "search", "id": _id(kind, "search", title),
        "attributes": {"title": f"LR documents: {title} (bundle {bundle})",
                       "description": f"the text fields of {title}; vectors hidden",
                       "columns": columns or ["_source"], "sort": [], "version": 1,
                       "kibanaSavedObjectMeta": {"searchSourceJSON": _search_source()}},
        "references": [{"name": INDEX_REF, "type": "index-pattern", "id": pattern_id}]})
    count = {"id": "1", "enabled": True, "type": "count", "schema": "metric", "params": {}}
    objects.append(_visualization(pattern_id, _id(kind, "count", title),
                                  f"LR documents: {title}", "metric", [count],
                                  {"addTooltip": True, "addLegend": False}))
    per_index = {"id": "2", "enabled": True, "type": "terms", "schema": "bucket",
                 "params": {"field": "_index", "size": 50, "order": "desc", "orderBy": "1"}}
    objects.append(_visualization(pattern_id, _id(kind, "per-index", title),
                                  f"LR documents per index (one bundle each): {title}", "table",
                                  [count, per_index], {"perPage": 20}))
    keyword_meta = [f["name"] for f in fields
                    if f["name"].startswith(f"{METADATA_FIELD}.") and f["aggregatable"]]
    for name in keyword_meta[:MAX_METADATA_CHARTS]:
        terms = {"id": "2", "enabled": True, "type": "terms", "schema": "segment",
                 "params": {"field": name, "size": 20, "order": "desc", "orderBy": "1"}}
        objects.append(_visualization(pattern_id, _id(kind, "meta", title, name),
                                      f"LR top {name}: {title}", "histogram", [count, terms],
                                      {"addTooltip": True, "addLegend": False}))
    if kind == "kibana":  # Kibana 8 reads these types as they are; say which core wrote them
        for obj in objects:
            obj["coreMigrationVersion"] = "8.8.0"
    return objects


def to_ndjson(objects: list[dict[str, Any]]) -> str:
    """One JSON object per line, as the saved-objects ``_import`` API takes them."""
    return "".join(json.dumps(obj, ensure_ascii=False) + "\n" for obj in objects)


def check_references(objects: list[dict[str, Any]]) -> list[str]:
    """Problems of a set of saved objects: references to objects not in the set."""
    have = {(o["type"], o["id"]) for o in objects}
    return [f"{o['type']} {o['id']} references {r['type']} {r['id']}, which is not exported"
            for o in objects for r in o.get("references", []) if (r["type"], r["id"]) not in have]
