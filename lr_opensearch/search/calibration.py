"""Per-index, per-leg score scales: what puts the legs of a hybrid on one scale without a
per-query normalisation, so that the hybrid is one ordinary ``bool`` query (the
``calibrated`` fusion, :data:`lr_opensearch.options.CALIBRATED`).

A leg's engine score depends on the index (BM25 and the sparse dot product on its term
statistics and weights, the knn score on the model), so the scale is measured on the index
itself, with queries the corpus provides and never with judgments: ``sample_docs``
documents drawn from the index (seeded ``random_score``), their pseudo-queries cut as the
bundle fit cuts them (:func:`lr_opensearch.fit.pseudo.make_pseudo_queries`: the title, a
sentence, a span of words), each searched by each leg alone. Per leg (and query shape: see
:func:`leg_key`) it records the mean and median top-1 engine score and the mean of the top
:data:`TOP_N` scores; a calibrated search boosts each leg's clause by ``weight / scale``,
the scale being the statistic :data:`lr_opensearch.options.CALIBRATION_FORMS` names
(default :data:`~lr_opensearch.options.DEFAULT_CALIBRATION_FORM`, chosen on SciFact train:
docs/RESULTS.md).

The record lives in the index mapping's ``_meta.lightretriever_calibration`` with how it was
measured; ``lr index calibrate`` (and the end of every ingest) writes it.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lr_opensearch import legs
from lr_opensearch.engine.adapter import TEXT_FIELDS, EngineAdapter
from lr_opensearch.errors import ConfigError
from lr_opensearch.options import CALIBRATION_FORMS, DEFAULT_CALIBRATION_FORM, choice

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

CALIBRATION_KEY = "lightretriever_calibration"  # the index mapping's _meta key
CALIBRATION_FORMAT = "lightretriever-calibration"
CALIBRATION_VERSION = 1
DEFAULT_SAMPLE_DOCS = 200  # documents whose pseudo-queries measure the scales
TOP_N = 10  # hits per pseudo-query each leg returns (the top10_mean form)
# the leg inputs a calibration can make: the query encoder's and the text
CALIBRATED_INPUTS = (*legs.ENCODED_INPUTS, legs.QUERY_TEXT)


@dataclass(frozen=True)
class Shape:
    """How the legs' sub-queries are cut down so the engine can skip: the query's
    ``sparse_tokens`` heaviest sparse tokens (None: all) and the ``text_fields`` BM25
    searches (None: title and text)."""

    sparse_tokens: int | None = None
    text_fields: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.sparse_tokens is not None and (isinstance(self.sparse_tokens, bool) or
                                               not isinstance(self.sparse_tokens, int) or
                                               self.sparse_tokens < 1):
            raise ConfigError(f"sparse_tokens must be an integer >= 1 or None (all), got "
                              f"{self.sparse_tokens!r}")
        if self.text_fields is not None:
            fields = tuple(self.text_fields)
            if not fields or set(fields) - set(TEXT_FIELDS):
                raise ConfigError(f"text_fields must be some of {', '.join(TEXT_FIELDS)}, got "
                                  f"{self.text_fields!r}")
            object.__setattr__(self, "text_fields", None if set(fields) == set(TEXT_FIELDS)
                               else fields)

    def context(self, knn_depth: int, **extra: Any) -> legs.LegContext:
        return legs.LegContext(knn_depth=knn_depth, sparse_tokens=self.sparse_tokens,
                               text_fields=self.text_fields, **extra)


def leg_key(name: str, shape: Shape) -> str:
    """The calibration entry of leg ``name`` searched in ``shape``: the leg's name, with the
    shape where it changes that leg's query (``sparse@5``: the 5 heaviest tokens;
    ``bm25@text``: BM25 on ``text`` alone)."""
    leg = legs.get(name)
    if leg.input == legs.TOKEN_WEIGHTS and shape.sparse_tokens is not None:
        return f"{name}@{shape.sparse_tokens}"
    if leg.input == legs.QUERY_TEXT and shape.text_fields is not None:
        return f"{name}@{'+'.join(shape.text_fields)}"
    return name


@dataclass(frozen=True)
class LegScale:
    """One leg's engine scores over the pseudo-queries: ``queries`` that returned a hit,
    the mean / median top-1 score and the mean of the top :data:`TOP_N` scores."""

    queries: int
    top1_mean: float
    top1_median: float
    top10_mean: float

    def scale(self, form: str) -> float:
        choice("calibration form", form, CALIBRATION_FORMS)
        return float(getattr(self, form))


@dataclass(frozen=True)
class Calibration:
    """An index's scales per leg key (:func:`leg_key`) and how they were measured."""

    scales: Mapping[str, LegScale]  # by leg key (_meta: "legs")
    method: Mapping[str, Any] = field(default_factory=dict)

    def scale(self, key: str, form: str = DEFAULT_CALIBRATION_FORM, *, index: str = "") -> float:
        """The scale of ``key``; the error says how to measure it."""
        entry = self.scales.get(key)
        if entry is None or entry.queries == 0:
            raise ConfigError(f"index {index!r} has no calibration for {key!r} (it has "
                              f"{', '.join(sorted(self.scales)) or 'none'}); run `lr index "
                              f"calibrate --index {index}` with that shape")
        value = entry.scale(form)
        if value <= 0.0:
            raise ConfigError(f"index {index!r}: the {key!r} scale is {value} (no positive "
                              "scores measured); recalibrate once the index has documents")
        return value

    def boosts(self, weights: Mapping[str, float], shape: Shape,
               form: str = DEFAULT_CALIBRATION_FORM, *, index: str = "") -> dict[str, float]:
        """Per leg of positive weight, the boost of its clause: ``weight / scale``."""
        return {name: w / self.scale(leg_key(name, shape), form, index=index)
                for name, w in weights.items() if w > 0.0}

    def to_meta(self) -> dict[str, Any]:
        return {"format": CALIBRATION_FORMAT, "format_version": CALIBRATION_VERSION,
                "legs": {k: vars(v) for k, v in self.scales.items()}, "method": dict(self.method)}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], index: str = "") -> Calibration:
        if meta.get("format") != CALIBRATION_FORMAT or meta.get("format_version") != CALIBRATION_VERSION:
            raise ConfigError(f"index {index!r}: _meta.{CALIBRATION_KEY} is not a calibration "
                              f"this version reads ({meta.get('format')!r} version "
                              f"{meta.get('format_version')!r}); run `lr index calibrate "
                              f"--index {index}`")
        return cls({k: LegScale(**v) for k, v in meta["legs"].items()}, dict(meta["method"]))


def read_calibration(adapter: EngineAdapter, index: str) -> Calibration:
    """The calibration recorded in ``index``'s ``_meta`` (of a target of several indices:
    the first's); the error says how to make one."""
    meta = adapter.meta_value(index, CALIBRATION_KEY)
    if not meta:
        raise ConfigError(f"index {index!r} has no calibration (_meta.{CALIBRATION_KEY}), which "
                          f"fusion 'calibrated' needs; run `lr index calibrate --index {index}`")
    return Calibration.from_meta(meta, index)


def sample_documents(adapter: EngineAdapter, index: str, n: int,
                     seed: int) -> list[tuple[str, str]]:
    """``n`` documents of ``index`` drawn by a seeded ``random_score``: (title, text)."""
    body = adapter.body({"function_score": {"query": {"match_all": {}}, "random_score": {
        "seed": int(seed), "field": "_seq_no"}}}, size=n, source=list(TEXT_FIELDS))
    (result,) = adapter.msearch(index, [body], what="calibration sample")
    return [(str((h.source or {}).get(TEXT_FIELDS[0]) or ""),
             str((h.source or {}).get(TEXT_FIELDS[1]) or "")) for h in result.hits]


def pseudo_queries(docs: Sequence[tuple[str, str]], seed: int) -> list[str]:
    """Per document: its title, one sentence and one span of words (the fit's recipes)."""
    from lr_opensearch.fit.pseudo import make_pseudo_queries

    pq = make_pseudo_queries(docs, sentences_per_doc=1, spans_per_doc=1, passage_share=0.0,
                             seed=seed)
    return list(pq.texts)


def with_tokens(encoder: Any, texts: Sequence[str]) -> tuple[list[str], int]:
    """(the texts the query encoder gives at least one token, how many it gives none): a
    sampled document's title or span can be all words outside the vocabulary, and such a
    pseudo-query measures nothing."""
    if not texts:
        return [], 0
    _, lengths = encoder.tokenizer(list(texts))
    kept = [t for t, n in zip(texts, lengths, strict=True) if n > 0]
    return kept, len(texts) - len(kept)


def measure(adapter: EngineAdapter, index: str, encoder: Any, texts: Sequence[str],
            names: Sequence[str], shapes: Sequence[Shape]) -> dict[str, LegScale]:
    """Each leg of ``names`` in each shape searched alone for every text: its scales."""
    texts = list(texts)
    batch = encoder.encode_batch(texts)
    inputs = {legs.QUERY_VECTOR: batch.dense, legs.TOKEN_WEIGHTS: batch.sparse,
              legs.QUERY_TEXT: texts}
    out: dict[str, LegScale] = {}
    for shape in shapes:
        ctx = shape.context(TOP_N)
        for name in names:
            key = leg_key(name, shape)
            if key in out:
                continue
            leg = legs.get(name)
            bodies = [adapter.body(leg.sub_query(adapter, inputs[leg.input][i], ctx),
                                   size=TOP_N, source=False) for i in range(len(texts))]
            results = adapter.msearch(index, bodies, what=f"calibration of {key}")
            tops = [[h.score for h in r.hits] for r in results if r.hits]
            first = [t[0] for t in tops]
            out[key] = LegScale(
                queries=len(tops),
                top1_mean=statistics.fmean(first) if first else 0.0,
                top1_median=statistics.median(first) if first else 0.0,
                top10_mean=statistics.fmean(statistics.fmean(t) for t in tops) if tops else 0.0)
    return out


def calibrate(adapter: EngineAdapter, index: str, bundle: Bundle, *,
              shapes: Sequence[Shape] | None = None, sample_docs: int = DEFAULT_SAMPLE_DOCS,
              seed: int = 0, encoder: Any = None, write: bool = True) -> Calibration:
    """Measure ``index``'s scales for every leg the query encoder or the text feeds, in
    each of ``shapes`` (default: every leg's full query and the ``calibrated`` fusion's
    default shape), and record them in its ``_meta`` (``write``)."""
    from lr_opensearch.options import CALIBRATED_SPARSE_TOKENS, CALIBRATED_TEXT_FIELDS
    from lr_opensearch.version import __version__

    started = time.perf_counter()
    if sample_docs < 1:
        raise ConfigError(f"sample_docs must be >= 1, got {sample_docs}")
    shapes = list(shapes) if shapes else [
        Shape(), Shape(CALIBRATED_SPARSE_TOKENS, CALIBRATED_TEXT_FIELDS)]
    adapter.refresh(index)
    docs = sample_documents(adapter, index, sample_docs, seed)
    texts = pseudo_queries(docs, seed)
    if not texts:
        raise ConfigError(f"index {index!r} gave no pseudo-queries from {len(docs)} sampled "
                          "documents (empty?); calibrate once it holds documents")
    if encoder is None:
        from lr_opensearch.query import QueryEncoder

        encoder = QueryEncoder(bundle)
    texts, tokenless = with_tokens(encoder, texts)
    if not texts:
        raise ConfigError(f"index {index!r}: none of the {tokenless} pseudo-queries of {len(docs)} "
                          "sampled documents has a token the bundle's tokenizer knows; is it "
                          "the bundle the index was built with?")
    names = [n for n in legs.names() if legs.get(n).input in CALIBRATED_INPUTS]
    scales = measure(adapter, index, encoder, texts, names, shapes)
    method = {"sampled_documents": len(docs), "seed": seed, "pseudo_queries": len(texts),
              "pseudo_queries_without_tokens": tokenless,
              "recipes": ["title", "sentence", "span"], "hits_per_query": TOP_N,
              "documents": adapter.count(index), "bundle_id": bundle.bundle_id,
              "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "library_version": __version__,
              "seconds": round(time.perf_counter() - started, 2)}
    calibration = Calibration(scales, method)
    if write:
        record_calibration(adapter, index, calibration)
    logger.info("calibrated %s on %d pseudo-queries of %d documents in %.1f s: %s", index,
                len(texts), len(docs), method["seconds"],
                ", ".join(f"{k} {v.top1_mean:.3g}" for k, v in scales.items()))
    return calibration


def record_calibration(adapter: EngineAdapter, index: str, calibration: Calibration) -> None:
    """Write ``calibration`` into ``index``'s ``_meta`` (the one write of a calibration) and,
    where ``lr models deploy`` stored the index's text-only calibrated template, render it
    again with the new boosts: the template and ``fusion="calibrated"`` read one record."""
    from lr_opensearch.engine.templates import META_KEY
    from lr_opensearch.engine.text_queries import CLUSTER_KEY

    adapter.update_meta(index, CALIBRATION_KEY, lambda _: calibration.to_meta())
    record = (adapter.meta_value(index, META_KEY) or {}).get(CLUSTER_KEY) or {}
    if record.get("template"):
        name = store_template(adapter, index, record, calibration)
        logger.info("search template %s rendered again with the new scales", name)


def store_template(adapter: EngineAdapter, index: str, record: Mapping[str, Any],
                   calibration: Calibration) -> str:
    """Store ``index``'s text-only calibrated one query (the in-cluster ``record``'s legs
    and weights, boosted by ``calibration``) as a search template: ``GET
    /<index>/_search/template`` with ``{"id": <the returned id>, "params": {"query_text":
    "..."}}``."""
    from lr_opensearch.engine.text_queries import calibrated_template, template_id
    from lr_opensearch.options import CALIBRATED_TEXT_FIELDS, DEFAULT_CANDIDATES

    shape = Shape(None, CALIBRATED_TEXT_FIELDS)  # the cluster's sparse model sends every token
    weights = dict(zip(record["legs"], record["weights"], strict=True))
    source = calibrated_template(record, calibration.boosts(weights, shape, index=index),
                                 knn_depth=DEFAULT_CANDIDATES, text_fields=shape.text_fields)
    name = template_id(index)
    adapter.put_search_template(name, source)
    return name
