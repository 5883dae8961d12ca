"""How the bulk writer reads a failed bulk item: retry it, stop the run, or dead-letter it.

A failed item is one of three things (``lr_opensearch.indexing.writer`` acts on them):

- worth retrying (``is_retryable``): 429, 5xx, or no answer at all;
- the index refuses every document, not this one (``INDEX_REFUSALS``: closed,
  write-blocked, missing), or the whole bulk request was refused before any document was
  looked at (``request_refusal``: the client raised for the request's HTTP status, as for
  401, 403, 404, 413 from a proxy, an HTML page): the run stops before the chunk is
  settled, so nothing is dead-lettered and the same command resumes once it is put right;
- anything else is about this document: a permanent per-document failure.

A whole-request refusal is recognised by the ``exception`` the client's bulk helper puts
on every item of a request that raised (its per-item answers never carry one).
"""

from __future__ import annotations

from typing import Any

from lr_opensearch.engine.results import answer_of

# bulk item errors that say the index refuses every document (not this one): what to do
INDEX_REFUSALS = {
    "index_closed_exception": "open the index (POST /{index}/_open)",
    "cluster_block_exception": ("lift the block (PUT /{index}/_settings with "
                                "index.blocks.write / read_only / read_only_allow_delete "
                                "false; the engine sets read_only_allow_delete when a disk "
                                "passes its flood-stage watermark: free space first)"),
    "index_not_found_exception": "create the index again: rerun with --restart",
}
# HTTP status of a refused bulk request -> what to do
REQUEST_REFUSALS = {
    401: ("the cluster did not accept the credentials: give the right --user / --password "
          "(or LR_OPENSEARCH_USER / LR_OPENSEARCH_PASSWORD)"),
    403: ("the user may not write to index {index}: grant it the permission to write "
          "documents there (OpenSearch security: indices:data/write/bulk* and "
          "indices:data/write/index on the index; Elasticsearch: the write or index "
          "privilege), or connect as a user who has it"),
    404: ("the bulk endpoint was not found: check that --url is the cluster's address "
          "(a proxy in front of it may need its path prefix) and that index {index} exists"),
    413: ("even a request of one small document was refused as too large, so a body size "
          "limit on the way to the cluster is set very low: raise it (nginx "
          "client_max_body_size in a proxy; http.max_content_length on every node)"),
}
OTHER_REFUSAL = "put right what the cluster says"


def is_retryable(status: Any) -> bool:
    """429, 5xx and "no status" (connection errors report ``"N/A"``) are worth retrying."""
    if not isinstance(status, int):
        return True
    return status == 429 or status >= 500


def failure_reason(info: dict[str, Any]) -> tuple[str, str]:
    """(error type, human message) of a failed bulk item, from the engine's answer."""
    err = info.get("error")
    if isinstance(err, dict):
        kind = str(err.get("type", "error"))
        message = str(err.get("reason", ""))
        cause = err.get("caused_by")
        while isinstance(cause, dict):
            message += f" (caused by {cause.get('type')}: {cause.get('reason')})"
            cause = cause.get("caused_by")
        return kind, message
    exc = info.get("exception")
    if exc is not None and isinstance(info.get("status"), int):
        return type(exc).__name__, answer_of(exc)
    kind = type(exc).__name__ if exc is not None else "error"
    return kind, str(err if err is not None else info)


def is_request_refusal(info: dict[str, Any]) -> bool:
    """Whether a failed item is one of a bulk request the cluster answered with an error
    status as a whole (the client raised for it), rather than an answer about the item."""
    return info.get("exception") is not None and isinstance(info.get("status"), int)


def request_refusal(info: dict[str, Any], index: str) -> str:
    """The message of a run stopped by a refused bulk request: what the cluster answered,
    that nothing was lost, what to do."""
    status = info.get("status")
    todo = (REQUEST_REFUSALS.get(status, OTHER_REFUSAL) if isinstance(status, int)
            else OTHER_REFUSAL).format(index=index)
    kind, message = failure_reason(info)
    return (f"index {index!r}: the cluster refused the bulk request as a whole (HTTP {status} "
            f"{kind}: {message}), not any one document; nothing was lost: no document was "
            f"dead-lettered and the checkpoint stays at the last acknowledged document. "
            f"{todo[0].upper()}{todo[1:]}, then rerun the same command to resume")
