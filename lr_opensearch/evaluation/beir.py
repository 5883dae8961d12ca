"""Evaluation on BEIR-format collections: loading, metrics (ir-measures), TREC runs, reports.

A dataset directory holds ``corpus.jsonl[.gz]`` (``_id``, ``title``, ``text``),
``queries.jsonl[.gz]`` (``_id``, ``text``) and ``qrels/<split>.tsv``
(``query-id<TAB>corpus-id<TAB>score`` with a header line). Only queries judged in the split
are evaluated. Metrics come from ir-measures (pytrec_eval underneath), never hand-written:
nDCG@10, R@20, R@50, R@100 and RR@10 (MRR@10).

The runs themselves (BM25, full-backbone dense, LightRetriever dense / sparse / hybrid, the
weight sweep) are in :mod:`lr_opensearch.evaluation.runs`.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from lr_opensearch.errors import ConfigError, CorpusError

logger = logging.getLogger(__name__)

METRIC_KEYS = {  # report key -> ir-measures measure name
    "ndcg@10": "nDCG@10",
    "recall@20": "R@20",
    "recall@50": "R@50",
    "recall@100": "R@100",
    "mrr@10": "RR@10",
}

Run = dict[str, list[tuple[str, float]]]  # query id -> [(doc id, score)], best first


@dataclass(frozen=True)
class Dataset:
    """A BEIR-format collection with the queries of one qrels split.

    Attributes:
        name: the directory name.
        path: the directory.
        corpus_path: the corpus file (``corpus.jsonl`` or ``corpus.jsonl.gz``).
        queries: query id -> text, only queries judged in the split, in file order.
        qrels: query id -> {doc id: relevance}.
        n_docs: number of corpus records.
    """

    name: str
    path: Path
    corpus_path: Path
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    n_docs: int


def _find(path: Path, stem: str) -> Path:
    for candidate in (path / f"{stem}.jsonl", path / f"{stem}.jsonl.gz"):
        if candidate.is_file():
            return candidate
    raise ConfigError(f"{path} is not a BEIR folder: no {stem}.jsonl or {stem}.jsonl.gz")


def _open(path: Path) -> TextIO:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, record) of a JSONL[.gz] file; blank lines skipped."""
    with _open(path) as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"invalid JSON: {exc.msg}", path=str(path), line=line_no) from exc
            if not isinstance(record, dict) or "_id" not in record:
                raise CorpusError("record without an _id", path=str(path), line=line_no)
            yield line_no, record


def read_qrels(path: Path) -> dict[str, dict[str, int]]:
    """query id -> {doc id: relevance} from a BEIR qrels TSV (header line optional)."""
    qrels: dict[str, dict[str, int]] = {}
    with path.open("r", encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            parts = line.rstrip("\r\n").split("\t")
            if not line.strip() or (line_no == 1 and parts[0] == "query-id"):
                continue
            if len(parts) != 3:
                raise CorpusError(
                    f"expected 3 tab-separated columns, got {len(parts)}",
                    path=str(path),
                    line=line_no,
                )
            try:
                rel = int(parts[2])
            except ValueError as exc:
                raise CorpusError(
                    f"relevance {parts[2]!r} is not an integer", path=str(path), line=line_no
                ) from exc
            qrels.setdefault(parts[0], {})[parts[1]] = rel
    return qrels


def corpus_ids(dataset: Dataset) -> list[str]:
    """The ids of the corpus records ingest keeps (the reader's valid records: a record with
    neither title nor text, a duplicate id, a malformed line are skipped), in file order."""
    from lr_opensearch.indexing.reader import CorpusReader, Record

    return [item.id for item in CorpusReader(str(dataset.corpus_path))
            if isinstance(item, Record)]


def indexable_docs(dataset: Dataset) -> int:
    """How many corpus records ingest keeps (``corpus_ids``); an index holding this many
    documents holds the whole corpus."""
    return len(corpus_ids(dataset))


def load_beir(path: str | Path, split: str = "test") -> Dataset:
    """Load a BEIR-format folder (queries restricted to those judged in ``split``).

    Raises:
        ConfigError: missing files, or judged queries absent from the queries file.
        CorpusError: a malformed line (file and line number in the message).
    """
    root = Path(path)
    if not root.is_dir():
        raise ConfigError(f"dataset directory {root} does not exist")
    qrels_path = root / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        raise ConfigError(f"{root} has no qrels/{split}.tsv")
    qrels = read_qrels(qrels_path)
    if not any(rel > 0 for judged in qrels.values() for rel in judged.values()):
        raise ConfigError(f"{qrels_path} judges no document relevant to any query (it is empty, "
                          "or every relevance is 0): there is nothing to evaluate; give a "
                          "split with judgments (--split)")
    queries: dict[str, str] = {}
    for _, record in iter_jsonl(_find(root, "queries")):
        qid = str(record["_id"])
        if qid in qrels:
            queries[qid] = str(record.get("text", ""))
    missing = sorted(set(qrels) - set(queries))
    if missing:
        raise ConfigError(
            f"{len(missing)} judged queries of {qrels_path} are not in the queries "
            f"file (e.g. {missing[:5]})"
        )
    corpus_path = _find(root, "corpus")
    n_docs = sum(1 for _ in iter_jsonl(corpus_path))
    return Dataset(root.name, root, corpus_path, queries, qrels, n_docs)


def compute_metrics(qrels: Mapping[str, Mapping[str, int]], run: Run) -> dict[str, float]:
    """nDCG@10, R@20, R@50, R@100 and RR@10 averaged over the judged queries (ir-measures).

    Queries with no retrieved document count as 0 (they are in the qrels, not the run).
    The run's order is what is scored: documents get strictly decreasing pseudo-scores by
    rank, because trec_eval re-breaks equal scores by document id (descending), which
    would silently replace our tie-break (fused score, then doc id ascending).
    """
    import ir_measures

    measures = [ir_measures.parse_measure(name) for name in METRIC_KEYS.values()]
    run_dict = {
        q: {d: float(len(hits) - r) for r, (d, _) in enumerate(hits)} for q, hits in run.items()
    }
    per_query: dict[str, dict[str, float]] = {}
    for m in ir_measures.iter_calc(measures, dict(qrels), run_dict):
        per_query.setdefault(str(m.measure), {})[m.query_id] = float(m.value)
    n = len(qrels)
    out = {}
    for key, name in METRIC_KEYS.items():
        values = per_query.get(name, {})
        out[key] = sum(values.get(q, 0.0) for q in qrels) / n if n else 0.0
    return out


def write_trec(path: Path, run: Run, tag: str) -> None:
    """A TREC run file: ``qid Q0 docid rank score tag`` (rank 1-based, engine order)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for qid, hits in run.items():
            for rank, (doc_id, score) in enumerate(hits, 1):
                f.write(f"{qid} Q0 {doc_id} {rank} {score:.6f} {tag}\n")


def read_trec(path: Path) -> Run:
    """Read a TREC run file written by :func:`write_trec`."""
    run: Run = {}
    with path.open("r", encoding="utf-8") as f:
        for line in f:
            qid, _, doc_id, _rank, score, _tag = line.split()
            run.setdefault(qid, []).append((doc_id, float(score)))
    return run


def compare_table(reports: Sequence[Mapping[str, Any]]) -> str:
    """A text table of every run of every report: dataset, run, metrics, QPS."""
    cols = ["ndcg@10", "recall@20", "recall@50", "recall@100", "mrr@10", "qps"]
    rows = []
    for rep in reports:
        for run, m in rep.get("runs", {}).items():
            rows.append([rep.get("dataset", "?"), run] + [m.get(c) for c in cols])
    if not rows:
        return "(no runs)"
    dw = max(7, *(len(str(r[0])) for r in rows))
    rw = max(3, *(len(str(r[1])) for r in rows))
    head = f"{'dataset':<{dw}}  {'run':<{rw}}  " + "  ".join(f"{c:>10}" for c in cols)
    lines = [head, "-" * len(head)]
    for r in rows:
        vals = [
            f"{v:>10.1f}"
            if c == "qps" and v is not None
            else f"{v:>10.4f}"
            if v is not None
            else f"{'-':>10}"
            for c, v in zip(cols, r[2:], strict=True)
        ]
        lines.append(f"{r[0]:<{dw}}  {r[1]:<{rw}}  " + "  ".join(vals))
    return "\n".join(lines)


def load_reports(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """report.json files, given directly or as directories (searched recursively)."""
    reports = []
    for p in map(Path, paths):
        files = sorted(p.rglob("report.json")) if p.is_dir() else [p]
        for f in files:
            try:
                reports.append(json.loads(f.read_text(encoding="utf-8")))
            except (OSError, json.JSONDecodeError) as exc:
                raise ConfigError(f"cannot read eval report {f}: {exc}") from exc
    return reports
