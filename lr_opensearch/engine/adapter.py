"""What the engine adapters share: field names, the one chunked ``_msearch`` / ``_mget``
loop, search bodies, and index administration (create, check the bundle, settings, refresh,
bulk) for ingest, ``lr index`` and ``lr eval``. The body pieces and the engines' limits are
:mod:`lr_opensearch.engine.clauses`; what the engines answer, :mod:`lr_opensearch.engine.results`.

:class:`EngineAdapter` is the base of :class:`~lr_opensearch.engine.opensearch.OpenSearchAdapter`
and :class:`~lr_opensearch.engine.elasticsearch.ElasticsearchAdapter`, which add their query
DSL and the calls whose spelling differs between the two clients (``_send_msearch``,
``_send_mget``, ``_create``, ``_put_settings``, ``bulk``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from lr_opensearch.engine.clauses import (
    MAX_CLAUSE_COUNT,
    TEXT_QUERY_MAX_TERMS,
    Filter,
    boosted_clauses,
    filter_clauses,
    text_query_cut,
)
from lr_opensearch.engine.meta import meta_of
from lr_opensearch.engine.meta import update as update_meta
from lr_opensearch.engine.results import (
    DocRef,
    EngineResult,
    create_block_refusal,
    is_create_block,
    parse_response,
    refusal,
    status_of,
)
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



def one_index_name(index: str) -> str:
    """``index`` if it names one index (no wildcard, list, exclusion or ``_all``).

    Raises:
        ConfigError: anything an engine would expand to several indices.
    """
    if not index or index in ("_all", ".", "..") or any(c in index for c in "*?,") \
            or index.startswith(("-", "+")):
        raise ConfigError(f"{index!r} does not name one index by name: a pattern, a list or "
                          "_all is resolved to index names first (`lr index delete` does)")
    return index


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
    def dense_query(self, vector: np.ndarray, *, knn_depth: int, filter: Filter = None,
                    ef_search: int | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def sparse_query(self, sparse: Mapping[str, float], *, filter: Filter = None,
                     knn_depth: int | None = None, seismic: Any = None) -> dict[str, Any]:
        """The sparse dot product of ``sparse`` ({key: weight}); ``knn_depth`` (hits) and ``seismic``
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

    def calibrated_body(self, sub_queries: Sequence[Mapping[str, Any]], boosts: Sequence[float], *,
                        size: int, filter: Filter = None, source: Any = None,
                        timeout: str | None = None) -> dict[str, Any]:
        """One ``bool`` of the legs' clauses, each boosted (``boosts``: weight / the leg's
        calibrated scale, in leg order), the filter applied once, ``size`` hits: the
        ``calibrated`` fusion's one search (no pipeline, no candidates)."""
        flt = filter_clauses(filter)
        should = [c for q, b in zip(sub_queries, boosts, strict=True)
                  for c in boosted_clauses(q, b, flt)]
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
        return dict(self.meta_value(index, META_KEY) or {})

    def meta_value(self, index: str, key: str) -> Any:
        """``_meta[key]`` of an index (None when absent)."""
        return meta_of(self.index_mapping(index), key)

    def update_meta(self, index: str, key: str, change: Callable[[Any], Any]) -> Any:
        """Set ``_meta[key]`` to ``change(current value or None)`` (None: remove the key),
        keeping every other key, also against a concurrent writer; returns the new value.
        The one way ``_meta`` is changed (:func:`lr_opensearch.engine.meta.update`)."""
        return update_meta(self, index, key, change)

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
        found = {name: dict(meta_of(mapping, META_KEY) or {})
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
            if is_create_block(exc):
                raise self._create_blocked(index) from exc
            raise EngineError(f"the {self.engine} cluster refused to create index {index!r}: "
                              f"{exc}{self.create_hint}") from exc
        logger.info("created %s index %s (dim %d, bundle %s)", self.engine, index,
                    bundle.config.served_dim, bundle.bundle_id)
        return True

    create_hint = ""

    def _create_blocked(self, index: str) -> EngineError:
        """The refusal of a cluster whose ``cluster.blocks.create_index`` is set."""
        try:
            found = dict(self.client.cluster.get_settings(flat_settings=True))
        except self.transport_errors:
            found = {}
        return EngineError(create_block_refusal(self.engine, index, found))

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
        pass every key to keep). Only :meth:`update_meta` calls it: change a key there."""
        self._admin(f"updating the _meta of index {index!r}", self._put_meta, index, dict(meta))

    def _put_meta(self, index: str, meta: dict[str, Any]) -> Any:
        raise NotImplementedError

    def _create_doc(self, index: str, doc_id: str, doc: dict[str, Any]) -> Any:
        """Index ``doc`` as ``doc_id`` only if no such document exists (409 otherwise)."""
        raise NotImplementedError

    def _create_plain(self, index: str, settings: dict[str, Any]) -> Any:
        """Create an index with only ``settings`` (dynamic mapping)."""
        raise NotImplementedError

    def put_search_template(self, name: str, source: str) -> None:
        """Store a mustache search template (the in-cluster text-only query: OpenSearch's)."""
        raise ConfigError(f"search template {name!r}: stored search templates of the "
                          f"in-cluster query encoding are OpenSearch's, not {self.engine}'s")

    def refresh(self, index: str) -> None:
        self._admin(f"refreshing index {index!r}", self.client.indices.refresh, index=index)

    def count(self, index: str) -> int:
        resp = self._admin(f"counting index {index!r}", self.client.count, index=index)
        return int(resp["count"])

    def delete_index(self, index: str) -> None:
        """Delete one concrete index, named (a pattern, a list or ``_all`` is refused: the
        engine would expand it, ``action.destructive_requires_name`` being off by default)."""
        one_index_name(index)
        self._admin(f"deleting index {index!r}", self.client.indices.delete, index=index)

    def bulk(self, actions: Sequence[Mapping[str, Any]], *,
             max_chunk_bytes: int) -> list[tuple[bool, dict[str, Any]]]:
        """Send index actions through the client's own ``streaming_bulk`` helper, once
        (no retries here: the ingest writer owns them).

        Returns one (acknowledged?, item info) per action, in order. A request that got no
        answer gives every action of it ``{"status": "N/A", "error": ..., "exception": ...}``.
        """
        raise NotImplementedError
