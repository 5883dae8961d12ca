"""Rendering ``index_templates/*.json``, and the rule an index's ``_meta`` must follow.

The JSON files are the single source of the index layout and the hybrid pipelines; this
module only fills their ``"${name}"`` placeholders (typed: an int stays an int). Talking
to the cluster (creating, checking) is the engine adapters' job
(:mod:`lr_opensearch.engine.adapter`). See ``index_templates/README.md``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lr_opensearch.errors import BundleMismatchError, ConfigError
from lr_opensearch.options import COMBINATIONS, KNN_ENGINES, NORMALIZATIONS, choice
from lr_opensearch.version import __version__

if TYPE_CHECKING:
    from lr_opensearch.bundle import Bundle

logger = logging.getLogger(__name__)

META_KEY = "lightretriever"


def template_dir() -> Path:
    """The ``index_templates`` folder: env LR_INDEX_TEMPLATES, else the installed package's
    (the repository's folder in an editable install)."""
    env = os.environ.get("LR_INDEX_TEMPLATES")
    if env:
        path = Path(env)
    else:
        spec = importlib.util.find_spec("index_templates")
        where = list(spec.submodule_search_locations or []) if spec else []
        path = Path(where[0]) if where else Path(__file__).resolve().parent.parent / "index_templates"
    if not (path / "opensearch" / "index.json").is_file():
        raise ConfigError(f"index templates not found in {path} (expected "
                          "opensearch/index.json); set LR_INDEX_TEMPLATES to the folder")
    return path


@lru_cache(maxsize=16)
def _load(relative: str) -> str:
    path = template_dir() / relative
    try:
        text = path.read_text(encoding="utf-8")
        json.loads(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read index template {path}: {exc}") from exc
    return text


def render_template(relative: str, values: dict[str, Any]) -> dict[str, Any]:
    """Load ``index_templates/<relative>`` and replace every ``"${name}"`` by ``values[name]``.

    Raises:
        ConfigError: a placeholder has no value, or a value is not used by the template.
    """
    used: set[str] = set()

    def fill(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: fill(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fill(v) for v in node]
        if isinstance(node, str) and node.startswith("${") and node.endswith("}"):
            name = node[2:-1]
            if name not in values:
                raise ConfigError(f"index template {relative}: no value for placeholder {node}")
            used.add(name)
            return values[name]
        return node

    body = fill(json.loads(_load(relative)))
    unused = set(values) - used
    if unused:
        raise ConfigError(f"index template {relative} has no placeholder for {sorted(unused)}")
    return body


def _positive(name: str, value: int) -> int:
    if int(value) != value or value < 1:
        raise ConfigError(f"{name}={value!r} must be a positive integer")
    return int(value)


def render_index_body(*, dense_dim: int, bundle_id: str, key_encoding: str = "lrk1",
                      engine: str = "lucene", m: int = 16, ef_construction: int = 128,
                      shards: int = 1, replicas: int = 0) -> dict[str, Any]:
    """The OpenSearch create-index body (settings, mappings, ``_meta``) for a bundle.

    Args:
        dense_dim: served dense dimension (``knn_vector`` dimension).
        bundle_id: the bundle's id, recorded in ``_meta.lightretriever``.
        key_encoding: sparse key encoding name (``lrk1``).
        engine: k-NN engine, ``lucene`` (pure Java, default) or ``faiss`` (needs the
            plugin's native libraries, absent from the Maven Central build).
        m, ef_construction: HNSW graph parameters.
        shards, replicas: index sharding.
    """
    if engine not in KNN_ENGINES:
        raise ConfigError(f"engine={engine!r}; valid engines: {', '.join(KNN_ENGINES)}")
    if replicas < 0:
        raise ConfigError(f"replicas={replicas} must be >= 0")
    return render_template("opensearch/index.json", {
        "dense_dim": _positive("dense_dim", dense_dim), "bundle_id": str(bundle_id),
        "key_encoding": key_encoding, "engine": engine, "m": _positive("m", m),
        "ef_construction": _positive("ef_construction", ef_construction),
        "shards": _positive("shards", shards), "replicas": int(replicas),
        "library_version": __version__})


def render_es_index_body(*, dense_dim: int, bundle_id: str, key_encoding: str = "lrk1",
                         m: int = 16, ef_construction: int = 128, shards: int = 1,
                         replicas: int = 0) -> dict[str, Any]:
    """The Elasticsearch create-index body (``dense_vector`` max_inner_product + rank_features)."""
    return render_template("elasticsearch/index.json", {
        "dense_dim": _positive("dense_dim", dense_dim), "bundle_id": str(bundle_id),
        "key_encoding": key_encoding, "m": _positive("m", m),
        "ef_construction": _positive("ef_construction", ef_construction),
        "shards": _positive("shards", shards), "replicas": int(replicas),
        "library_version": __version__})


def render_token_index_body(*, token_dim: int, bundle_id: str, engine: str = "lucene",
                            m: int = 16, ef_construction: int = 128, shards: int = 1,
                            replicas: int = 0) -> dict[str, Any]:
    """The OpenSearch create-index body of a UR²N token index (one document per token, one
    per corpus record; docs/ARCHITECTURE.md "The token index").

    Args:
        token_dim: the UR²N bundle's token-embedding dimension (``lr_token`` dimension).
        bundle_id: the UR²N bundle's id, recorded in ``_meta.lightretriever``.
        engine, m, ef_construction, shards, replicas: as
            :func:`render_index_body`.
    """
    if engine not in KNN_ENGINES:
        raise ConfigError(f"engine={engine!r}; valid engines: {', '.join(KNN_ENGINES)}")
    if replicas < 0:
        raise ConfigError(f"replicas={replicas} must be >= 0")
    return render_template("opensearch/token_index.json", {
        "token_dim": _positive("token_dim", token_dim), "bundle_id": str(bundle_id),
        "engine": engine, "m": _positive("m", m),
        "ef_construction": _positive("ef_construction", ef_construction),
        "shards": _positive("shards", shards), "replicas": int(replicas),
        "library_version": __version__})


def render_hybrid_pipeline(*weights: float, technique: str = "min_max",
                           combination: str = "arithmetic_mean",
                           rank_constant: int = 60) -> dict[str, Any]:
    """The search-pipeline body for the ``hybrid`` query, one weight per sub-query.

    Args:
        weights: combination weights in sub-query order (the searched legs in the
            registry's order, ``FusionConfig.leg_weights``); at least one.
        technique: normalization (``min_max``, ``l2``); ignored for RRF.
        combination: ``arithmetic_mean``, ``geometric_mean``, ``harmonic_mean`` or ``rrf``.
        rank_constant: RRF's k (only for ``combination="rrf"``).
    """
    choice("combination", combination, COMBINATIONS)
    values = [float(w) for w in weights]
    if not values:
        raise ConfigError("a hybrid pipeline needs one weight per sub-query; got none")
    if min(values) < 0 or sum(values) <= 0:
        raise ConfigError(f"weights {values} must be >= 0 and not all 0")
    if combination == "rrf":
        return render_template("opensearch/hybrid_rrf_pipeline.json", {
            "rank_constant": _positive("rank_constant", rank_constant), "weights": values})
    choice("technique", technique, NORMALIZATIONS)
    return render_template("opensearch/hybrid_pipeline.json", {
        "technique": technique, "combination": combination, "weights": values})


def check_meta(meta: dict[str, Any], index: str, bundle: Bundle) -> dict[str, Any]:
    """Check an index's ``_meta.lightretriever`` against ``bundle``; return ``meta``.

    The engine adapters read the mapping (``EngineAdapter.check_bundle``); this is the rule.

    Raises:
        BundleMismatchError: no LightRetriever ``_meta``, or another bundle id, dense
            dimension or key encoding.
    """
    if not meta:
        raise BundleMismatchError(f"index {index!r} was not created by lr-opensearch (its "
                                  "mapping has no _meta.lightretriever); create a new index "
                                  "with `lr index create`")
    expected = {"bundle_id": str(bundle.bundle_id), "dense_dim": int(bundle.config.served_dim),
                "key_encoding": str(bundle.config.key_encoding)}
    wrong = [f"{k}: index has {meta.get(k)!r}, bundle has {v!r}"
             for k, v in expected.items() if meta.get(k) != v]
    if wrong:
        raise BundleMismatchError(
            f"index {index!r} was built with a different bundle ({'; '.join(wrong)}). "
            f"Search/ingest it with the bundle it was built with, or re-create the index "
            f"for bundle {getattr(bundle, 'path', bundle.bundle_id)}.")
    return meta
