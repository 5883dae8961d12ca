"""Defects of the query side found by using it as a careless or hostile user would (issue
29): each test failed on the code before its fix."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from opensearchpy import OpenSearch
from tiny_artifacts import tiny_bundle, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.bundle.keys import encode_key
from lr_opensearch.cli.search import format_dsl, format_hits
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.errors import BundleMismatchError, ConfigError, EngineError
from lr_opensearch.search import Hit, Retriever, SearchOptions

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# ---- unit: no cluster -----------------------------------------------------------------------
def test_dsl_output_keeps_the_query_inside_its_comment() -> None:
    evil = 'tides"}\nDELETE /docs\n# '
    plan = {"query": evil, "path": "single", "engine": "opensearch",
            "fusion": {"legs": ["bm25"], "weights": [1.0], "semantics": "opensearch",
                       "normalization": "min_max", "combination": "arithmetic_mean"},
            "requests": [{"method": "GET", "path": "/docs/_search",
                          "body": {"query": {"multi_match": {"query": evil}}}}]}
    text = format_dsl(plan)
    lines = text.splitlines()
    assert not any(line.startswith("DELETE") for line in lines)
    requests = [line for line in lines if re.match(r"^[A-Z]+ /", line)]
    assert requests == ["GET /docs/_search"]
    assert lines[0].startswith("# query: ") and "\\n" in lines[0]


def test_dsl_comment_line_escapes_every_control_character() -> None:
    evil = "a\x85b\x7fc\u2028d\u2029e\x9bf"
    plan = {"query": evil, "path": "single", "engine": "opensearch",
            "fusion": {"legs": ["bm25"], "weights": [1.0], "semantics": "opensearch",
                       "normalization": "min_max", "combination": "arithmetic_mean"},
            "requests": [{"method": "GET", "path": "/docs/_search",
                          "body": {"query": {"match": {"text": evil}}}}]}
    text = format_dsl(plan)
    assert not re.search(r"[\x7f-\x9f\u2028\u2029]", text), repr(text)
    assert text.splitlines()[0] == '# query: "a\\u0085b\\u007fc\\u2028d\\u2029e\\u009bf"'


def test_hits_of_several_indices_show_their_index() -> None:
    hits = [Hit("1", 1, 0.9, {"bm25": 1.0}, {"title": "alpha"}, index="books"),
            Hit("1", 2, 0.8, {"bm25": 0.5}, {"title": "beta"}, index="papers")]
    lines = format_hits("q", hits).splitlines()
    assert "index" in lines[1]
    assert "books" in lines[2] and "papers" in lines[3]
    one = format_hits("q", [Hit("1", 1, 0.9, {"bm25": 1.0}, {"title": "a"}, index="books")])
    assert "index" not in one.splitlines()[1]  # one index: no column


@pytest.mark.parametrize("target", [",", "a,", ",b", "a,,b", " "])
def test_a_target_with_an_empty_index_name_is_refused(target: str) -> None:
    from lr_opensearch.search.request import check_target

    with pytest.raises(ConfigError, match="index"):
        check_target(target)


def test_terminal_output_has_no_control_characters() -> None:
    title = "ok \x1b[31mRED\x1b[0m \x07bell\x9b"
    hits = [Hit("d\x1b[2J1", 1, 1.0, {"bm25": 1.0}, {"title": title})]
    out = format_hits("q\x1b]0;pwned\x07", hits)
    assert not CONTROL.search(out.replace("\n", ""))
    assert "RED" in out and "pwned" in out  # shown, escaped, not dropped


def test_search_options_refuse_what_the_engine_would_refuse() -> None:
    with pytest.raises(ConfigError, match="10000"):
        SearchOptions(candidates=1_000_000_000)
    with pytest.raises(ConfigError, match="10000"):
        SearchOptions(k=1_000_000)
    with pytest.raises(ConfigError, match="10000"):
        SearchOptions(k=10, from_=9_995)
    with pytest.raises(ConfigError, match="k must be an integer"):
        SearchOptions(k="5")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def offline_retriever(tmp_path_factory: pytest.TempPathFactory) -> Retriever:
    """A retriever whose client points nowhere: only what never reaches a cluster is used."""
    bundle = load_bundle(tiny_bundle(tmp_path_factory.mktemp("b") / "bundle",
                                     wordpiece_tokenizer(padding=False), seed=3))
    client = OpenSearch("http://127.0.0.1:9", timeout=1)
    return Retriever(bundle, client, "nowhere", check_bundle=False)


def test_python_api_refuses_bad_arguments_clearly(offline_retriever: Retriever) -> None:
    r = offline_retriever
    with pytest.raises(ConfigError, match="query text"):
        r.search(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="query text"):
        r.search([1, 2])  # type: ignore[list-item]
    with pytest.raises(ConfigError, match="k must be an integer"):
        r.search("tides", k="5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="unknown search option"):
        r.search("tides", colour="red")
    plans = r.dsl("eiffel tower", mode="dense")  # one text, not a list of characters
    assert len(plans) == 1 and plans[0]["query"] == "eiffel tower"


# ---- on the node ------------------------------------------------------------------------------
N = 12


def _fill(client: Any, index: str, bundle: Any, rng: np.random.Generator, tag: str) -> None:
    OpenSearchAdapter(client).create_index(index, bundle)
    ops: list[dict[str, Any]] = []
    for i in range(N):
        ops += [{"index": {"_index": index, "_id": f"d{i:02d}"}},
                {"lr_dense": rng.standard_normal(16).astype(np.float32).tolist(),
                 "lr_sparse": {encode_key("paris"): float(rng.uniform(0.1, 3.0))},
                 "title": f"{tag} title {i} paris", "text": f"{tag} paris text {i}"}]
    assert not client.bulk(body=ops, refresh=True)["errors"]


@pytest.fixture(scope="module")
def two_indices(tmp_path_factory: pytest.TempPathFactory, os_client: Any) -> Iterator[Any]:
    """Two indices of one bundle holding the same ids (alias over both), one of another."""
    root = tmp_path_factory.mktemp("multi")
    tok = wordpiece_tokenizer(padding=False)
    bundle = load_bundle(tiny_bundle(root / "a", tok, seed=3))
    other = load_bundle(tiny_bundle(root / "o", tok, seed=4))
    tag = uuid.uuid4().hex[:8]
    a, b, o = (f"lr-test-multi-{tag}-{s}" for s in ("a1", "a2", "o"))
    rng = np.random.default_rng(0)
    _fill(os_client, a, bundle, rng, "alpha")
    _fill(os_client, b, bundle, rng, "beta")
    _fill(os_client, o, other, rng, "other")
    alias = f"lr-test-multi-{tag}"
    os_client.indices.put_alias(index=[a, b], name=alias)
    yield bundle, a, b, o, alias
    os_client.indices.delete(index=[a, b, o], ignore_unavailable=True)


@pytest.mark.node
@pytest.mark.matrix
@pytest.mark.parametrize("fusion", ["server", "client"])
def test_a_target_over_two_indices_keeps_hits_apart(two_indices: Any, os_client: Any,
                                                     fusion: str) -> None:
    bundle, a, b, _o, alias = two_indices
    for target in (f"{a},{b}", alias, a[:-1] + "*"):
        r = Retriever(bundle, os_client, target, fusion=fusion, candidates=50)
        hits = r.search("paris", k=2 * N)
        assert len(hits) == 2 * N  # the same _id in two indices: two hits
        assert {(h.index, h.doc_id) for h in hits} == {
            (i, f"d{n:02d}") for i in (a, b) for n in range(N)}
        for h in hits:  # each hit's source is its own index's document
            assert h.title.startswith("alpha" if h.index == a else "beta"), (h.index, h.title)


@pytest.mark.node
@pytest.mark.matrix
def test_a_target_mixing_bundles_is_refused(two_indices: Any, os_client: Any) -> None:
    bundle, a, _b, o, _alias = two_indices
    os_client.indices.put_alias(index=o, name=f"{a}-mixed")
    os_client.indices.put_alias(index=a, name=f"{a}-mixed")
    other_id = OpenSearchAdapter(os_client).index_meta(o)["bundle_id"]
    for target in (f"{a},{o}", f"{o},{a}", f"{a}-mixed", a[:-3] + "-*"):
        with pytest.raises(BundleMismatchError, match=o) as exc:
            Retriever(bundle, os_client, target)
        message = str(exc.value)
        assert "mixes" in message and a in message and other_id in message
        assert bundle.bundle_id in message and "re-create" not in message
    with pytest.raises(EngineError, match="no opensearch index matches"):  # a wildcard of none
        Retriever(bundle, os_client, "lr-test-no-such-index-*")


@pytest.mark.node
@pytest.mark.matrix
@pytest.mark.parametrize("mode", ["hybrid", "bm25"])
def test_a_very_long_query_is_searched(two_indices: Any, os_client: Any, mode: str,
                                       caplog: pytest.LogCaptureFixture) -> None:
    bundle, a, *_ = two_indices
    words = [f"w{i}x" for i in range(1500)] + ["paris"]  # distinct terms: one clause each
    r = Retriever(bundle, os_client, a, candidates=20,
                  weights={"dense": 0.4, "sparse": 0.2, "bm25": 0.4})  # BM25 in the hybrid
    with caplog.at_level("INFO"):
        hits = r.search(" ".join(reversed(words)), k=5, mode=mode)
    assert hits and all(h.title.startswith("alpha") for h in hits)
    assert "capped" in caplog.text
