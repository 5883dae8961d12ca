"""Hard negatives from BM25 on an OpenSearch node.

The collection's documents go into a plain text index (``title`` and ``text`` fields,
BM25, English analyzer; not a LightRetriever index), every record's query is searched,
the record's own positives are dropped, and the next ``keep`` documents (after skipping
the ``skip`` best, which are the likeliest false negatives) become its hard negatives,
shown the way the record's recipe shows documents (``trainer.pairs.doc_view``).

CLI::

    python -m trainer.mine_negatives --records pairs.jsonl --collection DIR \
        --recipe title_body --out pairs.neg.jsonl [--url http://127.0.0.1:9230]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import random
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from lr_opensearch.errors import EngineError, LRError, NodeError
from lr_opensearch.progress import progress_bar
from trainer.data import TrainRecord, read_records, write_records
from trainer.pairs import RECIPES, Doc, doc_view, read_corpus

logger = logging.getLogger(__name__)

INDEX_BODY: dict[str, Any] = {
    "settings": {"number_of_shards": 1, "number_of_replicas": 0},
    "mappings": {"properties": {"title": {"type": "text", "analyzer": "english"},
                                "text": {"type": "text", "analyzer": "english"}}},
}
MAX_QUERY_CHARS = 2000  # long queries (cropped spans) stay far below the clause limit


def _connect(url: str) -> Any:
    from lr_opensearch.engine.client import make_client

    client = make_client(url)
    try:
        client.info()
    except Exception as exc:  # noqa: BLE001 - any transport failure means "no node here"
        raise NodeError(f"no OpenSearch node answers at {url} ({exc.__class__.__name__}: {exc}); "
                        "start one (lr node start) or pass --url") from None
    return client


def index_corpus(client: Any, index: str, docs: dict[str, Doc], *, recreate: bool = True) -> None:
    """(Re)create ``index`` and bulk-load the documents (title, text), then refresh."""
    from opensearchpy import helpers

    if client.indices.exists(index=index):
        if not recreate:
            return
        client.indices.delete(index=index)
    client.indices.create(index=index, body=INDEX_BODY)
    actions = ({"_index": index, "_id": d.id, "_source": {"title": d.title, "text": d.text}}
               for d in docs.values())
    ok, errors = helpers.bulk(client, progress_bar(actions, total=len(docs), desc="bm25 index", unit="doc"),
                              chunk_size=500, raise_on_error=False)
    if errors:
        raise EngineError(f"bulk indexing into {index!r} failed for {len(errors)} documents, "
                          f"first: {errors[0]}")
    client.indices.refresh(index=index)
    logger.info("indexed %d documents into %s", ok, index)


def _search_batch(client: Any, index: str, queries: Sequence[str], size: int) -> list[list[str]]:
    body: list[dict[str, Any]] = []
    for q in queries:
        body.append({"index": index})
        body.append({"size": size, "_source": False,
                     "query": {"multi_match": {"query": q[:MAX_QUERY_CHARS],
                                               "fields": ["title", "text"]}}})
    responses = client.msearch(body=body)["responses"]
    out = []
    for q, r in zip(queries, responses, strict=True):
        if "error" in r:
            raise EngineError(f"BM25 search failed for query {q[:60]!r}: {r['error']}")
        out.append([h["_id"] for h in r["hits"]["hits"]])
    return out


def select_negatives(ranked: Sequence[str], exclude: Iterable[str], *, skip: int, keep: int) -> list[str]:
    """Ids from a BM25 ranking: positives removed, the ``skip`` best dropped, then ``keep``."""
    banned = set(exclude)
    candidates = [d for d in ranked if d not in banned]
    return candidates[skip:skip + keep]


def mine(records: Sequence[TrainRecord], docs: dict[str, Doc], client: Any, index: str, *,
         recipe: str, keep: int = 16, skip: int = 0, seed: int = 0,
         batch_size: int = 64) -> Iterator[TrainRecord]:
    """Yield the records with BM25 hard negatives (ids and texts) filled in.

    Records without ``positive_ids`` exclude documents whose text equals a positive.
    """
    depth = skip + keep + max((len(r.positive_ids) for r in records), default=1) + 1
    for start in progress_bar(range(0, len(records), batch_size), desc="bm25 mining", unit="batch"):
        chunk = records[start:start + batch_size]
        ranked = _search_batch(client, index, [r.query for r in chunk], depth)
        for rec, ids in zip(chunk, ranked, strict=True):
            exclude = set(rec.positive_ids) or {i for i in ids if docs[i].full in rec.positives}
            chosen = select_negatives(ids, exclude, skip=skip, keep=keep)
            digest = hashlib.sha1(rec.query.encode("utf-8")).hexdigest()[:16]
            rng = random.Random(f"{seed}/{digest}")
            texts = tuple(doc_view(docs[i], recipe, rng) for i in chosen)
            yield TrainRecord(query=rec.query, positives=rec.positives, negatives=texts,
                              instruction=rec.instruction, positive_ids=rec.positive_ids,
                              negative_ids=tuple(chosen))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.mine_negatives",
                                     description="Mine BM25 hard negatives on an OpenSearch node.")
    parser.add_argument("--records", required=True, help="input JSONL of training records")
    parser.add_argument("--collection", required=True, help="BEIR folder whose corpus is searched")
    parser.add_argument("--recipe", choices=RECIPES, required=True,
                        help="how negatives are shown (like the records' positives)")
    parser.add_argument("--out", required=True, help="output JSONL(.gz)")
    parser.add_argument("--url", default="http://127.0.0.1:9230", help="OpenSearch node")
    parser.add_argument("--index", default=None, help="BM25 index name (default from the collection)")
    parser.add_argument("--keep", type=int, default=16, help="negatives stored per record")
    parser.add_argument("--skip", type=int, default=0, help="best non-positive hits skipped")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-index", action="store_true", help="do not delete the BM25 index")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return _run(args)
    except LRError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    from pathlib import Path

    records = read_records(args.records)
    docs = read_corpus(args.collection)
    index = args.index or f"lr-train-bm25-{Path(args.collection).resolve().name.lower()}"
    client = _connect(args.url)
    index_corpus(client, index, docs)
    try:
        n = write_records(args.out, mine(records, docs, client, index, recipe=args.recipe,
                                         keep=args.keep, skip=args.skip, seed=args.seed))
    finally:
        if not args.keep_index:
            client.indices.delete(index=index, ignore_unavailable=True)
    print(f"{n} records with BM25 negatives -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
