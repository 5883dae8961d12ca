"""What a search asks for (:class:`SearchOptions`) and the same resolved once per batch
(:class:`SearchRequest`): one object built once and passed down, instead of keyword lists
repeated per method.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lr_opensearch import legs
from lr_opensearch.engine.clauses import Filter
from lr_opensearch.engine.seismic import SeismicSearch
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import DEFAULT_RANK_CONSTANT, FusionConfig
from lr_opensearch.options import (
    CALIBRATED,
    CALIBRATED_SPARSE_TOKENS,
    CALIBRATED_TEXT_FIELDS,
    CALIBRATION_FORMS,
    COMBINATIONS,
    DEFAULT_CALIBRATION_FORM,
    DEFAULT_CANDIDATES,
    DEFAULT_RERANK_DEPTH,
    ENCODINGS,
    FUSION_PATHS,
    MAX_RESULT_WINDOW,
    NORMALIZATIONS,
    SEMANTICS,
    choice,
)
from lr_opensearch.search.calibration import Shape

EXPLAIN_TOP_TOKENS = 5


def _positive_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class SearchOptions:
    """How a search runs. Every field has a default; :meth:`replace` checks overrides.

    Attributes:
        k: hits per query; from_: offset into the ranked (fused) list.
        mode: ``hybrid``, or one leg alone (a leg's name, see :func:`lr_opensearch.legs.modes`).
        weights: per leg, ``{leg: weight}`` or a sequence in leg order; None: the bundle's.
        fusion: ``auto`` (the server when it can, except on large indexes where the
            engine's hybrid query cannot skip: see ``options.CLIENT_FUSION_MIN_DOCS``),
            ``server``, ``client``, or ``calibrated``: one ``bool`` query of the legs'
            clauses boosted by weight / the leg's scale measured on the index (``lr index
            calibrate``; :mod:`lr_opensearch.search.calibration`), ``k`` hits, no
            normalisation; the dense leg's knn ``k`` is ``candidates``.
        sparse_tokens / text_fields: the query's shape: send the sparse leg only the query's
            that many heaviest tokens (0: all) and search BM25 on these text fields; None:
            all tokens and title + text, except with ``fusion="calibrated"``, whose
            default shape is ``options.CALIBRATED_SPARSE_TOKENS`` / ``CALIBRATED_TEXT_FIELDS``.
        calibration_form: the calibration statistic the ``calibrated`` fusion divides by
            (``options.CALIBRATION_FORMS``; None: ``DEFAULT_CALIBRATION_FORM``).
        semantics: fusion semantics (None: the bundle's); normalization, combination,
            rank_constant: see :func:`lr_opensearch.search.fusion.fuse`.
        candidates: hits each leg retrieves for fusion (at least ``from_ + k``).
        ef_search: HNSW ``ef_search`` for knn legs (None: the index default).
        seismic_top_n / seismic_heap_factor: the SEISMIC search of an index whose sparse
            field has the ``sparse_vector`` layout (``lr_opensearch.engine.seismic``): the
            query tokens whose posting lists are searched (None: all) and the cluster
            skipping factor (None: the engine's 1.0); unused on ``rank_features``.
        filter: a query clause or list of clauses applied to every leg.
        source: ``_source`` selection (None: everything except the vector fields; False:
            nothing; a list of fields; or an engine ``_source`` object).
        timeout: per-search engine timeout (seconds or an engine string like "2s").
        explain: attach an :class:`~lr_opensearch.search.explain.Explanation` to every hit.
        instruction: query instruction name (None: the bundle's default).
        rerank_depth / rerank_budget_s: the second stage's depth and time budget per search
            (used when the retriever has a reranker).
    """

    k: int = 10
    from_: int = 0
    mode: str = legs.HYBRID
    weights: Sequence[float] | Mapping[str, float] | None = None
    fusion: str = "auto"
    semantics: str | None = None
    normalization: str = "min_max"
    combination: str = "arithmetic_mean"
    rank_constant: int = DEFAULT_RANK_CONSTANT
    candidates: int = DEFAULT_CANDIDATES
    sparse_tokens: int | None = None
    text_fields: Sequence[str] | None = None
    calibration_form: str | None = None
    ef_search: int | None = None
    seismic_top_n: int | None = None
    seismic_heap_factor: float | None = None
    filter: Filter = None
    source: Any = None
    timeout: float | str | None = None
    explain: bool = False
    instruction: str | None = None
    rerank_depth: int = DEFAULT_RERANK_DEPTH
    rerank_budget_s: float | None = None

    def __post_init__(self) -> None:
        _positive_int("k", self.k, 1)
        _positive_int("from_", self.from_, 0)
        _positive_int("candidates", self.candidates, 1)
        _positive_int("rerank_depth", self.rerank_depth, 1)
        if self.ef_search is not None:
            _positive_int("ef_search", self.ef_search, 1)
        SeismicSearch(self.seismic_top_n, self.seismic_heap_factor)  # checks the knobs
        for what, value in (("from_ + k", self.from_ + self.k), ("candidates", self.candidates),
                            ("rerank_depth", self.rerank_depth)):
            if value > MAX_RESULT_WINDOW:
                raise ConfigError(
                    f"{what} = {value} is more than {MAX_RESULT_WINDOW}, the most hits a search "
                    f"may ask the engine for (index.max_result_window, knn k); ask for fewer")
        choice("mode", self.mode, legs.modes())
        choice("fusion", self.fusion, FUSION_PATHS)
        if self.sparse_tokens is not None:
            _positive_int("sparse_tokens", self.sparse_tokens, 0)
        if self.text_fields is not None:
            if isinstance(self.text_fields, str):
                object.__setattr__(self, "text_fields", (self.text_fields,))
            Shape(None, tuple(self.text_fields))  # checks the fields
        if self.calibration_form is not None:
            choice("calibration form", self.calibration_form, CALIBRATION_FORMS)
        if self.semantics is not None:
            choice("fusion semantics", self.semantics, SEMANTICS)
        choice("normalization", self.normalization, NORMALIZATIONS)
        choice("combination", self.combination, COMBINATIONS)

    def shape(self, path: str) -> Shape:
        """The query shape on ``path`` (the ``calibrated`` path has its own default)."""
        tokens, fields = self.sparse_tokens, self.text_fields
        if path == CALIBRATED:
            tokens = CALIBRATED_SPARSE_TOKENS if tokens is None else tokens
            fields = CALIBRATED_TEXT_FIELDS if fields is None else fields
        return Shape(tokens or None, tuple(fields) if fields is not None else None)

    @property
    def form(self) -> str:
        return self.calibration_form or DEFAULT_CALIBRATION_FORM

    @property
    def seismic(self) -> SeismicSearch:
        """The SEISMIC knobs of the sparse sub-query (``sparse_vector`` layout)."""
        return SeismicSearch(self.seismic_top_n, self.seismic_heap_factor)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def replace(self, **overrides: Any) -> SearchOptions:
        """These options with ``overrides`` (None values keep the current one, as the
        keyword arguments of ``Retriever.search`` always did); unknown names are refused."""
        unknown = sorted(set(overrides) - set(self.names()))
        if unknown:
            raise ConfigError(f"unknown search option(s) {unknown}; valid options: "
                              f"{', '.join(self.names())}")
        given = {key: v for key, v in overrides.items() if v is not None}
        return dataclasses.replace(self, **given) if given else self


InputEncoder = Callable[[list[str]], Sequence[Any]]  # texts -> one input value per text


@dataclass(frozen=True)
class QueryEncoding:
    """Where and how a ``Retriever`` encodes its queries (fixed for its life).

    Attributes:
        encode: ``client`` (default: the bundle's query encoder runs here) or ``cluster``:
            the requests carry the text only and the cluster's models encode it (``lr
            models deploy``; OpenSearch with ml-commons; docs/IN_CLUSTER.md).
        sparse_min_idf: prune the sparse query: tokens with IDF below it are not sent
            (see ``QueryEncoder``; 0, the default, keeps all). Unused with a ready encoder.
        input_encoders: per query input that neither the query encoder nor the text gives
            (a registered leg's ``input``), a function from texts to one value per text.
    """

    encode: str = ENCODINGS[0]
    sparse_min_idf: float = 0.0
    input_encoders: Mapping[str, InputEncoder] = field(default_factory=dict)

    def __post_init__(self) -> None:
        choice("query encoding", self.encode, ENCODINGS)


@dataclass(frozen=True)
class SearchRequest:
    """Options resolved once for a batch: the fusion config, the path, the source spec.

    ``path`` is ``server`` or ``client`` for hybrid search, ``single`` for one leg alone.
    """

    options: SearchOptions
    path: str
    config: FusionConfig
    source: Any
    strip_sparse: bool
    timeout: str | None
    sparse_field: str = "lr_sparse"
    top_tokens: int = EXPLAIN_TOP_TOKENS

    @property
    def k(self) -> int:
        return self.options.k

    @property
    def from_(self) -> int:
        return self.options.from_

    @property
    def mode(self) -> str:
        return self.options.mode

    @property
    def explain(self) -> bool:
        return self.options.explain

    @property
    def filter(self) -> Filter:
        return self.options.filter

    @property
    def page_end(self) -> int:
        """Where the page ends in the ranked list: ``from_ + k`` (the engine's ``size`` of a
        request that returns the page itself)."""
        return self.from_ + self.k

    @property
    def per_leg(self) -> int:
        """Hits each leg retrieves: the candidates for fusion, the page for one leg (and for
        the ``calibrated`` one query)."""
        return self.page_end if self.path in ("single", CALIBRATED) else max(
            self.options.candidates, self.page_end)

    @property
    def knn_depth(self) -> int:
        """The neighbours a knn (and the approximate sparse search) collects, on every path:
        :func:`knn_depth` of the candidates and the page's end."""
        return knn_depth(self.options.candidates, self.page_end)

    @property
    def shape(self) -> Shape:
        return self.options.shape(self.path)

    @property
    def legs(self) -> tuple[str, ...]:
        """The legs searched, in sub-query order."""
        return self.config.legs if self.mode == legs.HYBRID else (self.mode,)


def knn_depth(candidates: int, page_end: int) -> int:
    """The knn depth (the engines' knn ``k``) of a search: the candidates, and at least the
    page's end (the hits a request returns cannot be more than the knn found)."""
    return max(candidates, page_end)


def engine_timeout(timeout: float | str | None) -> str | None:
    """A timeout as the engines read it: seconds (a number) -> ``"<ms>ms"``; a string as is."""
    if timeout is None or isinstance(timeout, str):
        return timeout
    return f"{max(1, int(round(float(timeout) * 1000)))}ms"



def check_target(index: str) -> str:
    """A search target as the engines read it (one index, ``a,b``, an alias, a wildcard),
    refusing the forms that would widen it silently: an empty name in a list (``","``
    reads as every index) or an empty target.

    Raises:
        ConfigError: naming the target and how to write it.
    """
    names = index.split(",")
    if not index.strip() or any(not n.strip() for n in names):
        raise ConfigError(f"index target {index!r} has an empty index name (the engines read "
                          "',' or an empty name as every index); name the indices: --index a "
                          "or --index a,b (or a pattern such as 'docs-*')")
    return index



def check_texts(texts: Any) -> None:
    """Query texts must be a string or a sequence of strings (not None, not numbers)."""
    items = [texts] if isinstance(texts, str) else texts
    if isinstance(items, (bytes, Mapping)) or not isinstance(items, Sequence) or not all(
            isinstance(t, str) for t in items):
        raise ConfigError(f"query text must be a str or a list of str, got {texts!r:.80}")
