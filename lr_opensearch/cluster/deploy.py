"""``lr models deploy``: a bundle's query side served by the cluster itself.

:func:`deploy_bundle` exports the two model zips (:mod:`lr_opensearch.cluster.export`),
uploads them in chunks unless the cluster already holds them (a model is found by its name,
which carries the bundle id and the zip's hash), deploys them and waits. With an index it
then records the model ids in the index's ``_meta.lightretriever.cluster``, and writes the
search pipeline ``lr-incluster-<bundle>-<weights>``: a ``neural_query_enricher`` (the model
ids per field, so requests carry only the text) plus the normalization of the bundle's
weights; optionally it becomes the index's ``index.search.default_pipeline``.

Idempotent: the same bundle and options give the same zips, hence the same models; running
it again deploys what is not served (undeployed, failed, or not yet back after a node
restart: ml-commons redeploys the models that were deployed by itself, seconds after the
node starts, and deploy waits for such a redeploy in flight) and uploads nothing.
"""

from __future__ import annotations

import datetime as _dt
import logging
from typing import Any

from lr_opensearch import legs
from lr_opensearch.bundle import Bundle
from lr_opensearch.cluster.export import (
    ModelZip,
    cluster_max_tokens,
    export_dense,
    export_sparse,
)
from lr_opensearch.cluster.lease import lease
from lr_opensearch.engine import mlapi
from lr_opensearch.engine.adapter import DENSE_FIELD, DENSE_KIND, SPARSE_FIELD, SPARSE_KIND
from lr_opensearch.engine.factory import make_adapter
from lr_opensearch.engine.opensearch import pipeline_name
from lr_opensearch.engine.templates import META_KEY, render_hybrid_pipeline
from lr_opensearch.engine.text_queries import CLUSTER_KEY
from lr_opensearch.legs import fusion_config

logger = logging.getLogger(__name__)

_REUPLOAD = ("REGISTERING",)  # an upload that never finished: delete, upload again
DEPLOY_LEASE_SLACK_S = 600.0  # a deploy's lease: its two waits (timeout each) and this


def ensure_model(client: Any, model: ModelZip, timeout: float = 300.0) -> tuple[str, str]:
    """The id of ``model`` deployed on the cluster, uploading / deploying only what is
    missing. Returns (model id, what was done: ``reused`` / ``deployed`` / ``uploaded``)."""
    found = mlapi.find_model(client, model.name)
    if found and (found.get("model_content_hash_value") != model.sha256
                  or found.get("model_state") in _REUPLOAD):
        logger.warning("model %s (%s) is %s with hash %s; uploading it again", model.name,
                       found["model_id"], found.get("model_state"),
                       found.get("model_content_hash_value"))
        mlapi.delete(client, found["model_id"])
        found = None
    if found and found.get("model_state") == "DEPLOYING":  # e.g. ml-commons' own redeploy
        if mlapi.wait_served(client, found["model_id"], min(timeout, 60.0)):
            return found["model_id"], "reused"
    if found and mlapi.serving(client, found["model_id"]):
        return found["model_id"], "reused"
    if found:
        mlapi.deploy(client, found["model_id"], model.name, timeout=timeout)
        return found["model_id"], "deployed"
    model_id = mlapi.upload(client, model.register, model.data, model.sha256)
    try:
        mlapi.deploy(client, model_id, model.name, timeout=timeout)
    except BaseException:
        mlapi.remove(client, model_id, model.name)  # uploaded here: leave nothing behind
        raise
    return model_id, "uploaded"


def pipeline_body(record: dict[str, Any]) -> dict[str, Any]:
    """The in-cluster search pipeline: model ids per field, then the bundle's fusion."""
    body = render_hybrid_pipeline(*record["weights"])
    body["description"] = (f"LightRetriever in-cluster query encoding, bundle "
                           f"{record['bundle_id']}: legs {', '.join(record['legs'])}")
    body["request_processors"] = [{"neural_query_enricher": {
        "default_model_id": record["dense_model_id"],
        "neural_field_default_id": {record["dense_field"]: record["dense_model_id"],
                                    record["sparse_field"]: record["sparse_model_id"]}}}]
    return body


def deploy_bundle(client: Any, bundle: Bundle, index: str | None = None, *,
                  instruction: str | None = None, max_tokens: int | None = None,
                  sparse_min_idf: float = 0.0, default_pipeline: bool = False,
                  timeout: float = 300.0) -> dict[str, Any]:
    """Deploy the bundle's query models and (with ``index``) wire them to the index.

    Returns:
        The record written to ``_meta.lightretriever.cluster`` (plus ``actions``: what was
        done per model).

    Raises:
        EngineError: no ml-commons, a failed deploy, an index built with another bundle, or
            another deploy of the bundle running (its lease, :mod:`lr_opensearch.cluster.lease`).
    """
    mlapi.require_ml(client)
    max_tokens = cluster_max_tokens(bundle, max_tokens)
    if index is not None:
        make_adapter(client).check_bundle(index, bundle)
    short = bundle.bundle_id[:12]
    with lease(client, f"models-deploy-{short}", f"lr models deploy of bundle {short}",
               ttl_s=2 * timeout + DEPLOY_LEASE_SLACK_S):
        return _deploy(client, bundle, index, instruction, max_tokens, sparse_min_idf,
                       default_pipeline, timeout)


def _deploy(client: Any, bundle: Bundle, index: str | None, instruction: str | None,
            max_tokens: int, sparse_min_idf: float, default_pipeline: bool,
            timeout: float) -> dict[str, Any]:
    """:func:`deploy_bundle` under its lease."""
    dense = export_dense(bundle, instruction=instruction, max_tokens=max_tokens)
    sparse = export_sparse(bundle, max_tokens=max_tokens, sparse_min_idf=sparse_min_idf)
    uploaded: list[tuple[str, str]] = []  # (id, name) of the models this call uploaded
    try:
        dense_id, dense_done = ensure_model(client, dense, timeout)
        if dense_done == "uploaded":
            uploaded.append((dense_id, dense.name))
        sparse_id, sparse_done = ensure_model(client, sparse, timeout)
        if sparse_done == "uploaded":
            uploaded.append((sparse_id, sparse.name))
        record = _record(bundle, instruction, max_tokens, sparse_min_idf, dense, dense_id,
                         sparse, sparse_id)
        if index is not None:
            record["template"] = store_template(client, index, record, bundle)
            _wire_index(client, index, record, default_pipeline)
    except BaseException:
        for model_id, name in uploaded:  # a half-done deploy leaves nothing registered
            mlapi.remove(client, model_id, name)
        raise
    return {**record, "actions": {DENSE_KIND: dense_done, SPARSE_KIND: sparse_done}}


def _record(bundle: Bundle, instruction: str | None, max_tokens: int, sparse_min_idf: float,
            dense: ModelZip, dense_id: str, sparse: ModelZip, sparse_id: str) -> dict[str, Any]:
    """What ``_meta.lightretriever.cluster`` records of a deploy."""
    config = fusion_config(bundle.config.weights, "opensearch")
    by_input = {legs.QUERY_VECTOR: dense_id, legs.TOKEN_WEIGHTS: sparse_id}
    record: dict[str, Any] = {
        "models": {name: by_input[leg.input] for name, leg in
                   ((n, legs.get(n)) for n in legs.names())
                   if leg.in_cluster is not None and leg.input in by_input},
        "bundle_id": bundle.bundle_id, "instruction": bundle.resolve_instruction(instruction),
        "dense_model": dense.name, "dense_model_id": dense_id,
        "sparse_model": sparse.name, "sparse_model_id": sparse_id,
        "dense_field": DENSE_FIELD, "sparse_field": SPARSE_FIELD,
        "sparse_keys": bundle.config.key_encoding, "max_tokens": int(max_tokens),
        "sparse_min_idf": float(sparse_min_idf), "legs": list(config.legs),
        "weights": list(config.leg_weights),
        "pipeline": pipeline_name(config, prefix=f"lr-incluster-{bundle.bundle_id[:12]}"),
        "deployed_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    return record


def store_template(client: Any, index: str, record: dict[str, Any], bundle: Bundle) -> str:
    """Store the index's text-only calibrated query as a search template (the index is
    calibrated first if it is not; :func:`lr_opensearch.search.calibration.store_template`,
    which every later calibration of the index calls again). Returns the template id."""
    from lr_opensearch.search.calibration import (
        CALIBRATION_KEY,
        Calibration,
        calibrate,
    )
    from lr_opensearch.search.calibration import store_template as store

    adapter = make_adapter(client)
    meta = adapter.meta_value(index, CALIBRATION_KEY)
    calibration = (Calibration.from_meta(meta, index) if meta
                   else calibrate(adapter, index, bundle))
    return store(adapter, index, record, calibration)


def _wire_index(client: Any, index: str, record: dict[str, Any], default_pipeline: bool) -> None:
    """The search pipeline, the record in the index's ``_meta.lightretriever`` (through the
    engine adapter, as every other ``_meta`` write) and, asked, the default pipeline."""
    mlapi.call(f"creating search pipeline {record['pipeline']}", client.search_pipeline.put,
               id=record["pipeline"], body=pipeline_body(record))
    adapter = make_adapter(client)
    adapter.update_meta(index, META_KEY, lambda old: {**(old or {}), CLUSTER_KEY: record})
    if default_pipeline:
        adapter.put_index_settings(index, {"search.default_pipeline": record["pipeline"]})


def undeploy_bundle(client: Any, bundle_id: str | None = None, *,
                    delete: bool = False) -> list[dict[str, Any]]:
    """Undeploy (and with ``delete`` remove) the lr models of one bundle id prefix, or all."""
    prefix = f"lr-{bundle_id[:12]}-" if bundle_id else "lr-"
    done = []
    for model in mlapi.list_models(client, prefix):
        if model["state"] == mlapi.DEPLOYED or model.get("model_state") == mlapi.DEPLOYED:
            mlapi.undeploy(client, model["model_id"])
        if delete:
            mlapi.delete(client, model["model_id"])
        done.append(model)
    return done
