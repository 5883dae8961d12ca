"""``lr search`` formatting and argument handling (the end-to-end run is in test_search_integration)."""

from __future__ import annotations

import argparse

import pytest

from lr_opensearch.cli.search import _filter, _weights, format_hits, hits_json, register
from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import names
from lr_opensearch.search.explain import Explanation, LegExplanation, TokenContribution
from lr_opensearch.search.hits import Hit

EXPL = Explanation(
    legs={"dense": LegExplanation(engine_score=8.25, score=7.25, norm=1.0, rank=1),
          "sparse": LegExplanation(engine_score=7.0, score=7.0, norm=0.5, rank=2)},
    fused=0.85,
    sparse_from_tokens=7.02,
    top_tokens=(
        TokenContribution("paris", "paris", 2.0, 2.25, 4.5),
        TokenContribution(".", "-2e", 1.0, 2.5, 2.5),
    ),
)
HITS = [
    Hit("d1", 1, 0.85, {"dense": 7.25, "sparse": 7.0}, {"title": "Paris  is\nknown"}, EXPL),
    Hit("doc-22", 2, 0.3, {"sparse": 1.5}, {"title": "x" * 200}, None),
]


def test_format_hits_table_and_explain():
    text = format_hits("eiffel", HITS, explain=True)
    lines = text.splitlines()
    assert lines[0] == "query: eiffel"
    assert lines[1].split() == ["rank", "id", "score", "dense", "sparse", "title"]
    assert lines[2].split()[:5] == ["1", "d1", "0.8500", "7.2500", "7.0000"]
    assert "Paris is known" in lines[2]  # whitespace collapsed
    assert (
        "dense ip 7.2500 (rank 1, norm 1.0000)" in lines[3]
        and "sparse 7.0000 (rank 2, norm 0.5000)" in lines[3]
    )
    assert lines[4].strip() == "top tokens: 'paris' 2x2.250=4.500, '.' 1x2.500=2.500"
    assert lines[5].split()[:5] == ["2", "doc-22", "0.3000", "-", "1.5000"]
    assert lines[5].endswith("…") and len(lines[5]) < 120
    assert "top tokens" not in format_hits("eiffel", HITS)
    assert format_hits("q", []) == "query: q\n  (no hits)"


def test_hits_json_is_plain_data():
    data = hits_json("eiffel", HITS)
    assert data["hits"][0]["explanation"]["top_tokens"][0]["token"] == "paris"
    assert data["hits"][1]["scores"].get("dense") is None
    assert "dense_score" not in data["hits"][1]  # one name per meaning: scores[leg]


def test_weights_and_filter_arguments():
    none = dict.fromkeys(names(), 0.0)
    assert _weights("0.6,0.4") == {**none, "dense": 0.6, "sparse": 0.4} and _weights(None) is None
    assert _weights("dense=0.3,sparse=0.2,bm25=0.5") == {**none, "dense": 0.3, "sparse": 0.2,
                                                          "bm25": 0.5}
    assert _weights("0.3,0.2,0.5") == _weights("dense=0.3,sparse=0.2,bm25=0.5")
    for bad in ("0.6", "a,b", "0.1,0.2,0.3,0.4", "dense=0.5,bm52=0.5"):
        with pytest.raises(ConfigError, match="weights|leg"):
            _weights(bad)
    assert _filter('{"term": {"metadata.g": "a"}}') == {"term": {"metadata.g": "a"}}
    with pytest.raises(ConfigError, match="--filter"):
        _filter("{oops")


def test_register_parses_options():
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "search",
            "--bundle",
            "b",
            "--index",
            "i",
            "two words",
            "--k",
            "3",
            "--mode",
            "sparse",
            "--explain",
            "--json",
            "--url",
            "http://h:1",
        ]
    )
    assert (args.query, args.k, args.mode, args.explain, args.json, args.url) == (
        ["two words"],
        3,
        "sparse",
        True,
        True,
        "http://h:1",
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["search", "--bundle", "b", "--index", "i", "q", "--mode", "colbert"])
