"""What the engine adapters share: field names, hits, filters, response parsing, the one
chunked ``_msearch`` / ``_mget`` loop, and index administration (create, check the bundle,
settings, refresh, bulk) for ingest, ``lr index`` and ``lr eval``.

:class:`EngineAdapter` is the base of :class:`~lr_opensearch.engine.opensearch.OpenSearchAdapter`
and :class:`~lr_opensearch.engine.elasticsearch.ElasticsearchAdapter`, which add their query
DSL and the calls whose spelling differs between the two clients (``_send_msearch``,
``_send_mget``, ``_create``, ``_put_settings``, ``bulk``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch.engine.templates import META_KEY, check_meta
from lr_opensearch.errors import ConfigError, EngineError

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle
    from lr_opensearch.legs import FusionConfig

logger = logging.getLogger(__name__)

# The index layout's field names (docs/ARCHITECTURE.md): the one definition.
DENSE_FIELD = "lr_dense"
SPARSE_FIELD = "lr_sparse"
TEXT_FIELDS = ("title", "text")  # BM25 leg, highlighting
METADATA_FIELD = "metadata"  # a record's extra keys
# The index's vector fields by the kind of vector they hold (the document encoder's two
# outputs; the legs that search them are lr_opensearch.legs): `lr index info` reports them,
# the in-cluster query models are one per kind
DENSE_KIND, SPARSE_KIND = "dense", "sparse"
VECTOR_FIELDS = {DENSE_KIND: DENSE_FIELD, SPARSE_KIND: SPARSE_FIELD}
MSEARCH_CHUNK = 64  # searches per _msearch request
# The engines refuse a query whose rewritten tree holds more than this many clauses:
# OpenSearch's indices.query.bool.max_clause_count (default 1,024, Lucene's
# IndexSearcher.maxClauseCount; dynamic since 2.16). tests/test_real_bundle.py reads it
# from the node and runs queries of exactly that many clauses and one more.
MAX_CLAUSE_COUNT = 1024
# The engines refuse (HTTP 413) a request body larger than http.max_content_length, 100mb
# (104,857,600 bytes) unless set in the node's config, OpenSearch and Elasticsearch alike;
# the ingest's bulk requests stay well below it (indexing.config.DEFAULT_MAX_CHUNK_BYTES).
# tests/test_real_bundle.py sends a body of exactly this size and one byte more.
HTTP_MAX_CONTENT_LENGTH = 100 * 1024 * 1024
# Terms of a query text the BM25 clause keeps: multi_match makes one clause per analysed
# term and field, and the sparse leg one per distinct token of the query's first 512
# (query.tokens.DEFAULT_MAX_TOKENS): the two together stay within MAX_CLAUSE_COUNT
TEXT_QUERY_MAX_TERMS = 256
# At least as many pieces as the standard analyser makes terms (so counting them bounds the
# clauses): each CJK ideograph or kana alone (the standard tokenizer emits one term per
# ideograph and hiragana), a run of letters and digits (a hyphen, a dot, an underscore
# ends it, where the analyser may join), any other symbol alone (emoji are terms)
_CJK = r"\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_TERM_PIECE = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+|[^\w\s!-/:-@\[-`{{-~\u2000-\u206f\u3000-\u303f]")
# queries whose spec is keyed by the field they search ({"match": {"text": {...}}}): a
# boost goes inside the field's object
FIELD_KEYED_QUERIES = ("match", "knn", "neural", "neural_sparse", "term")

Filter = Mapping[str, Any] | Sequence[Mapping[str, Any]] | None


def text_query_cut(text: str, max_terms: int = TEXT_QUERY_MAX_TERMS) -> int:
    """Where to cut ``text`` so that the engine's analyser makes at most ``max_terms`` terms
    of it (``len(text)``: keep it whole). Counts ``_TERM_PIECE``s, never fewer than the
    terms, so a text of hyphenated words or an unspaced CJK run is cut as a spaced one."""
    for n, piece in enumerate(_TERM_PIECE.finditer(text)):
        if n == max_terms:  # the first piece over the limit
            return piece.start()
    return len(text)


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


def filter_clauses(filter: Filter) -> list[dict[str, Any]]:
    """A user's filter (one query clause or a list of clauses) as a list of clauses."""
    if filter is None:
        return []
    if isinstance(filter, Mapping):
        return [dict(filter)]
    if isinstance(filter, Sequence) and all(isinstance(f, Mapping) for f in filter):
        return [dict(f) for f in filter]
    raise ConfigError(
        f"filter must be a query clause (dict) or a list of clauses, got {type(filter).__name__}"
    )


def one_filter(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"bool": {"filter": clauses}}


def vector_list(vector: np.ndarray | Sequence[float]) -> list[float]:
    """A float32 vector as JSON-ready floats. vector: [d]."""
    arr = np.asarray(vector, dtype=np.float32)
    if arr.ndim != 1 or not np.all(np.isfinite(arr)):
        raise ConfigError(f"a dense query vector must be 1-d and finite, got shape {arr.shape}")
    return arr.tolist()


def rank_feature_clauses(sparse: Mapping[str, float], field: str) -> list[dict[str, Any]]:
    """One linear ``rank_feature`` clause per key, boost = query count (sorted by key)."""
    clauses = []
    for key in sorted(sparse):
        count = float(sparse[key])
        if count <= 0.0:
            continue
        clauses.append({"rank_feature": {"field": f"{field}.{key}", "boost": count, "linear": {}}})
    return clauses


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


class EngineAdapter:
    """The engine-neutral half of an adapter: BM25 clause, search bodies, ``_msearch`` in
    chunks, ``_mget`` of a page's sources. Subclasses add the query DSL and transport.

    Args:
        client: the engine's client.
        dense_field / sparse_field: the index's LightRetriever fields.
    """

    engine = "?"
    transport_errors: tuple[type[BaseException], ...] = ()

    def __init__(
        self, client: Any, *, dense_field: str = DENSE_FIELD, sparse_field: str = SPARSE_FIELD
    ):
        self.client = client
        self.dense_field = dense_field
        self.sparse_field = sparse_field
        self._told_capped = False

    # ---- query clauses (the engine's DSL) ----------------------------------------------
    def dense_query(self, vector: np.ndarray, *, k: int, filter: Filter = None,
                    ef_search: int | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def sparse_query(self, sparse: Mapping[str, float], *, filter: Filter = None,
                     k: int | None = None, seismic: Any = None) -> dict[str, Any]:
        """The sparse dot product of ``sparse`` ({key: weight}); ``k`` (hits) and ``seismic``
        (:class:`~lr_opensearch.engine.seismic.SeismicSearch`) serve an approximate layout."""
        raise NotImplementedError

    def server_fusion_blocker(self, config: FusionConfig) -> str | None:
        """Why the cluster cannot fuse ``config`` itself (None: it can)."""
        raise NotImplementedError

    def server_fusion_slower(self, documents: int) -> str | None:
        """Why ``fusion="auto"`` should fuse on the client although the cluster can fuse,
        for a target of ``documents`` documents (None: fuse on the server)."""
        return None

    def hybrid_body(self, sub_queries: Sequence[Mapping[str, Any]], config: FusionConfig, *,
                    size: int, per_leg: int | None = None, source: Any = None,
                    timeout: str | None = None) -> dict[str, Any]:
        """One search body that the cluster fuses (only when the blocker says None):
        ``per_leg`` hits collected per sub-query (default ``size``), ``size`` returned (the
        engine's ``size``: the page's end)."""
        raise NotImplementedError

    def text_query(self, text: str, *, filter: Filter = None,
                   fields: Sequence[str] | None = None) -> dict[str, Any]:
        """BM25 baseline: ``multi_match`` over ``fields`` (default title and text; one field:
        a plain ``match``, which the engine can skip through where the two-field
        ``multi_match``, a ``dis_max``, lets it skip less); of a longer text, the part
        holding its first :data:`TEXT_QUERY_MAX_TERMS` terms, said once per adapter."""
        cut = text_query_cut(text)
        if cut < len(text):
            if not self._told_capped:
                self._told_capped = True
                logger.info("a query of more than %d terms: its BM25 clause is capped at the "
                            "first %d (the engine refuses more than %d clauses)",
                            TEXT_QUERY_MAX_TERMS, TEXT_QUERY_MAX_TERMS, MAX_CLAUSE_COUNT)
            text = text[:cut]
        fields = list(TEXT_FIELDS if fields is None else fields)
        unknown = sorted(set(fields) - set(TEXT_FIELDS))
        if unknown or not fields:
            raise ConfigError(f"BM25 searches the text fields {', '.join(TEXT_FIELDS)}; got "
                              f"{fields!r}")
        query: dict[str, Any] = ({"match": {fields[0]: {"query": text}}} if len(fields) == 1
                                 else {"multi_match": {"query": text, "fields": fields}})
        clauses = filter_clauses(filter)
        return {"bool": {"must": [query], "filter": clauses}} if clauses else query

    def one_query_blocker(self, config: FusionConfig) -> str | None:
        """Why the legs of ``config`` cannot be searched as one ``bool`` query here (None:
        they can; :meth:`calibrated_body`)."""
        return None

    def boosted_clauses(self, query: Mapping[str, Any], boost: float,
                        filter: Sequence[Mapping[str, Any]] = ()) -> list[dict[str, Any]]:
        """``query`` (one leg's sub-query) as ``should`` clauses of one ``bool`` that score
        ``boost`` x its score: a pure disjunction (the sparse leg's ``bool.should``) is
        flattened, and the ``bool`` a leg wraps around itself to apply ``filter`` is dropped
        (the one query applies it once), so the engine sees a flat disjunction it can skip
        through (block-max WAND). Anything else keeps its form with the boost multiplied in."""
        ((name, spec),) = query.items()
        if name == "match_none":
            return []
        if name == "bool":
            return self._boosted_bool(dict(spec), boost, [dict(f) for f in filter])
        spec = dict(spec)
        if name in FIELD_KEYED_QUERIES and len(spec) == 1 and "field" not in spec:
            ((fld, inner),) = spec.items()
            inner = dict(inner) if isinstance(inner, Mapping) else {"query": inner}
            inner["boost"] = float(inner.get("boost", 1.0)) * boost
            return [{name: {fld: inner}}]
        spec["boost"] = float(spec.get("boost", 1.0)) * boost
        return [{name: spec}]

    def _boosted_bool(self, spec: dict[str, Any], boost: float,
                      filter: list[dict[str, Any]]) -> list[dict[str, Any]]:
        whole = [{"bool": {**spec, "boost": float(spec.get("boost", 1.0)) * boost}}]
        inner = float(spec.pop("boost", 1.0)) * boost
        own = spec.pop("filter", [])
        own = [own] if isinstance(own, Mapping) else list(own)
        must, should = list(spec.pop("must", [])), list(spec.pop("should", []))
        msm = spec.pop("minimum_should_match", None)
        if spec or (own and own != filter):
            return whole
        if len(must) == 1 and not should:
            return self.boosted_clauses(must[0], inner, filter)
        if should and not must and msm in (None, 1, "1"):
            return [c for q in should for c in self.boosted_clauses(q, inner, filter)]
        return whole

    def calibrated_body(self, sub_queries: Sequence[Mapping[str, Any]], boosts: Sequence[float], *,
                        size: int, filter: Filter = None, source: Any = None,
                        timeout: str | None = None) -> dict[str, Any]:
        """One ``bool`` of the legs' clauses, each boosted (``boosts``: weight / the leg's
        calibrated scale, in leg order), the filter applied once, ``size`` hits: the
        ``calibrated`` fusion's one search (no pipeline, no candidates)."""
        flt = filter_clauses(filter)
        should = [c for q, b in zip(sub_queries, boosts, strict=True)
                  for c in self.boosted_clauses(q, b, flt)]
        query: dict[str, Any] = {"bool": {"should": should, "minimum_should_match": 1}}
        if flt:
            query["bool"]["filter"] = flt
        return self.body(query if should else {"match_none": {}}, size=size, source=source,
                         timeout=timeout)

    @staticmethod
    def body(
        query: Mapping[str, Any],
        *,
        size: int,
        source: Any = None,
        timeout: str | None = None,
        explain: bool = False,
        pipeline: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A search body: query, size, ``_source`` selection, timeout, inline pipeline."""
        body: dict[str, Any] = {"size": int(size), "query": dict(query), "track_total_hits": False}
        if source is not None:
            body["_source"] = source
        if timeout:
            body["timeout"] = timeout
        if explain:
            body["explain"] = True
        if pipeline is not None:
            body["search_pipeline"] = dict(pipeline)
        return body

    def fetch_sources(self, index: str, refs: Sequence[str | DocRef],
                      source: Any) -> dict[Any, Any]:
        """``_source`` (as selected by ``source``) of the given documents, one ``_mget``.

        ``refs``: ``_id`` strings (documents of ``index``) or ``(concrete index, _id)``
        pairs (a target of several indices: each document from its own index). Returns
        ``{ref: _source}`` for the documents found.

        Hybrid search retrieves many candidates per sub-query but returns a page of k; it
        asks for the candidates without ``_source`` and fetches the page's here.
        """
        unique = list(dict.fromkeys(refs))
        if not unique:
            return {}
        docs = []
        for ref in unique:
            where, doc_id = ref if isinstance(ref, tuple) else (None, ref)
            docs.append({"_id": doc_id, "_source": source, **({"_index": where} if where else {})})
        resp = self._mget(index, docs)
        return {ref: d.get("_source") for ref, d in zip(unique, resp["docs"], strict=True)
                if d.get("found")}

    def _mget(self, index: str, docs: list[dict[str, Any]]) -> Any:
        try:  # documents that name their index need none in the path (a target of several)
            return self._send_mget(None if all("_index" in d for d in docs) else index, docs)
        except self.transport_errors as exc:
            raise EngineError(f"_mget of {len(docs)} documents on {self.engine} index "
                              f"{index!r} failed: {refusal(exc)}") from exc

    def msearch(
        self,
        index: str,
        bodies: Sequence[Mapping[str, Any]],
        *,
        what: str = "search",
        preferences: Sequence[str | None] | None = None,
    ) -> list[EngineResult]:
        """Run bodies through ``_msearch`` in chunks; one EngineResult per body, in order.
        ``preferences``: per body, a search ``preference`` (e.g. ``_shards:0``) or None."""
        if preferences is not None and len(preferences) != len(bodies):
            raise ConfigError(f"{len(preferences)} preferences for {len(bodies)} bodies")
        results: list[EngineResult] = []
        for start in range(0, len(bodies), MSEARCH_CHUNK):
            chunk = bodies[start : start + MSEARCH_CHUNK]
            lines: list[Any] = []
            routes = [self._route(body) for body in chunk]
            for k, body in enumerate(chunk):
                header: dict[str, Any] = {"index": routes[k] or index}
                pref = preferences[start + k] if preferences is not None else None
                if pref is not None:
                    header["preference"] = pref
                lines.extend((header, dict(body)))
            try:
                resp = self._send_msearch(lines)
            except self.transport_errors as exc:
                raise EngineError(f"_msearch on {self.engine} index {index!r} failed: "
                                  f"{refusal(exc)}") from exc
            for i, item in enumerate(resp["responses"]):
                result = parse_response(item, f"{what} #{start + i} on {routes[i] or index!r}")
                results.append(self._unroute(result) if routes[i] else result)
        return results

    def target(self, index: str, body: Mapping[str, Any]) -> str:
        """The index that runs ``body`` for a search of ``index`` (``msearch``'s routing)."""
        return self._route(body) or index

    def _route(self, body: Mapping[str, Any]) -> str | None:
        """Another index that must run ``body`` (None: the target asked for)."""
        return None

    def _unroute(self, result: EngineResult) -> EngineResult:
        """A routed body's result as if the target had answered it."""
        return result

    def _send_msearch(self, lines: list[Any]) -> Any:
        raise NotImplementedError

    def _send_mget(self, index: str | None, docs: list[dict[str, Any]]) -> Any:
        raise NotImplementedError

    # ---- index administration ------------------------------------------------------
    def _admin(self, what: str, call: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one administrative call; a refusal or no answer becomes an EngineError."""
        try:
            return call(*args, **kwargs)
        except self.transport_errors as exc:
            raise EngineError(f"{what} on {self.engine} failed: {refusal(exc)}") from exc

    def index_exists(self, index: str) -> bool:
        return bool(self._admin(f"checking index {index!r}", self.client.indices.exists,
                                index=index))

    def index_closed(self, index: str) -> bool:
        """True if ``index`` (one concrete index) exists and is closed."""
        resp = self._admin(f"reading the state of index {index!r}", self.client.cluster.state,
                           metric="metadata", index=index)
        found = dict(resp).get("metadata", {}).get("indices", {}).get(index, {})
        return found.get("state") == "close"

    def alias_targets(self, name: str) -> list[str]:
        """The indices ``name`` is an alias of ([] when it is no alias)."""
        if not self._admin(f"checking alias {name!r}", self.client.indices.exists_alias,
                           name=name):
            return []
        resp = self._admin(f"reading alias {name!r}", self.client.indices.get_alias, name=name)
        return sorted(dict(resp))

    def index_mapping(self, index: str) -> dict[str, Any]:
        """The index's ``mappings`` object (of a target of several indices: the first's).

        Raises:
            EngineError: the index does not exist (with how to create it), or no answer.
        """
        mappings = self.index_mappings(index)
        if not mappings:
            raise EngineError(f"no {self.engine} index matches {index!r}; create one with `lr "
                              f"index create --bundle BUNDLE --index NAME` or ingest into it")
        return next(iter(mappings.values()))

    def index_mappings(self, target: str, *, closed: bool = False) -> dict[str, dict[str, Any]]:
        """The ``mappings`` of every concrete index behind ``target`` (an index, a list
        ``a,b``, an alias or a wildcard: a wildcard may match none), by index name; with
        ``closed``, a wildcard matches closed indices too.

        Raises:
            EngineError: a named index does not exist (with how to create it), or no answer.
        """
        extra = {"expand_wildcards": "open,closed"} if closed else {}
        try:
            resp = self.client.indices.get_mapping(index=target, **extra)
        except self.transport_errors as exc:
            if status_of(exc) == 404:
                raise EngineError(f"{self.engine} index {target!r} does not exist; create it "
                                  f"with `lr index create --bundle BUNDLE --index {target}` or "
                                  "ingest into it") from exc
            raise EngineError(f"cannot read the mapping of {self.engine} index {target!r}: "
                              f"{exc}") from exc
        return {str(name): dict(body["mappings"]) for name, body in dict(resp).items()}

    def index_meta(self, index: str) -> dict[str, Any]:
        """``_meta.lightretriever`` of an index ({} if the index has no such block)."""
        return dict(self.index_mapping(index).get("_meta", {}).get(META_KEY, {}))

    def check_bundle(self, index: str, bundle: Bundle) -> dict[str, Any]:
        """Check that every concrete index behind ``index`` (one index, ``a,b``, an alias, a
        wildcard) was created for ``bundle``; return the first one's ``_meta.lightretriever``.

        Raises:
            BundleMismatchError: another bundle id, dense dimension or key encoding, or no
                LightRetriever ``_meta``.
            EngineError: the index does not exist or the cluster does not answer.
        """
        return self._check_mappings(index, self.index_mappings(index), bundle)

    def _check_mappings(self, target: str, mappings: Mapping[str, Mapping[str, Any]],
                        bundle: Bundle) -> dict[str, Any]:
        """The bundle rule on each concrete index's mapping; the first one's ``_meta``."""
        if not mappings:
            raise EngineError(f"no {self.engine} index matches {target!r}; create one with `lr "
                              f"index create --bundle BUNDLE --index NAME` or ingest into it")
        found = {name: dict(mapping.get("_meta", {}).get(META_KEY, {}))
                 for name, mapping in sorted(mappings.items())}
        ids = {str(meta.get("bundle_id")) for meta in found.values()}
        if len(found) > 1 and len(ids) > 1:
            from lr_opensearch.errors import BundleMismatchError

            parts = "; ".join(f"{name}: {meta.get('bundle_id') or 'not a LightRetriever index'}"
                              for name, meta in found.items())
            raise BundleMismatchError(
                f"{target!r} mixes indices built with different bundles ({parts}); one search "
                f"uses one bundle ({bundle.bundle_id} here): search the indices of each bundle "
                "separately, or point the alias at indices of one bundle")
        metas = [check_meta(meta, name, bundle) for name, meta in found.items()]
        return metas[0]

    def index_body(self, bundle: Bundle, *, m: int = 16, ef_construction: int = 128,
                   shards: int = 1, replicas: int = 0, **engine_opts: Any) -> dict[str, Any]:
        """The create-index body for ``bundle`` (the engine's template): HNSW ``m`` /
        ``ef_construction``, sharding, and the engine's own options."""
        raise NotImplementedError

    def create_index(self, index: str, bundle: Bundle, **opts: Any) -> bool:
        """Create ``index`` for ``bundle`` (``opts``: the template's, see :meth:`index_body`).

        Returns:
            True if created; False if it already existed (another worker may have created it
            first: callers check the bundle then).

        Raises:
            EngineError: any other refusal, with the server's reason.
        """
        body = self.index_body(bundle, **opts)
        # where the bundle was on the machine that created the index: `lr search --index`
        # finds it there (or in the bundle store by id) without --bundle; a bundle object
        # that is not a directory on disk records none
        where = getattr(bundle, "path", None)
        if where is not None:
            body["mappings"]["_meta"][META_KEY]["bundle_path"] = str(Path(where).resolve())
        try:
            self._create(index, body)
        except self.transport_errors as exc:
            if status_of(exc) == 400 and "resource_already_exists" in str(exc):
                return False
            raise EngineError(f"the {self.engine} cluster refused to create index {index!r}: "
                              f"{exc}{self.create_hint}") from exc
        logger.info("created %s index %s (dim %d, bundle %s)", self.engine, index,
                    bundle.config.served_dim, bundle.bundle_id)
        return True

    create_hint = ""

    def _create(self, index: str, body: dict[str, Any]) -> Any:
        raise NotImplementedError

    def index_settings(self, index: str) -> dict[str, Any]:
        """The index's ``settings.index`` object."""
        resp = self._admin(f"reading the settings of index {index!r}",
                           self.client.indices.get_settings, index=index)
        return dict(next(iter(dict(resp).values()))["settings"]["index"])

    def put_index_settings(self, index: str, settings: Mapping[str, Any]) -> None:
        """Set dynamic ``index.*`` settings (a None value resets one to the default)."""
        self._admin(f"changing the settings of index {index!r}", self._put_settings, index,
                    {"index": dict(settings)})

    def _put_settings(self, index: str, body: dict[str, Any]) -> Any:
        raise NotImplementedError

    def put_index_meta(self, index: str, meta: Mapping[str, Any]) -> None:
        """Replace the ``_meta`` object of the index mapping (the engines replace it whole:
        pass every key to keep, ``lightretriever`` included)."""
        self._admin(f"updating the _meta of index {index!r}", self._put_meta, index, dict(meta))

    def _put_meta(self, index: str, meta: dict[str, Any]) -> Any:
        raise NotImplementedError

    def refresh(self, index: str) -> None:
        self._admin(f"refreshing index {index!r}", self.client.indices.refresh, index=index)

    def count(self, index: str) -> int:
        resp = self._admin(f"counting index {index!r}", self.client.count, index=index)
        return int(resp["count"])

    def delete_index(self, index: str) -> None:
        self._admin(f"deleting index {index!r}", self.client.indices.delete, index=index)

    def bulk(self, actions: Sequence[Mapping[str, Any]], *,
             max_chunk_bytes: int) -> list[tuple[bool, dict[str, Any]]]:
        """Send index actions through the client's own ``streaming_bulk`` helper, once
        (no retries here: the ingest writer owns them).

        Returns one (acknowledged?, item info) per action, in order. A request that got no
        answer gives every action of it ``{"status": "N/A", "error": ..., "exception": ...}``.
        """
        raise NotImplementedError


def refusal(exc: BaseException) -> str:
    """An engine client's exception as words: HTTP 413 says which limit (the clients print
    it as a bare ``TransportError(413, '')``), anything else as the client words it."""
    if status_of(exc) == 413:
        return (f"HTTP 413: the request is larger than the cluster's http.max_content_length "
                f"({HTTP_MAX_CONTENT_LENGTH // 2**20}mb unless set in opensearch.yml / "
                "elasticsearch.yml)")
    return str(exc)


def status_of(exc: BaseException) -> Any:
    """The HTTP status of an engine client's exception (either client), or None."""
    status = getattr(exc, "status_code", None)
    if status is None:
        status = getattr(getattr(exc, "meta", None), "status", None)
    return status
