"""``lr plugin load``: a bundle's query model into the cluster, and an index's plugin record.

The model reaches every node through an index, never through the nodes' disks:
:data:`MODELS_INDEX` (hidden, one shard, a replica on every node) holds each part of
``artifact.plugin_parts(bundle)`` in chunks of at most :data:`CHUNK_BYTES` (base64 in
``data``), then the bundle's manifest (each part's size, sha256 and chunk count, and a
digest of them all), written last: a node that finds the manifest finds every chunk, and
checks each part's sha256 before it builds the model. ``POST
/_plugins/lightretriever/models/<bundle>/_load`` then has the node that answers build it
(and refuse a model larger than its ``lightretriever.model_cache.max_bytes``); every other
node builds it on its first search.

With ``index``, each concrete index behind it gets ``_meta.lightretriever.plugin``: the
bundle id and model digest (a node holding another digest of the bundle reloads it), the
bundle's fusion weights and semantics, the default candidates, the field names and the
legs' body templates (:mod:`lr_opensearch.plugin.templates`).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from lr_opensearch.engine.clauses import TEXT_QUERY_MAX_TERMS
from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.engine.results import status_of
from lr_opensearch.engine.seismic import SPARSE_VECTOR
from lr_opensearch.engine.templates import META_KEY
from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.options import COMBINATIONS, DEFAULT_CANDIDATES, NORMALIZATIONS, SEMANTICS
from lr_opensearch.plugin.build import PLUGIN_NAME
from lr_opensearch.plugin.templates import leg_templates

logger = logging.getLogger(__name__)

MODELS_INDEX = ".lightretriever-models"
# Bytes of a part per document (base64 makes it 4/3 larger in _source): far below the
# engines' 100mb request limit (engine.clauses.HTTP_MAX_CONTENT_LENGTH) and small enough
# that a node's get of one chunk never holds much more than this in memory at once.
CHUNK_BYTES = 4 * 1024 * 1024
RECORD_KEY = "plugin"  # _meta.lightretriever.plugin
RECORD_FORMAT = 1  # IndexRecord.FORMAT of the plugin
# (a mapping's _meta keeps no key order: the legs' order is the list leg_order)
PLUGIN_BASE = "/_plugins/lightretriever"
MODELS_BODY: dict[str, Any] = {
    "settings": {"index": {"hidden": True, "number_of_shards": 1,
                           "auto_expand_replicas": "0-all"}},
    "mappings": {"dynamic": "strict", "properties": {
        "kind": {"type": "keyword"}, "bundle_id": {"type": "keyword"},
        "part": {"type": "keyword"}, "seq": {"type": "integer"},
        "data": {"type": "binary"}, "digest": {"type": "keyword"},
        "parts": {"type": "object", "enabled": False},
        "written_at": {"type": "date", "format": "epoch_second"}}},
}


def model_digest(parts: Mapping[str, bytes]) -> str:
    """sha256 over every part's name and sha256 (sorted by name)."""
    h = hashlib.sha256()
    for name in sorted(parts):
        h.update(f"{name}\0{hashlib.sha256(parts[name]).hexdigest()}\n".encode())
    return h.hexdigest()


def chunks(data: bytes, size: int = CHUNK_BYTES) -> list[bytes]:
    """``data`` in pieces of at most ``size`` bytes (one empty piece for empty data)."""
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def _call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every client failure says what was being done
        raise EngineError(f"{what} failed: {exc}") from exc


def ensure_models_index(client: Any) -> None:
    """Create :data:`MODELS_INDEX` unless it exists."""
    if _call(f"checking {MODELS_INDEX}", client.indices.exists, index=MODELS_INDEX):
        return
    try:
        client.indices.create(index=MODELS_INDEX, body=MODELS_BODY)
    except Exception as exc:  # noqa: BLE001 - another loader may have created it first
        if "resource_already_exists" not in str(exc):
            raise EngineError(f"creating {MODELS_INDEX} failed: {exc}") from exc


def store_parts(client: Any, bundle_id: str, parts: Mapping[str, bytes],
                chunk_bytes: int = CHUNK_BYTES) -> str:
    """Write ``parts`` into :data:`MODELS_INDEX`, chunked, the manifest last; returns the
    model digest."""
    ensure_models_index(client)
    manifest: dict[str, Any] = {}
    for name, data in parts.items():
        pieces = chunks(data, chunk_bytes)
        for seq, piece in enumerate(pieces):
            doc = {"kind": "chunk", "bundle_id": bundle_id, "part": name, "seq": seq,
                   "data": base64.b64encode(piece).decode("ascii")}
            _call(f"writing chunk {seq} of part {name} of bundle {bundle_id}", client.index,
                  index=MODELS_INDEX, id=f"{bundle_id}/{name}/{seq}", body=doc)
        manifest[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                          "chunks": len(pieces)}
    digest = model_digest(parts)
    _call(f"writing the manifest of bundle {bundle_id}", client.index, index=MODELS_INDEX,
          id=f"{bundle_id}/manifest", refresh="wait_for",
          body={"kind": "manifest", "bundle_id": bundle_id, "digest": digest, "parts": manifest,
                "written_at": int(time.time())})
    return digest


def delete_stored(client: Any, bundle_id: str) -> None:
    """Remove ``bundle_id`` from :data:`MODELS_INDEX`: its manifest first (no node then
    reads the rest), then the chunks it names (by id: the minimal distributions have no
    ``_delete_by_query``)."""
    manifest = f"{bundle_id}/manifest"
    found = _call(f"reading the manifest of bundle {bundle_id}", client.get, index=MODELS_INDEX,
                  id=manifest, ignore=404)
    if not found.get("found"):
        return
    _call(f"removing bundle {bundle_id}", client.delete, index=MODELS_INDEX, id=manifest)
    ops = [{"delete": {"_index": MODELS_INDEX, "_id": f"{bundle_id}/{name}/{seq}"}}
           for name, part in found["_source"]["parts"].items() for seq in range(part["chunks"])]
    _call(f"removing the chunks of bundle {bundle_id}", client.bulk, body=ops, refresh=True)


def node_load(client: Any, bundle_id: str) -> dict[str, Any]:
    """Have the node that answers (re)build ``bundle_id``'s model; its refusal (no plugin, a
    model over its memory bound) as a ConfigError with the node's reason."""
    path = f"{PLUGIN_BASE}/models/{quote(bundle_id, safe='')}/_load"
    try:
        return dict(client.transport.perform_request("POST", path))
    except Exception as exc:  # noqa: BLE001 - the node's JSON error carries the reason
        info = getattr(exc, "info", None)
        reason = (info.get("error", {}).get("reason") if isinstance(info, dict) else None) or exc
        if status_of(exc) in (400, 404, 405) and "no handler" in str(exc).lower():
            reason = ("the cluster has no LightRetriever plugin; install it on every node "
                      "(lr plugin install, docs/PLUGIN.md) and restart them")
        raise ConfigError(f"the cluster refused bundle {bundle_id}: {reason}") from exc


def index_record(adapter: Any, bundle: Any, digest: str, *, candidates: int) -> dict[str, Any]:
    """The ``_meta.lightretriever.plugin`` record for an index of ``bundle``."""
    cfg = bundle.config
    legs = leg_templates(adapter, int(cfg.served_dim))
    weights = {leg: float(w) for leg, w in cfg.weights.items() if w > 0.0}
    missing = sorted(set(weights) - set(legs))
    if missing:
        raise ConfigError(f"bundle {bundle.bundle_id} weighs leg(s) {missing}, which the plugin "
                          f"cannot search (it searches {', '.join(legs)})")
    return {"format": RECORD_FORMAT, "bundle_id": str(bundle.bundle_id), "model_digest": digest,
            "weights": weights, "semantics": cfg.fusion_semantics, "normalization": "min_max",
            "combination": "arithmetic_mean", "rank_constant": 60, "candidates": int(candidates),
            "text_query_max_terms": TEXT_QUERY_MAX_TERMS, "dense_field": adapter.dense_field,
            "sparse_field": adapter.sparse_field, "legs": legs, "leg_order": list(legs),
            "choices": {"semantics": list(SEMANTICS), "normalization": list(NORMALIZATIONS),
                        "combination": list(COMBINATIONS)},
            "loaded_at": int(time.time())}


def write_record(client: Any, index: str, bundle: Any, digest: str, *,
                 candidates: int = DEFAULT_CANDIDATES) -> list[str]:
    """Check that every concrete index behind ``index`` was built for ``bundle`` and write
    its plugin record; returns the indices."""
    adapter = make_adapter(client)
    if not isinstance(adapter, OpenSearchAdapter):
        raise ConfigError("the LightRetriever plugin is an OpenSearch plugin; on Elasticsearch "
                          "search with `lr search` (docs/PLUGIN.md)")
    adapter.check_bundle(index, bundle)
    if adapter.sparse_layout == SPARSE_VECTOR:
        raise ConfigError(f"{index!r} keeps its sparse field in the {SPARSE_VECTOR} layout, "
                          "which the plugin does not search; use an index with rank_features")
    record = index_record(adapter, bundle, digest, candidates=candidates)
    names = sorted(adapter.index_mappings(index))
    for name in names:
        adapter.update_meta(name, META_KEY, lambda old: {**(old or {}), RECORD_KEY: record})
    return names


def load_plugin_model(client: Any, bundle: Any, index: str | None = None, *,
                      instruction: str | None = None,
                      candidates: int | None = None) -> dict[str, Any]:
    """``lr plugin load``: store the bundle's query model, have a node build it, and (with
    ``index``) write the index's plugin record. A model the node refuses is removed again.

    Returns:
        ``{"bundle_id", "digest", "bytes" (the model in the node's memory), "parts" (bytes
        stored), "indices"}``.
    """
    from lr_opensearch.plugin.artifact import plugin_parts

    parts = plugin_parts(bundle, instruction)
    bundle_id = str(bundle.bundle_id)
    digest = store_parts(client, bundle_id, parts)
    try:
        loaded = node_load(client, bundle_id)
    except ConfigError:
        delete_stored(client, bundle_id)
        raise
    indices = (write_record(client, index, bundle, digest,
                            candidates=candidates or DEFAULT_CANDIDATES) if index else [])
    logger.info("bundle %s loaded (%d bytes in the node's memory)%s", bundle_id,
                loaded.get("bytes", 0), f"; plugin record on {', '.join(indices)}" if indices else "")
    return {"bundle_id": bundle_id, "digest": digest, "bytes": loaded.get("bytes"),
            "parts": sum(len(p) for p in parts.values()), "indices": indices}


def plugin_status(client: Any) -> dict[str, Any]:
    """The plugin as the cluster sees it: the nodes that have it, the bundles stored, the
    models the answering node holds."""
    rows = _call("reading _cat/plugins", client.cat.plugins, format="json")
    nodes = sorted({r["name"] for r in rows if r.get("component") == PLUGIN_NAME})
    stored: list[dict[str, Any]] = []
    if _call(f"checking {MODELS_INDEX}", client.indices.exists, index=MODELS_INDEX):
        resp = _call(f"reading {MODELS_INDEX}", client.search, index=MODELS_INDEX, body={
            "query": {"term": {"kind": "manifest"}}, "size": 1000,
            "_source": ["bundle_id", "digest", "parts", "written_at"]})
        stored = [h["_source"] for h in resp["hits"]["hits"]]
    held = None
    if nodes:
        held = _call("reading the node's models", client.transport.perform_request, "GET",
                     f"{PLUGIN_BASE}/models")
    return {"nodes": nodes, "stored": stored, "node_models": held}
