"""Text for the table fit: reading fit files, and pseudo-queries cut from documents.

Recipes (document text only; never test queries or judgments):

* ``title``: the title (>= 2 words);
* ``sentence``: random sentences of the text, at most 32 words;
* ``span``: random runs of 4-16 consecutive words;
* ``passage``: random runs of 24-128 words, as many as a tenth of the others, weighted
  ``RECIPE_WEIGHTS["passage"]`` in the fit. Long real queries (a paragraph describing an
  information need) are mean-pooled over many contextual tokens; short pseudo-queries
  alone teach the table only short ones. Chosen on SciFact *train* queries (dense nDCG@10
  0.622 without passages, 0.629 with weight 1, 0.638 with weight 3, 0.631 with weight 5).

:func:`plan_counts` raises the per-document sentence and span counts for small corpora.
Corpora: BEIR ``corpus.jsonl[.gz]`` (``title``, ``text``) or ``.txt`` (one document per
non-empty line); queries: BEIR ``queries.jsonl[.gz]`` (``text``) or ``.txt``.
"""

from __future__ import annotations

import gzip
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from lr_opensearch.bundle.files import hash_file
from lr_opensearch.errors import ConfigError, CorpusError

RECIPES = ("title", "sentence", "span", "passage")
RECIPE_WEIGHTS = {"passage": 3.0}  # row weight in the fit (squared-error weight = its square); others 1
TARGET_QUERIES = 20_000  # small corpora get more pseudo-queries per document, up to this
MAX_QUERIES = 40_000  # default --fit-max-queries
BASE_PER_DOC = (2, 3)  # sentences, spans per document (plus the title)
CAP_PER_DOC = (8, 60)
PASSAGE_SHARE = 0.1  # passages per other pseudo-query
PASSAGE_WORDS = (24, 128)
_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_SPACES = re.compile(r"\s+")


# ----------------------------------------------------------------------------- reading


def _open_text(path: Path) -> IO[str]:
    if not path.is_file():
        raise ConfigError(f"fit file {path} does not exist or is not a file")
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")  # noqa: SIM115


def _is_jsonl(path: Path) -> bool:
    return ".jsonl" in path.suffixes or ".json" in path.suffixes


def read_records(path: str | Path, fields: Sequence[str]) -> Iterator[tuple[str, ...]]:
    """The given string fields of each record of a BEIR JSONL[.gz] or a text file.

    A ``.txt`` file (anything not named ``*.jsonl``/``*.json``, gzip or not) gives one
    record per non-empty line, its text in the last field and "" in the others.

    Raises:
        CorpusError: a line that is not a JSON object or has a non-string field (names
            the file and the line).
    """
    p = Path(path)
    jsonl = _is_jsonl(p)
    with _open_text(p) as f:
        try:
            for line_no, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                if not jsonl:
                    yield (*([""] * (len(fields) - 1)), line.strip())
                    continue
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    raise CorpusError(f"not valid JSON ({exc})", path=str(p), line=line_no) from None
                if not isinstance(obj, dict):
                    raise CorpusError("not a JSON object", path=str(p), line=line_no)
                values = tuple(obj.get(k) or "" for k in fields)
                bad = [k for k, v in zip(fields, values, strict=True) if not isinstance(v, str)]
                if bad:
                    raise CorpusError(f"fields {bad} must be strings", path=str(p), line=line_no)
                yield values  # type: ignore[misc]
        except UnicodeDecodeError as exc:
            raise CorpusError(f"not UTF-8 text ({exc})", path=str(p), line=None) from None


def fitted_on(fit: Mapping[str, Any] | None, path: str | Path) -> bool:
    """Whether ``path`` is one of the corpora a bundle's ``fit`` record names (same resolved
    path and size, or same size and sha256; the file is hashed only when a size matches)."""
    if not fit:
        return False
    p = Path(path).resolve()
    size = p.stat().st_size
    same_size = [c for c in fit.get("corpora", []) if c.get("size") == size]
    if any(c.get("path") == str(p) for c in same_size):
        return True
    return bool(same_size) and hash_file(p) in {c.get("sha256") for c in same_size}


def file_facts(path: str | Path) -> dict[str, Any]:
    """``{name, path, size, sha256}`` of a fit file (the manifest records it; ingest compares)."""
    p = Path(path).resolve()
    return {"name": p.name, "path": str(p), "size": p.stat().st_size, "sha256": hash_file(p)}


# ----------------------------------------------------------------------------- pseudo-queries


@dataclass(frozen=True)
class PseudoQueries:
    """Query texts for the fit, each tagged with the recipe that made it.

    Attributes:
        texts: the texts (deduplicated: case- and whitespace-insensitive).
        recipe: [n] object array: "title" | "sentence" | "span" | "passage" | "query".
        sources: [n] int64: the index of the document each text was cut from (its
            positive in the sparse head's fit, ``fit.sparse``); -1 for a real query.
    """

    texts: list[str]
    recipe: np.ndarray
    sources: np.ndarray

    def __len__(self) -> int:
        return len(self.texts)

    def counts(self) -> dict[str, int]:
        names, counts = np.unique(self.recipe.astype(str), return_counts=True)
        return {str(n): int(c) for n, c in zip(names, counts, strict=True)}


def clean_text(text: str) -> str:
    return _SPACES.sub(" ", text).strip()


def plan_counts(n_docs: int, target: int = TARGET_QUERIES) -> tuple[int, int]:
    """(sentences, spans) per document: 2 + 3, raised for small corpora towards ``target``.

    Capped at 8 sentences and 60 spans per document (a document has few sentences; spans
    absorb the rest).
    """
    per_doc = target / max(n_docs, 1)
    base_total = 1 + sum(BASE_PER_DOC)
    sentences = min(CAP_PER_DOC[0], max(BASE_PER_DOC[0], round(BASE_PER_DOC[0] * per_doc / base_total)))
    spans = min(CAP_PER_DOC[1], max(BASE_PER_DOC[1], math.ceil(per_doc - 1 - sentences)))
    return sentences, spans


def make_pseudo_queries(
    docs: Sequence[tuple[str, str]],
    *,
    sentences_per_doc: int = 2,
    spans_per_doc: int = 3,
    span_words: tuple[int, int] = (4, 16),
    sentence_words: tuple[int, int] = (4, 32),
    passage_share: float = PASSAGE_SHARE,
    passage_words: tuple[int, int] = PASSAGE_WORDS,
    seed: int = 0,
) -> PseudoQueries:
    """Pseudo-queries from documents only (deterministic given ``seed``).

    * ``title``: the title, when it has >= 2 words;
    * ``sentence``: up to ``sentences_per_doc`` random sentences of the text (split after
      ``. ! ? ;``), skipping those under ``sentence_words[0]`` words and keeping the first
      ``sentence_words[1]`` words of longer ones;
    * ``span``: ``spans_per_doc`` random runs of consecutive words of the text (the title
      when there is no text), lengths uniform in ``span_words`` (inclusive);
    * ``passage``: ``passage_share`` x (the count of the above) runs of title + text words,
      lengths uniform in ``passage_words``, from documents with at least
      ``passage_words[0]`` words taken in a random order (round robin, so spread evenly).

    Args:
        docs: (title, text) per document.

    Returns:
        :class:`PseudoQueries`, deduplicated (first occurrence kept), in document order.
    """
    rng = np.random.default_rng(seed)
    seen: set[str] = set()
    texts: list[str] = []
    tags: list[str] = []
    sources: list[int] = []

    def add(text: str, tag: str, source: int) -> None:
        key = text.lower()
        if text and key not in seen:
            seen.add(key)
            texts.append(text)
            tags.append(tag)
            sources.append(source)

    lo_s, hi_s = sentence_words
    lo_w, hi_w = span_words
    for doc, (raw_title, raw_body) in enumerate(docs):
        title, body = clean_text(raw_title), clean_text(raw_body)
        if len(title.split()) >= 2:
            add(title, "title", doc)
        sents = [s.split()[:hi_s] for s in _SENTENCE_END.split(body)] if body else []
        sents = [s for s in sents if len(s) >= lo_s]
        if sents and sentences_per_doc > 0:
            pick = rng.choice(len(sents), size=min(sentences_per_doc, len(sents)), replace=False)
            for j in sorted(pick.tolist()):
                add(" ".join(sents[j]), "sentence", doc)
        words = (body or title).split()
        if len(words) >= lo_w:
            for _ in range(spans_per_doc):
                n = int(rng.integers(lo_w, min(hi_w, len(words)) + 1))
                start = int(rng.integers(0, len(words) - n + 1))
                add(" ".join(words[start : start + n]), "span", doc)
    _add_passages(docs, round(passage_share * len(texts)), passage_words, rng, add)
    return PseudoQueries(texts, np.asarray(tags, dtype=object), np.asarray(sources, np.int64))


def _add_passages(docs: Sequence[tuple[str, str]], count: int, length: tuple[int, int],
                  rng: np.random.Generator, add: Any) -> None:
    lo, hi = length
    words = [(d, w) for d, w in enumerate(clean_text(f"{t} {x}").split() for t, x in docs)
             if len(w) >= lo]
    if not words or count <= 0:
        return
    order = rng.permutation(len(words))
    for k in range(count):
        doc, w = words[int(order[k % len(order)])]
        n = int(rng.integers(lo, min(hi, len(w)) + 1))
        start = int(rng.integers(0, len(w) - n + 1))
        add(" ".join(w[start : start + n]), "passage", doc)


def with_queries(pq: PseudoQueries, paths: Sequence[Path], max_queries: int,
                 seed: int) -> PseudoQueries:
    """Real queries first (deduplicated; source -1), then pseudo-queries, sampled down to
    ``max_queries``."""
    real: list[str] = []
    seen: set[str] = set()
    for path in paths:
        for (text,) in read_records(path, ("text",)):
            text = clean_text(text)
            if text and text.lower() not in seen:
                seen.add(text.lower())
                real.append(text)
    real = real[:max_queries]
    pseudo = [i for i, t in enumerate(pq.texts) if t.lower() not in seen]
    room = max_queries - len(real)
    if len(pseudo) > room:
        pick = np.random.default_rng(seed).choice(len(pseudo), size=room, replace=False)
        pseudo = [pseudo[i] for i in np.sort(pick)]
    texts = real + [pq.texts[i] for i in pseudo]
    recipe = np.asarray(["query"] * len(real) + [pq.recipe[i] for i in pseudo], dtype=object)
    sources = np.concatenate([np.full(len(real), -1, np.int64), pq.sources[pseudo]])
    return PseudoQueries(texts, recipe, sources.astype(np.int64))
