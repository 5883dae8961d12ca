"""The ``sparse_vector`` index layout of the LightRetriever sparse field (OpenSearch
neural-search 3.3+, the SEISMIC approximate algorithm), next to the default
``rank_features`` layout.

What the engine does (read in the neural-search 3.6 sources; docs/ARCHITECTURE.md "Index
layout"):

* The index needs the setting ``index.sparse: true``, which excludes ``index.knn: true``
  (one codec per index), so the field lives in a companion index (``<index>-lr-sparse``,
  filled from the main index's ``_source``, all but the dense vector, by a server-side
  ``_reindex``); the field is ``{"type":
  "sparse_vector", "method": {"name": "seismic", "parameters": {...}}}``. A document's
  value is ``{"<token id>": weight}``: the keys must be non-negative integers (as strings).
* Each segment with at least ``approximate_threshold`` documents (engine default
  1,000,000) is searched by SEISMIC: posting lists cut to ``n_postings`` documents,
  clustered, cluster summaries pruned to ``summary_prune_ratio`` of their weight; the
  query's ``top_n`` heaviest tokens pick the lists, ``heap_factor`` how eagerly clusters are
  skipped, ``k`` hits come back per segment. Weights are quantised to one byte, documents'
  up to ``quantization_ceiling_ingest`` (engine default 3.0: heavier weights are clipped)
  and queries' up to ``quantization_ceiling_search`` (16.0).
* A smaller segment falls back to the plain linear feature query on the same field: the
  same scores as the ``rank_features`` layout's ``rank_feature`` clauses.
* Token ids are folded into 16 bits (``id % 65536`` stored as a signed short) up to
  neural-search 3.8, so ids >= 32,768 break the search: the layout is refused for a bundle
  whose vocabulary reaches them (MiniLM's 30,522 fits; LLM vocabularies do not).

The sparse leg's sub-query on this layout is ``neural_sparse`` with ``query_tokens`` keyed
by token id and ``method_parameters`` (``k``: the leg's candidates; ``top_n``,
``heap_factor``; a filter in a ``bool`` around it: the pre-filter of ``method_parameters``
fails on ``terms`` / ``ids`` in 3.6, so a selective filter keeps fewer than ``k`` hits),
sent to the companion index;
a hybrid search with it fuses client side (the ``hybrid`` query searches one index).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from lr_opensearch.bundle.keys import encode_keys
from lr_opensearch.errors import ConfigError
from lr_opensearch.options import SPARSE_LAYOUTS, choice

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

RANK_FEATURES, SPARSE_VECTOR = SPARSE_LAYOUTS
LAYOUT_META = "sparse_layout"  # the _meta.lightretriever key that records the layout
SEISMIC_TOKEN_LIMIT = 32_768  # token ids from here on collide in the engine (16-bit fold)
SPARSE_INDEX_SETTING = "index.sparse"  # neural-search's switch for sparse_vector fields
COMPANION_SUFFIX = "-lr-sparse"  # the index that holds a sparse_vector layout's field
COMPANION_FORMAT = "lightretriever-sparse-companion"  # its _meta format (`lr index list`)


@dataclass(frozen=True)
class SeismicIndexParams:
    """The ``seismic`` method's parameters of a ``sparse_vector`` field (None: the engine's
    default, see the module docstring; fixed when the index is created).

    Attributes:
        n_postings: documents kept per posting list (engine: 0.0005 x documents, >= 160).
        cluster_ratio: clusters per posting list as a share of its documents (0.1).
        summary_prune_ratio: share of a cluster summary's weight kept (0.4).
        approximate_threshold: documents a segment needs before SEISMIC searches it
            (1,000,000; below it the search is exact).
        quantization_ceiling_ingest: document weights quantised up to this (engine 3.0;
            the packaged MiniLM's document weights, log(1 + relu(logit)), reach 2.32 on all
            of SciFact, so nothing is clipped).
        quantization_ceiling_search: query weights quantised up to this (None: the
            bundle's largest IDF query weight rounded up, 16 for count weights).
    """

    n_postings: int | None = None
    cluster_ratio: float | None = None
    summary_prune_ratio: float | None = None
    approximate_threshold: int | None = None
    quantization_ceiling_ingest: float | None = None
    quantization_ceiling_search: float | None = None

    def __post_init__(self) -> None:
        for name in ("n_postings", "approximate_threshold"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < (1 if name == "n_postings" else 0)):
                raise ConfigError(f"seismic {name}={value!r} must be an integer >= "
                                  f"{1 if name == 'n_postings' else 0}")
        for name, top in (("cluster_ratio", 1.0), ("summary_prune_ratio", 1.0),
                          ("quantization_ceiling_ingest", math.inf),
                          ("quantization_ceiling_search", math.inf)):
            value = getattr(self, name)
            if value is not None and not (0.0 < float(value) <= top):
                raise ConfigError(f"seismic {name}={value!r} must be > 0"
                                  + (f" and <= {top}" if top < math.inf else ""))

    @classmethod
    def parse(cls, text: str | None) -> SeismicIndexParams:
        """``name=value,...`` (e.g. ``approximate_threshold=0,n_postings=4000``) as params."""
        if not text:
            return cls()
        known = asdict(cls())
        values: dict[str, Any] = {}
        for part in text.split(","):
            name, eq, raw = part.partition("=")
            name = name.strip()
            if not eq or name not in known:
                raise ConfigError(f"seismic parameter {part.strip()!r}: expected name=value with "
                                  f"a name among {', '.join(known)}")
            integer = name in ("n_postings", "approximate_threshold")
            try:
                values[name] = int(raw) if integer else float(raw)
            except ValueError:
                raise ConfigError(f"seismic parameter {name}={raw.strip()!r} is not "
                                  f"{'an integer' if integer else 'a number'}") from None
        return cls(**values)

    def parameters(self, bundle: Bundle) -> dict[str, Any]:
        """The mapping's ``method.parameters`` (the engine's default where None)."""
        out = {k: v for k, v in asdict(self).items() if v is not None}
        if self.quantization_ceiling_search is None:
            out["quantization_ceiling_search"] = search_ceiling(bundle)
        return out


def search_ceiling(bundle: Bundle) -> float:
    """The query weights' quantisation ceiling: the bundle's largest IDF weight rounded up
    to the next integer (count weights: the engine's 16)."""
    weights = bundle.sparse_weights
    if weights is None or not len(weights):
        return 16.0
    return float(max(1.0, math.ceil(float(weights.max()))))


def check_layout(layout: str, bundle: Bundle, engine: str) -> str:
    """``layout`` if ``bundle`` can be indexed with it on ``engine``; else a one-line error
    naming what to use instead."""
    choice("sparse layout", layout, SPARSE_LAYOUTS)
    if layout == RANK_FEATURES:
        return layout
    if engine != "opensearch":
        raise ConfigError(f"the {SPARSE_VECTOR} (SEISMIC) layout is an OpenSearch neural-search "
                          f"field; on {engine} use --sparse-layout {RANK_FEATURES} (there "
                          "--sparse-type chooses Elasticsearch's own sparse field)")
    if bundle.vocab_size > SEISMIC_TOKEN_LIMIT:
        raise ConfigError(f"bundle {getattr(bundle, 'path', bundle.bundle_id)} has token ids up to "
                          f"{bundle.vocab_size - 1:,}; the {SPARSE_VECTOR} (SEISMIC) field folds "
                          f"ids into 16 bits, so ids >= {SEISMIC_TOKEN_LIMIT:,} collide: use "
                          f"--sparse-layout {RANK_FEATURES} (the default)")
    return layout


def companion_name(index: str) -> str:
    """The index holding the ``sparse_vector`` field of ``index`` (see :func:`apply_layout`)."""
    return f"{index}{COMPANION_SUFFIX}"


def apply_layout(body: dict[str, Any], bundle: Bundle, layout: str,
                 params: SeismicIndexParams | None, *, field: str, meta_key: str) -> dict[str, Any]:
    """Record ``layout`` in the create-index ``body``'s ``_meta``; for ``sparse_vector``,
    ``field`` becomes a stored, unindexed object here (documents carry their token-id
    vectors in ``_source``) and :func:`companion_body` holds the SEISMIC field.

    Why two indices: OpenSearch (3.6 and its main branch) lets one plugin's codec serve an
    index, and both k-NN (``index.knn``) and neural-search (``index.sparse``) need theirs,
    so a ``knn_vector`` HNSW field and a ``sparse_vector`` field cannot share an index."""
    check_layout(layout, bundle, "opensearch")
    mappings = body["mappings"]
    meta = mappings["_meta"][meta_key]
    meta[LAYOUT_META] = layout
    if layout == SPARSE_VECTOR:
        parameters = (params or SeismicIndexParams()).parameters(bundle)
        mappings["properties"][field] = {"type": "object", "enabled": False}
        meta["seismic"] = parameters
    elif params is not None:
        raise ConfigError(f"seismic parameters are for --sparse-layout {SPARSE_VECTOR}; the "
                          f"{RANK_FEATURES} layout has none")
    return body


def companion_body(body: Mapping[str, Any], *, field: str, dense_field: str,
                   meta_key: str) -> dict[str, Any]:
    """The create-index body of the companion index of a ``sparse_vector`` layout index
    (``body``: the main index's, from :func:`apply_layout`): ``index.sparse``, the same
    shards, ``_meta`` and fields but the dense one (filters search the same fields), and
    ``field`` as a SEISMIC ``sparse_vector``."""
    settings = body["settings"]["index"]
    meta = {**body["mappings"]["_meta"][meta_key], "format": COMPANION_FORMAT}
    properties = {name: spec for name, spec in body["mappings"]["properties"].items()
                  if name != dense_field}
    properties[field] = {"type": SPARSE_VECTOR,
                         "method": {"name": "seismic", "parameters": meta["seismic"]}}
    return {"settings": {SPARSE_INDEX_SETTING: True,
                         "index.number_of_shards": settings["number_of_shards"],
                         "index.number_of_replicas": settings["number_of_replicas"]},
            "mappings": {"dynamic": "strict", "_meta": {meta_key: meta},
                         "properties": properties}}


def layout_of(meta: Mapping[str, Any]) -> str:
    """The sparse layout an index's ``_meta.lightretriever`` records (older indices:
    ``rank_features``)."""
    layout = str(meta.get(LAYOUT_META, RANK_FEATURES))
    return choice(f"sparse layout in the index _meta ({LAYOUT_META})", layout, SPARSE_LAYOUTS)


def token_ids(bundle: Bundle) -> dict[str, str]:
    """Encoded sparse key -> token id (as the engine's key string), for every id."""
    tok = bundle.tokenizer
    keys = encode_keys(tok.id_to_token(i) or "" for i in range(bundle.vocab_size))
    return {key: str(i) for i, key in enumerate(keys)}


def id_keyed(weights: Mapping[str, float], ids: Mapping[str, str]) -> dict[str, float]:
    """A ``{lrk1 key: weight}`` sparse vector keyed by token id (``ids``:
    :func:`token_ids`), its positive weights only (a query's, or a stored document's)."""
    out: dict[str, float] = {}
    for key, weight in weights.items():
        w = float(weight)
        if w > 0.0:
            try:
                out[ids[key]] = w
            except KeyError:
                raise ConfigError(f"sparse key {key!r} is no token of the bundle's "
                                  "vocabulary") from None
    return out


@dataclass(frozen=True)
class SeismicSearch:
    """The SEISMIC search knobs of the sparse sub-query (``method_parameters``).

    Attributes:
        top_n: the query's heaviest tokens whose posting lists are searched (None: all of
            them; the engine's own default is 10).
        heap_factor: > 1 skips fewer clusters (more recall, slower), < 1 more (engine 1.0).
    """

    top_n: int | None = None
    heap_factor: float | None = None

    def __post_init__(self) -> None:
        if self.top_n is not None and (isinstance(self.top_n, bool)
                                       or not isinstance(self.top_n, int) or self.top_n < 1):
            raise ConfigError(f"seismic top_n={self.top_n!r} must be an integer >= 1")
        if self.heap_factor is not None and not (0.0 < float(self.heap_factor) < math.inf):
            raise ConfigError(f"seismic heap_factor={self.heap_factor!r} must be a number > 0")


def seismic_query(field: str, weights: Mapping[str, float], ids: Mapping[str, str], *, k: int,
                  knobs: SeismicSearch, filter: dict[str, Any] | None) -> dict[str, Any]:
    """``neural_sparse`` with ``query_tokens`` by token id (match_none if no positive
    weight); ``k`` hits per segment, then the filter (a ``bool`` around it)."""
    tokens = id_keyed(weights, ids)
    if not tokens:
        return {"match_none": {}}
    method: dict[str, Any] = {"k": int(k),
                              "top_n": int(knobs.top_n if knobs.top_n is not None else len(tokens))}
    if knobs.heap_factor is not None:
        method["heap_factor"] = float(knobs.heap_factor)
    query = {"neural_sparse": {field: {"query_tokens": dict(sorted(tokens.items())),
                                       "method_parameters": method}}}
    # not method_parameters.filter (a pre-filter): neural-search 3.6 builds it without
    # rewriting, so the commonest filters (terms, ids) fail ("does not implement
    # createWeight"); outside, the filter keeps those of the k hits that pass it
    return {"bool": {"must": [query], "filter": [filter]}} if filter is not None else query


def is_seismic_query(query: Mapping[str, Any], field: str) -> bool:
    """Whether ``query`` is one :func:`seismic_query` built for ``field`` (its companion
    index must run it)."""
    must = query.get("bool", {}).get("must") or [query]
    inner = must[0].get("neural_sparse", {}).get(field, {}) if len(must) == 1 else {}
    return "query_tokens" in inner
