"""Training records and the batch sampler.

A training record is one JSON object per line::

    {"query": "...", "positives": ["..."], "negatives": ["...", ...],
     "instruction": "...",                       # optional: dense query prompt
     "positive_ids": ["..."], "negative_ids": ["..."]}   # optional provenance

Records come from ``trainer.pairs`` (BEIR train qrels, title -> body pairs, independent
cropping) and get their hard negatives from ``trainer.mine_negatives``.

The sampler turns sources (record lists with sampling weights) into micro-batches of
``Example`` groups: one query, its positive first, then ``negatives`` hard negatives
(topped up with random in-source documents when a record has too few). Micro-batch
``m`` is a pure function of ``(seed, m)``, so a resumed run sees exactly the batches an
uninterrupted run would, and every DDP rank draws different ones.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lr_opensearch.errors import TrainingError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainRecord:
    """One training query with its documents (texts as the doc encoder sees them)."""

    query: str
    positives: tuple[str, ...]
    negatives: tuple[str, ...] = ()
    instruction: str | None = None
    positive_ids: tuple[str, ...] = ()
    negative_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"query": self.query, "positives": list(self.positives),
                               "negatives": list(self.negatives)}
        if self.instruction is not None:
            out["instruction"] = self.instruction
        if self.positive_ids:
            out["positive_ids"] = list(self.positive_ids)
        if self.negative_ids:
            out["negative_ids"] = list(self.negative_ids)
        return out


def _str_list(obj: dict[str, Any], key: str, where: str, required: bool) -> tuple[str, ...]:
    value = obj.get(key)
    if value is None and not required:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
        raise TrainingError(f"{where}: {key!r} must be a list of strings, got {value!r:.80}")
    out = tuple(str(v) for v in value)
    if required and not any(v.strip() for v in out):
        raise TrainingError(f"{where}: {key!r} needs at least one non-empty text")
    return out


def record_from_json(obj: Any, where: str = "record") -> TrainRecord:
    """Validate one parsed JSON object. Raises TrainingError naming ``where``."""
    if not isinstance(obj, dict):
        raise TrainingError(f"{where}: a record must be a JSON object, got {type(obj).__name__}")
    query = obj.get("query")
    if not isinstance(query, str) or not query.strip():
        raise TrainingError(f"{where}: 'query' must be a non-empty string")
    instruction = obj.get("instruction")
    if instruction is not None and not isinstance(instruction, str):
        raise TrainingError(f"{where}: 'instruction' must be a string or absent")
    return TrainRecord(
        query=query,
        positives=tuple(p for p in _str_list(obj, "positives", where, True) if p.strip()),
        negatives=tuple(n for n in _str_list(obj, "negatives", where, False) if n.strip()),
        instruction=instruction,
        positive_ids=_str_list(obj, "positive_ids", where, False),
        negative_ids=_str_list(obj, "negative_ids", where, False),
    )


def _open_text(path: Path, mode: str) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, mode + "t", encoding="utf-8")  # type: ignore[return-value]
    return open(path, mode, encoding="utf-8")


def iter_records(path: str | Path) -> Iterator[TrainRecord]:
    """Stream records from a JSONL(.gz) file; errors name the file and line."""
    p = Path(path)
    if not p.is_file():
        raise TrainingError(f"training data file {p} does not exist; build it with "
                            "python -m trainer.pairs (and trainer.mine_negatives)")
    with _open_text(p, "r") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise TrainingError(f"{p}:{line_no}: not valid JSON: {exc}") from None
            yield record_from_json(obj, f"{p}:{line_no}")


def read_records(path: str | Path) -> list[TrainRecord]:
    """All records of a JSONL(.gz) file (at least one)."""
    records = list(iter_records(path))
    if not records:
        raise TrainingError(f"{path}: no training records")
    return records


def write_records(path: str | Path, records: Iterable[TrainRecord]) -> int:
    """Write records as JSONL (gzip if the name ends in .gz); returns the count."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with _open_text(p, "w") as f:
        for rec in records:
            f.write(json.dumps(rec.to_json(), ensure_ascii=False) + "\n")
            n += 1
    return n


# ----------------------------------------------------------------------------- sampling


@dataclass(frozen=True)
class Example:
    """One query's group in a batch: ``docs[0]`` is the positive, the rest negatives."""

    query: str
    instruction: str | None
    docs: tuple[str, ...]
    source: str


@dataclass(frozen=True)
class Source:
    """A named record list with its sampling weight and default instruction."""

    name: str
    records: Sequence[TrainRecord]
    weight: float = 1.0
    instruction: str | None = None


def _rng(*parts: object) -> random.Random:
    return random.Random("/".join(str(p) for p in parts))


class BatchSampler:
    """Deterministic micro-batches over weighted sources.

    ``batch(m)`` depends only on ``seed`` and ``m`` (and the sources), never on which
    batches were drawn before in this process. Records of a source are read through
    per-epoch random permutations, so every record is used once before any is reused.

    Args:
        sources: the data sets.
        batch_size: queries per micro-batch.
        negatives: hard negatives per query.
        seed: base seed.
        homogeneous: draw all queries of a micro-batch from one source (chosen by weight);
            otherwise each query picks its source.
    """

    def __init__(self, sources: Sequence[Source], batch_size: int, negatives: int,
                 seed: int = 0, homogeneous: bool = True):
        if not sources:
            raise TrainingError("no training sources: set data.sources in the config")
        for s in sources:
            if not s.records:
                raise TrainingError(f"source {s.name!r} has no records")
            if homogeneous and len(s.records) < batch_size:
                raise TrainingError(f"source {s.name!r} has {len(s.records)} records, fewer than "
                                    f"the micro-batch ({batch_size}); lower run.batch_size or "
                                    "set data.homogeneous=false")
        self.sources = list(sources)
        self.batch_size = batch_size
        self.negatives = negatives
        self.seed = seed
        self.homogeneous = homogeneous
        self._weights = [s.weight for s in self.sources]
        self._choices: list[int] = []  # source chosen by unit u (memoised)
        self._ordinal: list[int] = []  # how many earlier units chose the same source
        self._counts = [0] * len(self.sources)

    # A "unit" is a whole micro-batch (homogeneous) or one query slot.
    def _unit_source(self, unit: int) -> tuple[int, int]:
        """(source index, how many earlier units chose that source)."""
        while len(self._choices) <= unit:
            u = len(self._choices)
            choice = _rng(self.seed, "source", u).choices(range(len(self.sources)),
                                                          weights=self._weights)[0]
            self._choices.append(choice)
            self._ordinal.append(self._counts[choice])
            self._counts[choice] += 1
        return self._choices[unit], self._ordinal[unit]

    def _record(self, source: int, position: int) -> tuple[int, TrainRecord]:
        records = self.sources[source].records
        epoch, offset = divmod(position, len(records))
        order = list(range(len(records)))
        _rng(self.seed, "perm", source, epoch).shuffle(order)
        index = order[offset]
        return index, records[index]

    def _example(self, source: int, position: int, rng: random.Random) -> Example:
        src = self.sources[source]
        index, rec = self._record(source, position)
        docs = [rng.choice(rec.positives)]
        hard = list(rec.negatives)
        if len(hard) > self.negatives:
            hard = rng.sample(hard, self.negatives)
        docs.extend(hard)
        need = 1 + self.negatives - len(docs)
        if need > 0:  # top up with random in-source documents (never the record itself)
            n = len(src.records)
            picks = [j for j in rng.sample(range(n), min(n, need + 1)) if j != index][:need]
            while len(picks) < need:  # a tiny source: repeats are unavoidable
                picks.append(rng.randrange(n))
            docs.extend(rng.choice(src.records[j].positives) for j in picks)
        return Example(query=rec.query, instruction=rec.instruction or src.instruction,
                       docs=tuple(docs), source=src.name)

    def batch(self, index: int) -> list[Example]:
        """Micro-batch number ``index`` (0-based, global over steps, accumulation and ranks)."""
        rng = _rng(self.seed, "batch", index)
        if self.homogeneous:
            # batches never straddle an epoch, so a batch holds distinct records
            source, before = self._unit_source(index)
            per_epoch = len(self.sources[source].records) // self.batch_size
            epoch, slot = divmod(before, per_epoch)
            start = epoch * len(self.sources[source].records) + slot * self.batch_size
            return [self._example(source, start + j, rng) for j in range(self.batch_size)]
        out = []
        for j in range(self.batch_size):
            source, before = self._unit_source(index * self.batch_size + j)
            out.append(self._example(source, before, rng))
        return out


def micro_batch_index(step: int, micro: int, rank: int, grad_accum: int, world_size: int) -> int:
    """Global index of a micro-batch: steps, then accumulation steps, then ranks."""
    return (step * grad_accum + micro) * world_size + rank
