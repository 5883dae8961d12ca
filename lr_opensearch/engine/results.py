"""What the engines answer, engine-neutral: hits, one response per search, the per-shard
lists of a leg merged, and an engine client's exception in words (``refusal``, ``answer_of``,
``status_of``, the create-index block: ``is_create_block``, ``create_block_refusal``).
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lr_opensearch.engine.clauses import HTTP_MAX_CONTENT_LENGTH
from lr_opensearch.errors import EngineError

logger = logging.getLogger(__name__)

EXCERPT = 200  # characters of an answer that is not the engine's JSON
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


@dataclass(frozen=True)
class EngineHit:
    """One hit as the engine returned it (``index``: the concrete index that holds it; a
    target of several indices, an alias or a wildcard may hold one ``_id`` more than once)."""

    doc_id: str
    score: float
    source: Mapping[str, Any] | None
    index: str | None = None

    @property
    def ref(self) -> DocRef:
        return (self.index, self.doc_id)


DocRef = tuple[str | None, str]  # (concrete index or None, _id): one document of a target


@dataclass(frozen=True)
class EngineResult:
    """One search response: hits in engine order, time taken, whether it timed out."""

    hits: list[EngineHit]
    took_ms: int
    timed_out: bool


def parse_response(resp: Mapping[str, Any], what: str) -> EngineResult:
    """Turn one (m)search response into an EngineResult, or raise EngineError."""
    if "error" in resp:
        raise EngineError(f"{what} failed: {_reason(resp['error'])}")
    shards = resp.get("_shards") or {}
    if shards.get("failed"):
        reasons = "; ".join(_reason(f.get("reason", f)) for f in shards.get("failures", [])[:3])
        raise EngineError(f"{what}: {shards['failed']} shard(s) failed: {reasons}")
    hits = [
        EngineHit(str(h["_id"]), float(h["_score"]), h.get("_source"), h.get("_index"))
        for h in resp.get("hits", {}).get("hits", [])
    ]
    timed_out = bool(resp.get("timed_out"))
    if timed_out:
        logger.warning("%s timed out; results are partial", what)
    return EngineResult(hits, int(resp.get("took", 0)), timed_out)


def merge_shards(parts: Sequence[EngineResult]) -> EngineResult:
    """One leg's per-shard results as one list: every hit, best score first (stable, so a
    shard's own order survives ties), the slowest shard's time, timed out if any did."""
    hits = sorted((h for part in parts for h in part.hits), key=lambda h: -h.score)
    return EngineResult(hits, max((p.took_ms for p in parts), default=0),
                        any(p.timed_out for p in parts))


def _reason(error: Any) -> str:
    if isinstance(error, Mapping):
        root = error.get("root_cause") or []
        detail = root[0] if root else error
        caused = error.get("caused_by", {})
        text = f"{detail.get('type', '?')}: {detail.get('reason', error)}"
        if isinstance(caused, Mapping) and caused.get("reason"):
            text += f" (caused by {caused.get('type')}: {caused['reason']})"
        return text
    return str(error)


def refusal(exc: BaseException) -> str:
    """An engine client's exception as words: HTTP 413 says which limit (the clients print
    it as a bare ``TransportError(413, '')``), an answer that is not JSON as such (a proxy's
    page), anything else as the client words it."""
    if status_of(exc) == 413:
        return (f"HTTP 413: the request is larger than the cluster's http.max_content_length "
                f"({HTTP_MAX_CONTENT_LENGTH // 2**20}mb unless set in opensearch.yml / "
                "elasticsearch.yml)")
    if type(exc).__name__ == "SerializationError":  # either client: an answer it cannot read
        detail = exc.args[0] if exc.args else exc
        return (f"the answer is not JSON ({excerpt(detail)}): something other than the engine "
                "answers at the cluster URL (a proxy's or a login page?); check --url")
    return str(exc)


def answer_of(exc: BaseException) -> str:
    """What the cluster answered to a refused request, short (either client): the engine's
    error type and reason, an HTML page's title, or the start of any other body."""
    for attr in ("info", "body"):
        body = getattr(exc, attr, None)
        if isinstance(body, Mapping) and body.get("error") is not None:
            return _reason(body["error"]) if isinstance(body["error"], Mapping) else \
                excerpt(body["error"])
        if isinstance(body, (str, bytes)) and body:
            return excerpt(body)
    return excerpt(getattr(exc, "error", None) or exc)


def excerpt(body: Any) -> str:
    """An answer body in a few words: an HTML page's title, else its first characters."""
    raw = body if isinstance(body, bytes) else str(body).encode("utf-8", "replace")
    if b"<html" in raw[:1000].lower() or b"<!doctype" in raw[:100].lower():
        title = _TITLE.search(raw)
        text = " ".join(html.unescape(title.group(1).decode("utf-8", "replace")).split()) \
            if title else ""
        return f"an HTML page{': ' + text if text else ''}"
    text = " ".join(raw.decode("utf-8", "replace").split())
    return text if len(text) <= EXCERPT else text[:EXCERPT] + "..."


def status_of(exc: BaseException) -> Any:
    """The HTTP status of an engine client's exception (either client), or None."""
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "meta", None), "status", None)
    return status


CREATE_BLOCK = "cluster.blocks.create_index"  # set at a flood-stage disk watermark


def is_create_block(exc: BaseException) -> bool:
    """Whether a refused index creation is the cluster's create-index block."""
    return "create-index blocked" in str(exc) or "index_create_block" in str(exc)


def create_block_refusal(engine: str, index: str, settings: Mapping[str, Any]) -> str:
    """Why ``index`` was not created under :data:`CREATE_BLOCK`: where the cluster's
    ``settings`` (flat) set it, and the request that lifts it."""
    import json

    scopes = [s for s in ("persistent", "transient") if CREATE_BLOCK in settings.get(s, {})]
    lift = json.dumps({s: {CREATE_BLOCK: None} for s in scopes or ["persistent"]})
    return (f"the {engine} cluster blocks creating index {index!r}: {CREATE_BLOCK} is set "
            f"({' and '.join(scopes) or 'persistent'}), as OpenSearch does when a node's disk "
            "passes the flood-stage watermark (it keeps the block after space is freed); free "
            f"disk space (GET _cat/allocation?v), then lift it: PUT _cluster/settings {lift}")
