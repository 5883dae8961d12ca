"""``python -m ingest.token_index``: write a corpus into a UR²N token index (for XTR retrieval).

    python -m ingest.token_index corpus.jsonl.gz --ur2n-bundle B --index I [--url URL]
        [--batch-size 8] [--strict]

Every corpus record becomes one record document (``_id`` = its id: title, text, metadata,
``n_tokens``) and one document per content token (``_id`` = ``<id>#<pos>``: ``doc_id``,
``pos``, ``lr_token``), its vector from ``UR2NModel.token_embeddings(texts,
kind="document")``; everything goes through the engine adapter's ``bulk``. The index is
created from ``index_templates/opensearch/token_index.json`` when absent; an existing one
must name the same UR²N bundle. Token ids are deterministic, so running again overwrites
instead of doubling. Bad corpus lines (malformed JSON, no id, duplicate id, no text) are
logged with their line and skipped, or stop the run with ``--strict``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lr_opensearch.engine.adapter import METADATA_FIELD, TEXT_FIELDS
from lr_opensearch.engine.templates import render_token_index_body
from lr_opensearch.errors import CorpusError, IngestError, LRError
from lr_opensearch.indexing.gzstream import count_lines, is_gzip
from lr_opensearch.indexing.reader import CorpusReader, Record, Rejection
from lr_opensearch.progress import progress_bar
from lr_opensearch.ur2n.xtr import (
    DOC_ID_FIELD,
    N_TOKENS_FIELD,
    POS_FIELD,
    TOKEN_FIELD,
    check_token_index,
    token_adapter,
    token_doc_id,
)

logger = logging.getLogger(__name__)

DocumentEmbed = Callable[[list[str]], Sequence[np.ndarray]]  # texts -> one [T, D] per text
MAX_CHUNK_BYTES = 10 * 1024 * 1024
FAILED_SHOWN = 5  # failed bulk items quoted in an error


@dataclass
class TokenIngestSummary:
    """What one run wrote: records, token documents, skipped lines, seconds."""

    records: int = 0
    tokens: int = 0
    rejected: int = 0
    empty: int = 0
    seconds: float = 0.0


def record_actions(index: str, record: Record, vectors: np.ndarray) -> list[dict[str, Any]]:
    """Bulk actions of one record: its record document, then one per token.

    Args:
        vectors: [T, D] float32 token embeddings of ``record.encoder_text()``.
    """
    source: dict[str, Any] = {TEXT_FIELDS[0]: record.title, TEXT_FIELDS[1]: record.text,
                              N_TOKENS_FIELD: int(vectors.shape[0])}
    if record.metadata:
        source[METADATA_FIELD] = record.metadata
    actions = [{"_op_type": "index", "_index": index, "_id": record.id, "_source": source}]
    for pos, row in enumerate(vectors):
        actions.append({"_op_type": "index", "_index": index, "_id": token_doc_id(record.id, pos),
                        "_source": {DOC_ID_FIELD: record.id, POS_FIELD: pos,
                                    TOKEN_FIELD: row.tolist()}})
    return actions


def ensure_token_index(adapter: Any, index: str, bundle_id: str, token_dim: int,
                       **opts: Any) -> bool:
    """Create the token index (``opts``: engine, m, ef_construction, shards, replicas) or
    check that the existing one names this bundle and dimension; True if created."""
    if adapter.index_exists(index):
        check_token_index(adapter.index_meta(index), index, bundle_id, token_dim)
        return False
    body = render_token_index_body(token_dim=token_dim, bundle_id=bundle_id, **opts)
    adapter._admin(f"creating token index {index!r}", adapter._create, index, body)
    logger.info("created token index %s (dim %d, UR²N bundle %s)", index, token_dim, bundle_id)
    return True


def read_records(path: str, summary: TokenIngestSummary, strict: bool) -> Iterator[Record]:
    """The corpus's valid records; bad lines are logged and counted (raised with strict)."""
    for item in CorpusReader(path):
        if isinstance(item, Rejection):
            where = f"{path}, line {item.line}" + (f", id {item.id!r}" if item.id else "")
            if strict:
                raise CorpusError(f"{item.reason}: {item.message}; fix the line or run "
                                  "without --strict to skip it", path=path, line=item.line)
            logger.warning("skipped %s: %s (%s)", where, item.message, item.reason)
            summary.rejected += 1
        elif isinstance(item, Record):
            yield item


def _checked(record: Record, vectors: Any, token_dim: int) -> np.ndarray:
    arr = np.asarray(vectors, dtype=np.float32)
    if arr.ndim != 2 or arr.shape[1] != token_dim or not np.all(np.isfinite(arr)):
        raise IngestError(f"document {record.id!r} (line {record.line}): the model gave token "
                          f"vectors of shape {arr.shape} (finite: {bool(np.all(np.isfinite(arr)))}"
                          f"), expected finite [T, {token_dim}]; check the UR²N bundle")
    return arr


def send(adapter: Any, actions: list[dict[str, Any]], max_chunk_bytes: int) -> None:
    """Bulk ``actions``; raise IngestError quoting the failed items if any failed."""
    results = adapter.bulk(actions, max_chunk_bytes=max_chunk_bytes)
    failed = [item for ok, item in results if not ok]
    if failed:
        shown = "; ".join(f"{f.get('_id')}: {f.get('status')} {f.get('error')}"
                          for f in failed[:FAILED_SHOWN])
        raise IngestError(f"{len(failed)} of {len(actions)} token-index writes failed "
                          f"(first {min(len(failed), FAILED_SHOWN)}: {shown}); fix the cause "
                          "and run again (writes are idempotent)")


def write_tokens(adapter: Any, index: str, records: Iterable[Record], embed: DocumentEmbed,
                 token_dim: int, *, batch_size: int = 8, total: int | None = None,
                 summary: TokenIngestSummary | None = None,
                 max_chunk_bytes: int = MAX_CHUNK_BYTES) -> TokenIngestSummary:
    """Embed ``records`` in batches and bulk their record and token documents; refresh."""
    summary = summary or TokenIngestSummary()
    started = time.perf_counter()
    bar = progress_bar(total=total, desc=f"tokens -> {index}", unit="doc")
    batch: list[Record] = []

    def flush() -> None:
        vectors = embed([r.encoder_text() for r in batch])
        if len(vectors) != len(batch):
            raise IngestError(f"the model gave {len(vectors)} token arrays for {len(batch)} "
                              "documents")
        actions: list[dict[str, Any]] = []
        for record, vec in zip(batch, vectors, strict=True):
            arr = _checked(record, vec, token_dim)
            summary.empty += int(arr.shape[0] == 0)
            summary.tokens += int(arr.shape[0])
            actions += record_actions(index, record, arr)
        send(adapter, actions, max_chunk_bytes)
        summary.records += len(batch)
        bar.update(len(batch))
        batch.clear()

    try:
        for record in records:
            batch.append(record)
            if len(batch) >= batch_size:
                flush()
        if batch:
            flush()
    finally:
        bar.close()
    adapter.refresh(index)
    summary.seconds = time.perf_counter() - started
    return summary


def ingest_tokens(corpus: str, model: Any, client: Any, index: str, *, bundle_id: str,
                  token_dim: int, batch_size: int = 8, strict: bool = False,
                  **index_opts: Any) -> TokenIngestSummary:
    """The whole run: index, records, embeddings, bulk (see the module docstring).

    Args:
        model: anything with ``token_embeddings(texts, kind="document")`` (a ``UR2NModel``).
        bundle_id / token_dim: the UR²N bundle's, recorded in (or checked against) the
            index ``_meta``.
    """
    adapter = token_adapter(client)
    ensure_token_index(adapter, index, bundle_id, token_dim, **index_opts)
    summary = TokenIngestSummary()
    total = None if corpus == "-" or is_gzip(corpus) else count_lines(corpus)

    def embed(texts: list[str]) -> Sequence[np.ndarray]:
        return model.token_embeddings(texts, kind="document")

    return write_tokens(adapter, index, read_records(corpus, summary, strict), embed,
                        token_dim, batch_size=batch_size, total=total,
                        summary=summary)


def main(argv: list[str] | None = None) -> int:
    from lr_opensearch.cli.common import add_connection_args, client_from_args, configure_logging

    p = argparse.ArgumentParser(prog="python -m ingest.token_index", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("corpus", help="BEIR corpus.jsonl[.gz] (or - for stdin)")
    p.add_argument("--ur2n-bundle", required=True, help="UR²N bundle directory")
    p.add_argument("--index", required=True, help="token index (created when absent)")
    p.add_argument("--batch-size", type=int, default=8, help="documents per forward (default 8)")
    p.add_argument("--strict", action="store_true", help="stop at the first bad corpus line")
    p.add_argument("--m", type=int, default=16, help="HNSW m of a new index (default 16)")
    p.add_argument("--ef-construction", type=int, default=128,
                   help="HNSW ef_construction of a new index (default 128)")
    add_connection_args(p)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = p.parse_args(argv)
    configure_logging(args.verbose)
    try:
        from lr_opensearch.ur2n.bundle import load_ur2n_bundle
        from lr_opensearch.ur2n.model import UR2NModel

        bundle = load_ur2n_bundle(args.ur2n_bundle)
        model = UR2NModel.from_bundle(bundle)
        summary = ingest_tokens(args.corpus, model, client_from_args(args), args.index,
                                bundle_id=bundle.bundle_id, token_dim=bundle.config.token_dim,
                                batch_size=args.batch_size, strict=args.strict, m=args.m,
                                ef_construction=args.ef_construction)
    except LRError as exc:
        logger.error("%s", exc)
        return 1
    logger.info("%s: %d records, %d token documents, %d lines skipped, %d without tokens, "
                "%.1f s", args.index, summary.records, summary.tokens, summary.rejected,
                summary.empty, summary.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
