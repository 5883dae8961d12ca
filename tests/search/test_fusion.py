"""Hand-computed cases for lr_opensearch.search.fusion (both semantics, every combination)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from lr_opensearch.errors import ConfigError
from lr_opensearch.legs import fusion_config, names, parse_weights, validate_weights
from lr_opensearch.search.fusion import FusedHit, fuse

# the hand-computed values below are worked out for dense 0.7 / sparse 0.3, given explicitly
# (fuse()'s own default is the legs' default weights: test_default_weights_are_the_legs')
fuse_73 = functools.partial(fuse, weights=(0.7, 0.3))

NONE = dict.fromkeys(names(), 0.0)  # every leg, weight 0

# dense  : a 3.0, b 2.0, c 1.0   -> min-max a 1.0, b 0.5, c 0 (-> 0.001 on the server)
# sparse : b 10.0, d 6.0, a 2.0  -> min-max b 1.0, d 0.5, a 0 (-> 0.001 on the server)
DENSE = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
SPARSE = [("b", 10.0), ("d", 6.0), ("a", 2.0)]


def scores(hits: list[FusedHit]) -> dict[str, float]:
    return {h.doc_id: h.score for h in hits}


def order(hits: list[FusedHit]) -> list[str]:
    return [h.doc_id for h in hits]


def test_opensearch_min_max_arithmetic_keeps_missing_weight():
    hits = fuse_73(DENSE, SPARSE)
    # arithmetic_mean keeps a missing document's 0.0 and its weight (sum of weights = 1)
    expected = {
        "a": 0.7 * 1.0 + 0.3 * 0.001,
        "b": 0.7 * 0.5 + 0.3 * 1.0,
        "c": 0.7 * 0.001,
        "d": 0.3 * 0.5,
    }
    assert order(hits) == ["a", "b", "d", "c"]
    for doc, value in expected.items():
        assert scores(hits)[doc] == pytest.approx(value, rel=1e-6)
    a = hits[0]
    assert (a.scores.get("dense"), a.scores.get("sparse")) == (3.0, 2.0)
    assert a.norms.get("dense") == pytest.approx(1.0) and a.norms.get("sparse") == pytest.approx(0.001)
    assert (a.ranks.get("dense"), a.ranks.get("sparse")) == (1, 3)
    d = next(h for h in hits if h.doc_id == "d")
    assert d.scores.get("dense") is None and d.norms.get("dense") is None and d.ranks.get("dense") is None


def test_only_one_side_finds_the_best_sparse_doc():
    # e is found only by the sparse side, with the top sparse score: it gets 0.3 * 1.0,
    # not 1.0 (which a weighted mean over the finding sub-queries only would give).
    hits = fuse_73([("a", 5.0), ("b", 1.0)], [("e", 4.0), ("a", 2.0)])
    assert scores(hits)["e"] == pytest.approx(0.3, rel=1e-6)
    assert scores(hits)["a"] == pytest.approx(0.7 + 0.3 * 0.001, rel=1e-6)
    assert order(hits) == ["a", "e", "b"]


def test_linear_reference_semantics():
    hits = fuse_73(DENSE, SPARSE, semantics="linear")
    eps = 1e-8
    expected = {
        "a": 0.7 * 2 / (2 + eps) + 0.0,
        "b": 0.7 * 1 / (2 + eps) + 0.3 * 8 / (8 + eps),
        "c": 0.0,
        "d": 0.3 * 4 / (8 + eps),
    }
    assert order(hits) == ["a", "b", "d", "c"]
    for doc, value in expected.items():
        assert scores(hits)[doc] == pytest.approx(value, abs=1e-12)


def test_linear_weights_need_not_sum_to_one():
    hits = fuse(DENSE, SPARSE, semantics="linear", weights=(2.0, 1.0))
    assert scores(hits)["b"] == pytest.approx(2 * 0.5 + 1 * 1.0, rel=1e-6)


def test_geometric_mean_skips_missing():
    hits = fuse_73(DENSE, SPARSE, combination="geometric_mean")
    expected = {
        "a": math.exp(0.7 * math.log(1.0) + 0.3 * math.log(0.001)),
        "b": math.exp(0.7 * math.log(0.5) + 0.3 * math.log(1.0)),
        "c": 0.001,  # only dense found it: exp(0.7 ln 0.001 / 0.7)
        "d": 0.5,  # only sparse: exp(0.3 ln 0.5 / 0.3)
    }
    assert order(hits) == ["b", "d", "a", "c"]
    for doc, value in expected.items():
        assert scores(hits)[doc] == pytest.approx(value, rel=1e-5)


def test_harmonic_mean_skips_missing():
    hits = fuse_73(DENSE, SPARSE, combination="harmonic_mean")
    expected = {
        "a": 1.0 / (0.7 / 1.0 + 0.3 / 0.001),
        "b": 1.0 / (0.7 / 0.5 + 0.3 / 1.0),
        "c": 0.001,
        "d": 0.5,
    }
    assert order(hits) == ["b", "d", "a", "c"]
    for doc, value in expected.items():
        assert scores(hits)[doc] == pytest.approx(value, rel=1e-5)


def test_rrf_weighted_reciprocal_ranks():
    hits = fuse_73(DENSE, SPARSE, combination="rrf")
    expected = {
        "a": 0.7 / 61 + 0.3 / 63,
        "b": 0.7 / 62 + 0.3 / 61,
        "c": 0.7 / 63,
        "d": 0.3 / 62,
    }
    assert order(hits) == ["a", "b", "c", "d"]
    for doc, value in expected.items():
        assert scores(hits)[doc] == pytest.approx(value, rel=1e-6)
    assert hits[0].norms.get("dense") == pytest.approx(1 / 61, rel=1e-6)


def test_rrf_rank_constant_and_linear_rrf():
    hits = fuse(DENSE, SPARSE, combination="rrf", rank_constant=1, weights=(0.5, 0.5))
    assert scores(hits)["a"] == pytest.approx(0.5 / 2 + 0.5 / 4, rel=1e-6)
    lin = fuse(DENSE, SPARSE, semantics="linear", combination="rrf", weights=(1, 1))
    assert scores(lin)["b"] == pytest.approx(1 / 62 + 1 / 61, rel=1e-12)


def test_l2_normalisation():
    hits = fuse_73(DENSE, SPARSE, normalization="l2")
    nd, ns = math.sqrt(14.0), math.sqrt(140.0)
    expected = {
        "a": 0.7 * 3 / nd + 0.3 * 2 / ns,
        "b": 0.7 * 2 / nd + 0.3 * 10 / ns,
        "c": 0.7 * 1 / nd,
        "d": 0.3 * 6 / ns,
    }
    assert order(hits) == ["b", "a", "c", "d"]
    for doc, value in expected.items():
        assert scores(hits)[doc] == pytest.approx(value, rel=1e-5)


def test_single_hit_per_side():
    # one value per list: the server normalises it to 1.0; the reference (eps) to 0.
    hits = fuse_73([("x", 5.0)], [("y", 0.2)])
    assert scores(hits) == pytest.approx({"x": 0.7, "y": 0.3})
    assert hits[0].norms.get("dense") == 1.0
    lin = fuse_73([("x", 5.0)], [("y", 0.2)], semantics="linear")
    assert scores(lin) == {"x": 0.0, "y": 0.0}
    assert order(lin) == ["x", "y"]  # tie broken by doc id


def test_ties_are_broken_by_doc_id():
    hits = fuse_73([("b", 2.0), ("a", 2.0)], [])
    assert order(hits) == ["a", "b"]
    assert scores(hits) == pytest.approx({"a": 0.7, "b": 0.7})
    # a fused tie between different contributions: 0.5*1 + 0.5*0.001 both ways
    tied = fuse([("z", 2.0), ("y", 1.0)], [("y", 5.0), ("z", 1.0)], weights=(0.5, 0.5))
    assert order(tied) == ["y", "z"]
    assert tied[0].score == tied[1].score


def test_empty_side_and_both_empty():
    hits = fuse_73(DENSE, [])
    assert order(hits) == ["a", "b", "c"]
    assert scores(hits) == pytest.approx({"a": 0.7, "b": 0.35, "c": 0.0007}, rel=1e-6)
    sparse_only = fuse_73([], SPARSE, semantics="linear")
    assert scores(sparse_only)["d"] == pytest.approx(0.3 * 0.5, rel=1e-6)
    assert fuse_73([], []) == []
    assert fuse_73([], [], semantics="linear", combination="rrf") == []


def test_k_truncates_and_larger_k_returns_all():
    assert order(fuse_73(DENSE, SPARSE, k=2)) == ["a", "b"]
    assert len(fuse_73(DENSE, SPARSE, k=100)) == 4
    assert fuse_73(DENSE, SPARSE, k=0) == []
    with pytest.raises(ConfigError, match="k must be"):
        fuse_73(DENSE, SPARSE, k=-1)


def test_input_order_is_not_trusted_but_engine_ties_are_kept():
    shuffled = fuse_73(list(reversed(DENSE)), SPARSE, combination="rrf")
    assert scores(shuffled) == scores(fuse_73(DENSE, SPARSE, combination="rrf"))
    # equal raw scores keep the given order for rank-based fusion
    tie = fuse([("q", 1.0), ("p", 1.0)], [], combination="rrf", weights=(1.0, 0.0))
    assert scores(tie) == pytest.approx({"q": 1 / 61, "p": 1 / 62})


def test_min_max_zero_becomes_min_score_only_on_server_semantics():
    hits = fuse([("a", 1.0), ("b", 0.5)], [], weights=(1.0, 0.0))
    assert scores(hits)["b"] == pytest.approx(0.001)
    lin = fuse([("a", 1.0), ("b", 0.5)], [], weights=(1.0, 0.0), semantics="linear")
    assert scores(lin)["b"] == 0.0


def test_arithmetic_equals_weighted_sum_on_random_lists():
    rng = np.random.default_rng(0)
    ids = [f"d{i}" for i in range(40)]
    dense = [(d, float(s)) for d, s in zip(ids[:25], rng.random(25) * 3, strict=True)]
    sparse = [(d, float(s)) for d, s in zip(ids[15:], rng.random(25) * 20, strict=True)]
    for hit in fuse(dense, sparse, weights=(0.6, 0.4)):
        want = 0.6 * (hit.norms.get("dense") or 0.0) + 0.4 * (hit.norms.get("sparse") or 0.0)
        assert hit.score == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize(
    "weights, message",
    [
        ((0.8, 0.3), "sum to 1"),
        ((1.2, -0.2), "finite and >= 0"),
        ((0.4, 0.2, 0.2, 0.2), "dense, sparse, bm25"),
        (("x", 0.5), "numbers per leg"),
        ((float("nan"), 1.0), "finite"),
    ],
)
def test_bad_weights_are_rejected(weights, message):
    with pytest.raises(ConfigError, match=message):
        fuse(DENSE, SPARSE, weights=weights)


def test_weights_validation_per_semantics():
    assert validate_weights((0.705, 0.3)) == {**NONE, "dense": 0.705, "sparse": 0.3}  # within the server's 0.01
    assert validate_weights((3, 1), "linear") == {**NONE, "dense": 3.0, "sparse": 1.0}
    with pytest.raises(ConfigError, match="all be 0"):
        validate_weights((0, 0), "linear")
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        validate_weights((1.5, -0.0 + 0.0), "opensearch")


@pytest.mark.parametrize(
    "kwargs, listed",
    [
        ({"semantics": "rsf"}, "opensearch, linear"),
        ({"normalization": "z"}, "min_max, l2"),
        ({"combination": "max"}, "arithmetic_mean, geometric_mean, harmonic_mean, rrf"),
        ({"semantics": "linear", "combination": "geometric_mean"}, "arithmetic_mean' or 'rrf"),
        ({"rank_constant": 0}, "rank_constant"),
    ],
)
def test_unknown_options_list_valid_ones(kwargs, listed):
    with pytest.raises(ConfigError) as info:
        fusion_config(**kwargs)
    assert listed in str(info.value)


def test_duplicates_and_non_finite_scores_are_rejected():
    with pytest.raises(ConfigError, match="twice"):
        fuse_73([("a", 1.0), ("a", 0.5)], [])
    with pytest.raises(ConfigError, match="non-finite"):
        fuse_73([], [("a", float("inf"))])


def test_three_legs_by_hand() -> None:
    """dense / sparse / BM25 with opensearch min-max + arithmetic mean, computed by hand."""
    from lr_opensearch.search.fusion import fuse as fuse3

    dense = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    sparse = [("b", 10.0), ("c", 5.0)]
    bm25 = [("c", 7.0), ("a", 3.0), ("d", 1.0)]
    hits = fuse3(dense, sparse, bm25_hits=bm25, weights={"dense": 0.3, "sparse": 0.2, "bm25": 0.5})
    # normalised: dense a 1, b .5, c .001; sparse b 1, c .001; bm25 c 1, a 1/3, d .001
    want = {"a": 0.3 * 1 + 0.5 * (2 / 6), "b": 0.3 * 0.5 + 0.2 * 1.0,
            "c": 0.3 * 0.001 + 0.2 * 0.001 + 0.5 * 1.0, "d": 0.5 * 0.001}
    assert [h.doc_id for h in hits] == sorted(want, key=lambda d: -want[d])
    for h in hits:
        assert h.score == pytest.approx(want[h.doc_id], rel=1e-6)
    c = next(h for h in hits if h.doc_id == "c")
    assert (c.scores.get("bm25"), c.norms.get("bm25"), c.ranks.get("bm25")) == (7.0, 1.0, 1)
    # a zero-weight leg is not fused at all: two legs give the two-leg result
    two = fuse3(dense, sparse, bm25_hits=bm25, weights=(0.7, 0.3, 0.0))
    assert [(h.doc_id, h.score) for h in two] == [(h.doc_id, h.score)
                                                  for h in fuse3(dense, sparse, weights=(0.7, 0.3))]
    assert all(h.ranks.get("bm25") is None for h in two)
    with pytest.raises(ConfigError, match="without bm25_hits"):
        fuse3(dense, sparse, weights=(0.3, 0.2, 0.5))


def test_weights_per_leg_and_their_spelling() -> None:
    assert validate_weights((0.7, 0.3)) == {**NONE, "dense": 0.7, "sparse": 0.3}
    assert validate_weights({"bm25": 0.4, "dense": 0.6}) == {**NONE, "dense": 0.6, "bm25": 0.4}
    assert parse_weights("dense=0.3,sparse=0.2,bm25=0.5") == {**NONE, "dense": 0.3, "sparse": 0.2, "bm25": 0.5}
    assert parse_weights("0.3,0.2,0.5") == {**NONE, "dense": 0.3, "sparse": 0.2, "bm25": 0.5}
    with pytest.raises(ConfigError, match="unknown fusion leg"):
        parse_weights("dense=0.5,bm52=0.5")
    with pytest.raises(ConfigError, match="sum to 1"):
        validate_weights({"dense": 0.5, "bm25": 0.6})
    with pytest.raises(ConfigError, match="not a number"):
        parse_weights("dense=x")


def test_default_weights_are_the_legs_scaled_over_the_lists_given():
    """No weights: each given leg's default weight (legs.default_weights), summing to 1;
    fusion_config() with no weights is the registry's defaults (no 0.7 / 0.3 of old)."""
    from lr_opensearch.legs import default_weights

    d = default_weights()
    pair = d["dense"] + d["sparse"]
    assert scores(fuse(DENSE, SPARSE)) == scores(
        fuse(DENSE, SPARSE, weights=(d["dense"] / pair, d["sparse"] / pair)))
    bm25 = [("c", 9.0), ("a", 1.0)]
    assert scores(fuse({"dense": DENSE, "sparse": SPARSE, "bm25": bm25})) == scores(
        fuse({"dense": DENSE, "sparse": SPARSE, "bm25": bm25}, weights=d))
    assert dict(fusion_config().weights) == d
    with pytest.raises(ConfigError, match="default weight"):
        fuse({"full_dense": DENSE})
