"""The ml-commons calls ``lr models`` needs: upload in chunks, deploy, wait, find, undeploy.

Every call goes through opensearch-py's ``client.plugins.ml`` namespace (and ``client.cat``);
no raw REST is left here.

Models are uploaded through the model upload API (``_register_meta`` + ``upload_chunk``),
because a real cluster cannot read the client's files, in chunks of at most
``UPLOAD_CHUNK_LIMIT`` bytes. An upload or deploy that fails after ``_register_meta``
removes the model it registered (:func:`remove`): nothing half-registered stays behind.
Every error is one line that says what to do.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from lr_opensearch.errors import EngineError

logger = logging.getLogger(__name__)

# ml-commons refuses an upload_chunk body of more than 10,000,000 bytes ("Chunk size exceeds
# 10MB"): ModelHelper.CHUNK_SIZE = 10_000_000 in ml-algorithms, checked by
# MLModelChunkUploader.validateChunkSize (refused when length > CHUNK_SIZE), ml-commons 2.x
# to 3.6. 10 MiB (10,485,760) is over it. tests/cluster/test_incluster.py uploads at the limit.
UPLOAD_CHUNK_LIMIT = 10_000_000
DEPLOYED = "DEPLOYED"
REGISTERING = "REGISTERING"  # ml-commons merges the chunks after the last one arrives
REGISTER_WAIT_S = 120.0  # how long an upload waits for that merge
ML_PLUGIN = "opensearch-ml"
NO_ML_HINT = ("start a node with ml-commons (`lr node start --with-ml`), or install the "
              "opensearch-ml plugin on every node")


class ModelDeployError(EngineError):
    """A model could not be registered, uploaded or deployed."""


def call(what: str, method: Callable[..., Any], **kwargs: Any) -> Any:
    """One call of the client (``method``, e.g. ``client.plugins.ml.get_model``); an engine
    error becomes an EngineError naming ``what`` and the reason (an ml-commons call the
    cluster has no handler for: how to get the plugin)."""
    try:
        return method(**kwargs)
    except Exception as exc:  # noqa: BLE001 - the engine clients' error types differ
        info = getattr(exc, "info", None)
        reason = _reason(info) if info else str(exc)
        if "no handler found" in reason.lower() and "_plugins/_ml" in reason:
            raise EngineError(f"{what}: the cluster has no ml-commons plugin; "
                              f"{NO_ML_HINT}") from None
        raise EngineError(f"{what} failed: {reason}") from None


def _reason(info: Any) -> str:
    if isinstance(info, Mapping):
        err = info.get("error", info)
        if isinstance(err, Mapping):
            root = (err.get("root_cause") or [err])[0]
            return f"{root.get('type', '?')}: {root.get('reason', err)}"
        return str(err)
    return str(info)


def require_ml(client: Any) -> None:
    """Raise a one-line EngineError unless every node has the ml-commons plugin."""
    rows = call("_cat/plugins", client.cat.plugins, format="json")
    nodes = {r.get("name") for r in rows}
    with_ml = {r.get("name") for r in rows if r.get("component") == ML_PLUGIN}
    if not nodes or with_ml != nodes:
        missing = sorted(n for n in nodes - with_ml if n) or ["every node"]
        raise EngineError(f"no ml-commons plugin on {', '.join(missing)}: the cluster cannot "
                          f"encode queries itself; {NO_ML_HINT}")


def find_model(client: Any, name: str) -> dict[str, Any] | None:
    """The registered model called ``name`` (its ``_source`` plus ``model_id``), or None."""
    body = {"size": 20, "query": {"bool": {"filter": [{"term": {"name.keyword": name}}],
                                           "must_not": [{"exists": {"field": "chunk_number"}}]}}}
    res = call(f"looking up model {name}", client.plugins.ml.search_models, body=body)
    for hit in res.get("hits", {}).get("hits", []):
        return {**hit["_source"], "model_id": hit["_id"]}
    return None


def list_models(client: Any, prefix: str = "lr-") -> list[dict[str, Any]]:
    """Registered models whose name starts with ``prefix`` (newest first); ``state`` is
    DEPLOYED only for the ones a node serves (else the stored state, DEPLOYED read as
    UNDEPLOYED: a restart dropped it)."""
    body = {"size": 1000, "sort": [{"created_time": {"order": "desc"}}],
            "query": {"bool": {"filter": [{"prefix": {"name.keyword": prefix}}],
                               "must_not": [{"exists": {"field": "chunk_number"}}]}}}
    res = call("listing models", client.plugins.ml.search_models, body=body)
    models = [{**h["_source"], "model_id": h["_id"]} for h in res.get("hits", {}).get("hits", [])]
    live = served(client) if models else set()
    for m in models:
        stored = str(m.get("model_state"))
        m["state"] = DEPLOYED if m["model_id"] in live else (
            "UNDEPLOYED" if stored == DEPLOYED else stored)
    return models


def get_model(client: Any, model_id: str) -> dict[str, Any]:
    return dict(call(f"model {model_id}", client.plugins.ml.get_model, model_id=model_id))


def served(client: Any, model_id: str | None = None) -> set[str]:
    """Ids of the models some node holds in memory (``model_id``: only that one is asked).
    The profile API asks the nodes; a model's stored ``model_state`` can still say DEPLOYED
    after a restart dropped it."""
    res = call("model profiles", client.plugins.ml.get_profile_models, model_id=model_id)
    return {mid for node in (res.get("nodes") or {}).values()
            for mid, info in (node.get("models") or {}).items()
            if info.get("model_state") == DEPLOYED}


def serving(client: Any, model_id: str) -> bool:
    """True when some node holds the model in memory."""
    return model_id in served(client, model_id)


def wait_served(client: Any, model_id: str, timeout: float) -> bool:
    """Poll until a node serves the model (True) or ``timeout`` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while not serving(client, model_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def state_of(client: Any, model_id: str) -> str:
    """``DEPLOYED`` only when a node serves the model, else its stored state (or, when that
    still says DEPLOYED, ``UNDEPLOYED``: a restart dropped it)."""
    if serving(client, model_id):
        return DEPLOYED
    stored = str(get_model(client, model_id).get("model_state"))
    return "UNDEPLOYED" if stored == DEPLOYED else stored


def upload(client: Any, register: Mapping[str, Any], data: bytes, sha256: str,
           chunk_bytes: int = UPLOAD_CHUNK_LIMIT) -> str:
    """Register a model's metadata and upload its zip in chunks of ``chunk_bytes`` (the
    engine takes at most ``UPLOAD_CHUNK_LIMIT``); returns the model id once the engine has
    merged the chunks (the model is no longer REGISTERING). A failed chunk removes the
    registered model before the error is raised."""
    chunks = [data[i : i + chunk_bytes] for i in range(0, len(data), chunk_bytes)]
    body = {**register, "model_content_hash_value": sha256,
            "model_content_size_in_bytes": len(data), "total_chunks": len(chunks)}
    name = register["name"]
    res = call(f"registering model {name}", client.plugins.ml.register_model_meta, body=body)
    model_id = str(res["model_id"])
    try:
        for n, chunk in enumerate(chunks):
            call(f"uploading chunk {n + 1}/{len(chunks)} ({len(chunk):,} bytes) of model {name}",
                 client.plugins.ml.upload_chunk, model_id=model_id, chunk_number=n, body=chunk)
        _wait_registered(client, model_id, name)
    except BaseException:
        remove(client, model_id, name)
        raise
    logger.info("uploaded model %s (%s, %d bytes in %d chunk(s))", name, model_id, len(data),
                len(chunks))
    return model_id


def _wait_registered(client: Any, model_id: str, name: str,
                     timeout: float = REGISTER_WAIT_S) -> None:
    """Until the model's record leaves REGISTERING: the upload's last chunk returns before
    ml-commons has merged the chunks, and a model read (or deployed) in between is still
    REGISTERING."""
    deadline = time.monotonic() + timeout
    while str(get_model(client, model_id).get("model_state")) == REGISTERING:
        if time.monotonic() > deadline:
            raise EngineError(f"model {name} ({model_id}) was still {REGISTERING} {timeout:.0f} s "
                              "after its last chunk; see the node log (`lr node logs`) and run "
                              "`lr models deploy` again")
        time.sleep(0.2)


def deploy(client: Any, model_id: str, name: str, timeout: float = 300.0) -> None:
    """Deploy a registered model and wait until its deploy task completes.

    Raises:
        ModelDeployError: the task failed or did not finish in time (with the cluster's
            reason and what to do).
    """
    res = call(f"deploying model {name}", client.plugins.ml.deploy_model, model_id=model_id)
    task = res.get("task_id")
    deadline = time.monotonic() + timeout
    while task:
        info = call(f"deploy task of model {name}", client.plugins.ml.get_task, task_id=task)
        task_state = info.get("state")
        if task_state == "COMPLETED":
            break
        if task_state in ("FAILED", "COMPLETED_WITH_ERROR", "CANCELLED"):
            raise ModelDeployError(
                f"deploying model {name} ({model_id}) failed: {_task_error(info)}; see the node "
                "log (`lr node logs`), fix the cause and run `lr models deploy` again")
        if time.monotonic() > deadline:
            raise ModelDeployError(f"deploying model {name} ({model_id}) did not finish in "
                                   f"{timeout:.0f} s (task {task}: {task_state}); run `lr models "
                                   "deploy` again later, or with a longer --timeout")
        time.sleep(0.5)
    # the task completes before the model's own record is updated (and, just after a node
    # restart, that record may still hold an older state): wait until a node serves it
    if not wait_served(client, model_id, max(1.0, deadline - time.monotonic())):
        raise ModelDeployError(f"model {name} ({model_id}) is {state_of(client, model_id)} "
                               "after its deploy task; run `lr models deploy` again")


def _task_error(info: Mapping[str, Any]) -> str:
    error = info.get("error")
    if isinstance(error, str):
        try:
            parsed = json.loads(error)
            error = "; ".join(f"{k}: {v}" for k, v in parsed.items())
        except ValueError:
            pass
    return " ".join(str(error or info.get("state")).split())[:500]


def undeploy(client: Any, model_id: str) -> None:
    call(f"undeploying {model_id}", client.plugins.ml.undeploy_model, model_id=model_id)


def delete(client: Any, model_id: str) -> None:
    call(f"deleting model {model_id}", client.plugins.ml.delete_model, model_id=model_id)


def remove(client: Any, model_id: str, name: str) -> bool:
    """Undeploy (where needed) and delete a model this run registered, after a failure;
    never raises (the failure being handled is the error to report). True when it is gone;
    otherwise a warning says how to remove it."""
    try:
        state = str(get_model(client, model_id).get("model_state"))
        if state in (DEPLOYED, "DEPLOYING", "PARTIALLY_DEPLOYED") or serving(client, model_id):
            undeploy(client, model_id)
        delete(client, model_id)
        logger.info("removed model %s (%s) after the failure", name, model_id)
        return True
    except Exception as exc:  # noqa: BLE001 - cleanup must not hide the first error
        logger.warning("could not remove the half-registered model %s (%s): %s; remove it "
                       "with `lr models undeploy --delete`", name, model_id, exc)
        return False


def predict_dense(client: Any, model_id: str, text: str) -> list[float]:
    """The cluster's query vector for ``text`` (a check; search never needs it)."""
    res = call(f"predict with model {model_id}", client.plugins.ml.predict,
               algorithm_name="text_embedding", model_id=model_id,
               body={"text_docs": [text], "target_response": ["sentence_embedding"]})
    return list(res["inference_results"][0]["output"][0]["data"])


def predict_sparse(client: Any, model_id: str, text: str) -> dict[str, float]:
    """The cluster's sparse query (key -> weight) for ``text``."""
    res = call(f"predict with model {model_id}", client.plugins.ml.predict,
               algorithm_name="sparse_tokenize", model_id=model_id, body={"text_docs": [text]})
    return dict(res["inference_results"][0]["output"][0]["dataAsMap"]["response"][0])
