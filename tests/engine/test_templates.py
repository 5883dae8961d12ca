"""Unit tests of index template rendering (no cluster needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lr_opensearch import __version__
from lr_opensearch.engine.client import _split_url, make_client
from lr_opensearch.engine.templates import (
    render_es_index_body,
    render_hybrid_pipeline,
    render_index_body,
    render_template,
    template_dir,
)
from lr_opensearch.errors import ConfigError


def _placeholders(node: object) -> list[str]:
    if isinstance(node, dict):
        return [p for v in node.values() for p in _placeholders(v)]
    if isinstance(node, list):
        return [p for v in node for p in _placeholders(v)]
    return [node] if isinstance(node, str) and node.startswith("${") else []


def test_every_template_is_json_and_fully_rendered() -> None:
    files = sorted(template_dir().rglob("*.json"))
    assert {f.relative_to(template_dir()).as_posix() for f in files} >= {
        "opensearch/index.json", "opensearch/hybrid_pipeline.json",
        "opensearch/hybrid_rrf_pipeline.json", "elasticsearch/index.json"}
    rendered = [render_index_body(dense_dim=8, bundle_id="b"),
                render_es_index_body(dense_dim=8, bundle_id="b"),
                render_hybrid_pipeline(0.7, 0.3),
                render_hybrid_pipeline(0.5, 0.5, combination="rrf")]
    for body in rendered:
        assert _placeholders(body) == []


def test_index_body_fills_typed_values() -> None:
    body = render_index_body(dense_dim=384, bundle_id="abc123", key_encoding="lrk1",
                             m=32, ef_construction=256, shards=2, replicas=1)
    dense = body["mappings"]["properties"]["lr_dense"]
    assert dense["type"] == "knn_vector" and dense["dimension"] == 384
    assert dense["method"] == {"name": "hnsw", "space_type": "innerproduct", "engine": "lucene",
                               "parameters": {"m": 32, "ef_construction": 256}}
    assert body["mappings"]["properties"]["lr_sparse"] == {"type": "rank_features"}
    assert body["settings"]["index"] == {"number_of_shards": 2, "number_of_replicas": 1,
                                         "knn": True}
    meta = body["mappings"]["_meta"]["lightretriever"]
    assert meta["bundle_id"] == "abc123" and meta["dense_dim"] == 384
    assert meta["key_encoding"] == "lrk1" and meta["library_version"] == __version__
    assert set(body["mappings"]["properties"]) == {"lr_dense", "lr_sparse", "title", "text",
                                                   "metadata"}


def test_template_file_is_the_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Editing the JSON changes what is rendered: nothing is duplicated in Python."""
    src = template_dir()
    for rel in ("opensearch/index.json", "opensearch/hybrid_pipeline.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((src / rel).read_text())
    body = json.loads((tmp_path / "opensearch/index.json").read_text())
    body["mappings"]["properties"]["text"]["analyzer"] = "english"
    (tmp_path / "opensearch/index.json").write_text(json.dumps(body))
    monkeypatch.setenv("LR_INDEX_TEMPLATES", str(tmp_path))
    render_template.__globals__["_load"].cache_clear()
    try:
        out = render_index_body(dense_dim=4, bundle_id="x")
        assert out["mappings"]["properties"]["text"] == {"type": "text", "analyzer": "english"}
    finally:
        render_template.__globals__["_load"].cache_clear()


def test_render_rejects_missing_and_unused_values() -> None:
    with pytest.raises(ConfigError, match="no value for placeholder"):
        render_template("opensearch/hybrid_pipeline.json", {"technique": "min_max"})
    with pytest.raises(ConfigError, match="no placeholder for"):
        render_template("opensearch/hybrid_pipeline.json", {
            "technique": "min_max", "combination": "arithmetic_mean", "weights": [0.7, 0.3],
            "bogus": 1})


@pytest.mark.parametrize("kwargs, match", [
    ({"engine": "nmslib"}, "valid engines: lucene, faiss"),
    ({"dense_dim": 0}, "dense_dim"),
    ({"m": 2.5}, "m=2.5"),
    ({"replicas": -1}, "replicas"),
])
def test_index_body_validation(kwargs: dict, match: str) -> None:
    args = {"dense_dim": 8, "bundle_id": "b", **kwargs}
    with pytest.raises(ConfigError, match=match):
        render_index_body(**args)


def test_es_body_uses_max_inner_product() -> None:
    body = render_es_index_body(dense_dim=16, bundle_id="b", m=24, ef_construction=100)
    dense = body["mappings"]["properties"]["lr_dense"]
    assert dense == {"type": "dense_vector", "dims": 16, "index": True,
                     "similarity": "max_inner_product",
                     "index_options": {"type": "hnsw", "m": 24, "ef_construction": 100}}


def test_hybrid_pipeline_bodies() -> None:
    body = render_hybrid_pipeline(0.7, 0.3)
    proc = body["phase_results_processors"][0]["normalization-processor"]
    assert proc["normalization"] == {"technique": "min_max"}
    assert proc["combination"] == {"technique": "arithmetic_mean",
                                   "parameters": {"weights": [0.7, 0.3]}}
    rrf = render_hybrid_pipeline(0.6, 0.4, combination="rrf", rank_constant=40)
    comb = rrf["phase_results_processors"][0]["score-ranker-processor"]["combination"]
    assert comb == {"technique": "rrf", "rank_constant": 40,
                    "parameters": {"weights": [0.6, 0.4]}}
    three = render_hybrid_pipeline(0.3, 0.2, 0.5)["phase_results_processors"][0]
    assert three["normalization-processor"]["combination"]["parameters"] == {
        "weights": [0.3, 0.2, 0.5]}
    with pytest.raises(ConfigError, match="valid options: arithmetic_mean"):
        render_hybrid_pipeline(0.7, 0.3, combination="max")
    with pytest.raises(ConfigError, match="valid options: min_max"):
        render_hybrid_pipeline(0.7, 0.3, technique="minmax")


def test_client_url_auth_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _split_url("https://u%40x:p%3Aw@host:9201") == ("https://host:9201", "u@x", "p:w")
    with pytest.raises(ConfigError, match="http"):
        _split_url("localhost:9200")
    monkeypatch.setenv("LR_OPENSEARCH_URL", "https://search.example:9443")
    monkeypatch.setenv("LR_OPENSEARCH_USER", "alice")
    monkeypatch.setenv("LR_OPENSEARCH_PASSWORD", "secret")
    monkeypatch.setenv("LR_OPENSEARCH_VERIFY_CERTS", "false")
    conn = make_client().transport.get_connection()
    assert conn.host == "https://search.example:9443" and conn.use_ssl
    assert conn.http_auth == ("alice", "secret")
    assert conn.pool.cert_reqs == "CERT_NONE"
    monkeypatch.setenv("LR_OPENSEARCH_VERIFY_CERTS", "true")
    monkeypatch.setenv("LR_OPENSEARCH_CA_CERTS", "/etc/ssl/certs/ca-certificates.crt")
    conn = make_client("https://bob:pw@other:9200").transport.get_connection()
    assert conn.http_auth == ("bob", "pw")  # URL credentials win over the environment
    assert conn.pool.cert_reqs == "CERT_REQUIRED"
    assert conn.pool.ca_certs == "/etc/ssl/certs/ca-certificates.crt"
    monkeypatch.delenv("LR_OPENSEARCH_USER")
    with pytest.raises(ConfigError, match="without a user"):
        make_client()


def test_templates_ship_as_package_data() -> None:
    """Every template file is covered by pyproject's package-data, so a wheel carries it."""
    import importlib.util
    from pathlib import Path

    import tomllib

    from lr_opensearch.engine.templates import template_dir

    repo = Path(__file__).resolve().parents[2]
    spec = importlib.util.find_spec("index_templates")
    assert spec is not None and spec.submodule_search_locations
    assert template_dir() == Path(list(spec.submodule_search_locations)[0])
    setuptools = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "index_templates*" in setuptools["packages"]["find"]["include"]
    globs = setuptools["package-data"]["index_templates"]
    folder = repo / "index_templates"
    shipped = {p for g in globs for p in folder.glob(g)}
    files = {p for p in folder.rglob("*") if p.is_file() and p.suffix in (".json", ".md")}
    assert files and files <= shipped, sorted(map(str, files - shipped))
