"""Training pairs from BEIR-format collections: train qrels, title -> body, independent cropping.

Labelled data is scarce, so besides a collection's *train* qrels (never its test split)
records are built from raw documents:

- ``qrels``: each query of ``qrels/<split>.tsv`` with its judged documents (score > 0) as
  positives. The test split is refused, and so is a train split that shares a query id
  with ``qrels/test.tsv``.
- ``title_body``: the title is the query, the body (without a repeated title) the positive.
- ``cropping``: two independent random word spans of one document (Contriever's
  independent cropping): a short span is the query, a longer one the positive.

Every record keeps its document ids (``positive_ids``) so hard-negative mining can exclude
them. Documents are joined as the doc encoder sees them at ingest
(``lr_opensearch.indexing.reader.document_text``: title + " " + text).

CLI: ``python -m trainer.pairs COLLECTION --recipe title_body --out FILE.jsonl``.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import logging
import random
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lr_opensearch.errors import LRError, TrainingError
from lr_opensearch.indexing.reader import CorpusReader, Record, document_text
from trainer.data import TrainRecord, write_records

logger = logging.getLogger(__name__)

RECIPES = ("qrels", "title_body", "cropping")


@dataclass(frozen=True)
class Doc:
    """A corpus document."""

    id: str
    title: str
    text: str

    @property
    def full(self) -> str:
        """Title and text joined the way the doc encoder sees them."""
        return document_text(self.title, self.text)

    @property
    def body(self) -> str:
        """The text without a leading copy of the title (Cranfield repeats it)."""
        text, title = self.text.strip(), self.title.strip()
        if title and text.lower().startswith(title.lower()):
            text = text[len(title):].lstrip(" .:;-\n")
        return text


def corpus_path(collection: str | Path) -> Path:
    """``corpus.jsonl.gz`` or ``corpus.jsonl`` of a BEIR folder."""
    base = Path(collection)
    for name in ("corpus.jsonl.gz", "corpus.jsonl"):
        if (base / name).is_file():
            return base / name
    raise TrainingError(f"{base}: no corpus.jsonl(.gz); expected a BEIR-format folder")


def read_corpus(collection: str | Path) -> dict[str, Doc]:
    """All valid documents of a collection, by id (rejected lines are logged and skipped)."""
    path = corpus_path(collection)
    docs: dict[str, Doc] = {}
    for item in CorpusReader(str(path)):
        if isinstance(item, Record):
            docs[item.id] = Doc(item.id, item.title, item.text)
        elif getattr(item, "reason", None):
            logger.warning("%s:%d skipped: %s", path, item.line, item.message)  # type: ignore[union-attr]
    if not docs:
        raise TrainingError(f"{path}: no documents")
    return docs


def _read_qrels(path: Path) -> dict[str, list[tuple[str, int]]]:
    if not path.is_file():
        raise TrainingError(f"{path} does not exist")
    qrels: dict[str, list[tuple[str, int]]] = {}
    with open(path, encoding="utf-8", newline="") as f:
        for line_no, row in enumerate(csv.reader(f, delimiter="\t"), 1):
            if not row or (line_no == 1 and row[0] == "query-id"):
                continue
            if len(row) < 3:
                raise TrainingError(f"{path}:{line_no}: expected query-id, corpus-id, score")
            try:
                score = int(row[2])
            except ValueError:
                raise TrainingError(f"{path}:{line_no}: score {row[2]!r} is not an integer") from None
            qrels.setdefault(row[0], []).append((row[1], score))
    return qrels


def _read_queries(collection: Path, wanted: set[str]) -> dict[str, str]:
    """Texts of the ``wanted`` query ids only (other queries are never read into memory)."""
    for name in ("queries.jsonl.gz", "queries.jsonl"):
        path = collection / name
        if path.is_file():
            break
    else:
        raise TrainingError(f"{collection}: no queries.jsonl(.gz)")
    opener = gzip.open if path.suffix == ".gz" else open
    out: dict[str, str] = {}
    with opener(path, "rt", encoding="utf-8") as f:  # type: ignore[operator]
        for line in f:
            if not line.strip():
                continue
            obj = json.loads(line)
            qid = str(obj.get("_id", obj.get("id", "")))
            if qid in wanted:
                out[qid] = str(obj.get("text", ""))
    missing = wanted - set(out)
    if missing:
        raise TrainingError(f"{path}: {len(missing)} judged query ids have no text, e.g. {sorted(missing)[:3]}")
    return out


def qrels_records(collection: str | Path, docs: dict[str, Doc], split: str = "train") -> list[TrainRecord]:
    """Records from a collection's labelled training split.

    Raises:
        TrainingError: for ``split="test"``, a train split overlapping the test queries,
            missing files or dangling ids.
    """
    base = Path(collection)
    if split == "test":
        raise TrainingError("the test split is never used for training; use a train split")
    qrels = _read_qrels(base / "qrels" / f"{split}.tsv")
    test_path = base / "qrels" / "test.tsv"
    if test_path.is_file():
        shared = set(qrels) & set(_read_qrels(test_path))
        if shared:
            raise TrainingError(f"{base}: {len(shared)} query ids of qrels/{split}.tsv are also test "
                                f"queries (e.g. {sorted(shared)[:3]}); refusing to train on them")
    texts = _read_queries(base, set(qrels))
    records = []
    for qid, judged in qrels.items():
        pos = [d for d, score in judged if score > 0]
        dangling = [d for d in pos if d not in docs]
        if dangling:
            raise TrainingError(f"{base}: qrels/{split}.tsv query {qid} judges unknown docs {dangling[:3]}")
        if pos and texts[qid].strip():
            records.append(TrainRecord(query=texts[qid], positives=tuple(docs[d].full for d in pos),
                                       positive_ids=tuple(pos)))
    return records


def title_body_records(docs: dict[str, Doc], min_title_words: int = 3,
                       min_body_words: int = 10) -> list[TrainRecord]:
    """Title -> body pairs of documents with a usable title and body."""
    out = []
    for doc in docs.values():
        body = doc.body
        if len(doc.title.split()) >= min_title_words and len(body.split()) >= min_body_words:
            out.append(TrainRecord(query=doc.title.strip(), positives=(body,), positive_ids=(doc.id,)))
    return out


def crop_span(words: list[str], length: int, rng: random.Random) -> str:
    """A random contiguous span of ``length`` words (the whole text if shorter)."""
    if len(words) <= length:
        return " ".join(words)
    start = rng.randrange(len(words) - length + 1)
    return " ".join(words[start:start + length])


def cropping_records(docs: dict[str, Doc], seed: int = 0, query_words: tuple[int, int] = (6, 24),
                     doc_ratio: tuple[float, float] = (0.3, 0.8), min_words: int = 30,
                     max_doc_words: int = 256) -> list[TrainRecord]:
    """Independent cropping: a short random span (query) and a longer one (positive).

    Args:
        docs: the corpus.
        seed: spans are drawn from ``random.Random(f"{seed}/{doc id}")``.
        query_words: (min, max) words of the query span.
        doc_ratio: (min, max) length of the positive span relative to the document.
        min_words: documents shorter than this are skipped.
        max_doc_words: cap on the positive span.
    """
    out = []
    for doc in docs.values():
        words = doc.full.split()
        if len(words) < min_words:
            continue
        rng = random.Random(f"{seed}/{doc.id}")
        q = crop_span(words, rng.randint(*query_words), rng)
        d_len = min(max_doc_words, max(query_words[1], int(len(words) * rng.uniform(*doc_ratio))))
        out.append(TrainRecord(query=q, positives=(crop_span(words, d_len, rng),),
                               positive_ids=(doc.id,)))
    return out


def doc_view(doc: Doc, recipe: str, rng: random.Random) -> str:
    """How a (negative) document is shown for ``recipe``: like that recipe's positives."""
    if recipe == "title_body":
        return doc.body or doc.full
    if recipe == "cropping":
        words = doc.full.split()
        return crop_span(words, max(24, int(len(words) * rng.uniform(0.3, 0.8))), rng)
    return doc.full


def build_records(collection: str | Path, recipe: str, *, seed: int = 0,
                  split: str = "train") -> Iterator[TrainRecord]:
    """Records of ``recipe`` (one of RECIPES) for a BEIR collection folder."""
    if recipe not in RECIPES:
        raise TrainingError(f"unknown recipe {recipe!r}; valid: {', '.join(RECIPES)}")
    docs = read_corpus(collection)
    if recipe == "qrels":
        yield from qrels_records(collection, docs, split)
    elif recipe == "title_body":
        yield from title_body_records(docs)
    else:
        yield from cropping_records(docs, seed=seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainer.pairs", description=__doc__.split("\n\n")[0])
    parser.add_argument("collection", help="BEIR-format folder (corpus.jsonl.gz, queries, qrels/)")
    parser.add_argument("--recipe", choices=RECIPES, required=True)
    parser.add_argument("--out", required=True, help="output JSONL(.gz)")
    parser.add_argument("--split", default="train", help="qrels split for --recipe qrels (never test)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        n = write_records(args.out, build_records(args.collection, args.recipe, seed=args.seed,
                                                  split=args.split))
    except LRError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"{n} records -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
