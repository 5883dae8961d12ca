"""Fitting the query table and the IDF sparse query weights (lr_opensearch.fit.tables)."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
from tiny_artifacts import SENTENCES, tiny_config, wordpiece_tokenizer

from lr_opensearch.bundle import load_bundle, save_bundle
from lr_opensearch.errors import CorpusError, QueryError
from lr_opensearch.fit.distill import DistillConfig
from lr_opensearch.fit.pseudo import (
    CAP_PER_DOC,
    fitted_on,
    make_pseudo_queries,
    plan_counts,
    read_records,
)
from lr_opensearch.fit.ridge import LAMS, RidgeSolve, fit_table, token_bags
from lr_opensearch.fit.tables import FitRecipe, fit_bundle_tables, query_tokenizer
from lr_opensearch.legs import builtin as legs_builtin
from lr_opensearch.legs import registry
from lr_opensearch.query import QueryEncoder

DATA = Path(__file__).resolve().parents[1] / "data"
OLD_BUNDLE = DATA / "bundle-v1-before-fit"


def _corpus(path: Path, docs: list[tuple[str, str]]) -> Path:
    lines = [json.dumps({"_id": f"d{i}", "title": t, "text": x}) for i, (t, x) in enumerate(docs)]
    path.write_text("\n".join(lines) + "\n")
    return path


def _synthetic(seed: int = 0, vocab: int = 60, dim: int = 8, n: int = 400):  # noqa: ANN202
    """Queries over tokens 0..vocab-11 (the last 10 tokens never occur), targets = A E* + noise."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 8, n)
    flat = rng.integers(0, vocab - 10, int(lengths.sum()))
    bags = token_bags(flat, lengths, vocab)
    truth = rng.standard_normal((vocab, dim))
    targets = bags @ truth + 0.05 * rng.standard_normal((n, dim))
    e0 = rng.standard_normal((vocab, dim)).astype(np.float32)
    return bags, targets, e0


def test_fitted_table_beats_e0_on_held_back_queries() -> None:
    bags, targets, e0 = _synthetic()
    table, fit = fit_table(e0, bags, targets)
    assert fit.holdout_cosine > 0.9 > fit.holdout_cosine_e0 + 0.5
    assert fit.lam in LAMS and set(fit.holdout_cosine_per_lam) <= {f"{lam:g}" for lam in LAMS}
    assert fit.holdout_cosine == max(fit.holdout_cosine_per_lam.values())
    assert fit.rows_fitted == 50 and 40 < fit.prior_rows <= 50  # frequent in the 90 % it fits
    assert not np.allclose(table[:50], e0[:50])
    # the table is what the query side averages: A @ table approximates the targets
    pred = bags @ table.astype(np.float64)
    assert np.mean(np.sum(pred * targets, 1) / np.linalg.norm(pred, axis=1)
                   / np.linalg.norm(targets, axis=1)) > 0.95


def test_unseen_rows_keep_e0_when_the_prior_is_not_mapped() -> None:
    bags, targets, e0 = _synthetic()
    table, fit = fit_table(e0, bags, targets, solve=RidgeSolve(map_min_queries=None))
    np.testing.assert_array_equal(table[50:], e0[50:])  # never seen: E0 exactly
    assert fit.prior_rows == 0
    # no token that frequent
    _, few = fit_table(e0, bags, targets, solve=RidgeSolve(map_min_queries=10**6))
    assert few.prior_rows == 0


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_rows_the_queries_never_or_seldom_use_land_in_the_fitted_rows_space() -> None:
    # the full model's token rows are an affine image of E0's (scaled, rotated, offset), as
    # fitted rows are of unfitted ones; tokens 50..59 never occur, 40..49 in few queries
    rng = np.random.default_rng(5)
    vocab, dim, n = 60, 8, 600
    e0 = rng.standard_normal((vocab, dim)).astype(np.float32)
    rot = np.linalg.qr(rng.standard_normal((dim, dim)))[0]
    truth = 3.0 * e0 @ rot + 2.0 * rng.standard_normal(dim) + 0.1 * rng.standard_normal((vocab, dim))
    lengths = rng.integers(2, 8, n)
    p = np.r_[np.full(40, 1.0), np.full(10, 0.01), np.zeros(10)]
    flat = rng.choice(vocab, int(lengths.sum()), p=p / p.sum())
    bags = token_bags(flat, lengths, vocab)
    targets = bags @ truth + 0.05 * rng.standard_normal((n, dim))
    table, fit = fit_table(e0, bags, targets)
    assert _cos(table[50:], truth[50:]).min() > 0.95
    # a query made of never-seen tokens now points where the full model's would
    unseen = token_bags(np.array([50, 51, 52]), np.array([3]), vocab)
    assert _cos(unseen @ table, unseen @ truth)[0] > 0.95
    assert 35 <= fit.prior_rows <= 40  # the frequent tokens (in the 90 % the map is fitted on)
    old, _ = fit_table(e0, bags, targets, solve=RidgeSolve(map_min_queries=None))
    assert _cos(old[50:], truth[50:]).mean() < 0.5
    assert _cos(table[40:50], truth[40:50]).mean() > _cos(old[40:50], truth[40:50]).mean() + 0.1


def test_lam_search_picks_from_the_grid_and_one_lam_means_no_search() -> None:
    bags, targets, e0 = _synthetic(seed=1)
    _, fit = fit_table(e0, bags, targets, solve=RidgeSolve(lams=(0.5,)))
    assert fit.lam == 0.5 and list(fit.holdout_cosine_per_lam) == ["0.5"]
    _, fit = fit_table(e0, bags, targets, solve=RidgeSolve(lams=(1.0, 0.1, 0.01)))
    assert fit.lam in (1.0, 0.1, 0.01)


def test_token_bags_are_row_normalised_counts() -> None:
    bags = token_bags(np.array([3, 3, 1, 2]), np.array([3, 1]), 5).toarray()
    np.testing.assert_allclose(bags, [[0, 1 / 3, 0, 2 / 3, 0], [0, 0, 1, 0, 0]])
    with pytest.raises(ValueError, match="at least one token"):
        token_bags(np.array([1]), np.array([1, 0]), 5)


def test_pseudo_queries_recipes_dedup_and_determinism() -> None:
    docs = [("Boundary layers", "The flow separates early. Heat transfer rises near the wall! x y"),
            ("Boundary layers", "The flow separates early. Heat transfer rises near the wall! x y")]
    a = make_pseudo_queries(docs, sentences_per_doc=2, spans_per_doc=5, seed=3)
    b = make_pseudo_queries(docs, sentences_per_doc=2, spans_per_doc=5, seed=3)
    assert a.texts == b.texts
    assert len({t.lower() for t in a.texts}) == len(a.texts)
    counts = a.counts()
    assert counts["title"] == 1 and counts["sentence"] == 2  # the second document repeats the first
    assert "The flow separates early." in a.texts
    assert all(4 <= len(t.split()) <= 16 for t, r in zip(a.texts, a.recipe, strict=True) if r == "span")


def test_passages_are_a_tenth_long_windows_of_long_enough_documents() -> None:
    long_doc = " ".join(f"w{i}" for i in range(300))
    docs = [(f"Title {i}", long_doc.replace("w0 ", f"d{i} ")) for i in range(20)] + [("", "too short")]
    pq = make_pseudo_queries(docs, sentences_per_doc=0, spans_per_doc=3, seed=0)
    counts = pq.counts()
    others = sum(v for k, v in counts.items() if k != "passage")
    assert counts["passage"] == round(0.1 * others)
    passages = [t for t, r in zip(pq.texts, pq.recipe, strict=True) if r == "passage"]
    assert all(24 <= len(t.split()) <= 128 for t in passages)
    assert not any("too short" in t for t in passages)
    assert "passage" not in make_pseudo_queries(docs, passage_share=0.0).counts()


def test_row_weights_pull_the_fit_towards_heavy_rows() -> None:
    # two contradicting targets for the same one-token query: the weighted mean wins
    bags = token_bags(np.array([0, 0, 1, 1]), np.array([1, 1, 1, 1]), 2)
    targets = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    e0 = np.zeros((2, 2), np.float32)
    table, _ = fit_table(e0, bags, targets, solve=RidgeSolve(lams=(1e-6,), holdout=0.25, seed=3))
    heavy, _ = fit_table(e0, bags, targets, weights=np.array([3.0, 1.0, 1.0, 1.0]),
                         solve=RidgeSolve(lams=(1e-6,), holdout=0.25, seed=3))
    assert heavy[0, 0] > heavy[0, 1]  # row 0 (weight 3, squared 9) dominates token 0
    assert abs(table[0, 0] - table[0, 1]) < abs(heavy[0, 0] - heavy[0, 1])
    with pytest.raises(ValueError, match="weights"):
        fit_table(e0, bags, targets, weights=np.array([1.0, 0.0, 1.0, 1.0]))


def test_count_rule_raises_small_corpora_and_caps_per_document() -> None:
    assert plan_counts(10_000) == (2, 3)
    assert plan_counts(82) == CAP_PER_DOC
    s, p = plan_counts(1_000)  # 20 per document
    assert 2 < s <= 8 and 1 + s + p >= 20


def test_idf_by_hand_on_a_three_document_corpus(tmp_path: Path) -> None:
    tok = wordpiece_tokenizer()
    corpus = _corpus(tmp_path / "c.jsonl", [
        ("", "the tower is tall and the tower is old and grey"),
        ("Paris", "the tower stands in paris near the river today"),
        ("", "heat transfer across a boundary layer grows near the wall")])
    rng = np.random.default_rng(0)
    e0 = {"default": rng.standard_normal((200, 4)).astype(np.float32)}
    result = fit_bundle_tables(tok, e0, {"default": ""}, lambda t: rng.standard_normal((len(t), 4)),
                               FitRecipe(corpora=[corpus], distill=None), progress=False)
    idf = result.idf
    ids = {w: tok.token_to_id(w) for w in ("the", "tower", "paris", "heat")}
    for word, df in {"the": 3, "tower": 2, "paris": 1, "heat": 1}.items():
        assert idf[ids[word]] == pytest.approx(math.log(1 + (3 - df + 0.5) / (df + 0.5)), rel=1e-6)
    assert idf.max() == pytest.approx(math.log(1 + 3.5 / 0.5))  # df = 0
    assert (idf == idf.max()).sum() > 100  # most of the vocabulary is in no document
    assert result.stats.documents == 3 and result.stats.corpora[0]["name"] == "c.jsonl"


def test_the_fit_tokenizes_queries_exactly_as_the_query_encoder(tmp_path: Path) -> None:
    from tiny_artifacts import tiny_bundle

    tok = wordpiece_tokenizer()
    encoder = QueryEncoder(load_bundle(tiny_bundle(tmp_path / "b", tok)))
    texts = [*SENTENCES, "[CLS] tower", "Ünïcode tower\x0bis tall"]
    got, want = query_tokenizer(tok)(texts), encoder.tokenize(texts)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def _weights_bundle(tmp_path: Path, weights: np.ndarray | None) -> QueryEncoder:
    tok = wordpiece_tokenizer()
    config = tiny_config(dense_dim=4)
    tables = {"default": np.zeros((200, 4), np.float32)}
    out = save_bundle(tmp_path / f"b{weights is None}", config, tokenizer=tok, tables=tables,
                      sparse_weights=weights, fit=None if weights is None else {"corpora": []})
    return QueryEncoder(load_bundle(out))


def test_query_encoder_weighs_distinct_tokens_by_idf_and_falls_back_to_counts(tmp_path: Path) -> None:
    weights = np.linspace(0.5, 3.0, 200).astype(np.float32)
    idf_enc, count_enc = _weights_bundle(tmp_path, weights), _weights_bundle(tmp_path, None)
    assert idf_enc.bundle.sparse_weights_kind == "idf" and count_enc.bundle.sparse_weights_kind == "count"
    texts = ["heat heat transfer", "the tower is tall"]
    for enc, expect in ((idf_enc, lambda i, c: float(np.float32(weights[i]))),
                        (count_enc, lambda i, c: float(c))):
        batch = enc.encode_batch(texts)
        for n, text in enumerate(texts):
            ids, counts = np.unique(enc.tokenize([text])[0], return_counts=True)
            want = {enc.key_array[i]: expect(i, c) for i, c in zip(ids, counts, strict=True)}
            assert batch.sparse[n] == want == enc.encode(text).sparse
    assert max(count_enc.encode("heat heat transfer").sparse.values()) == 2.0


def test_sparse_min_idf_prunes_only_low_idf_sparse_terms(tmp_path: Path) -> None:
    weights = np.linspace(0.01, 3.0, 200).astype(np.float32)
    full = _weights_bundle(tmp_path, weights)
    pruned = QueryEncoder(full.bundle, sparse_min_idf=1.5)
    texts = ["heat heat transfer", "the tower is tall", "tower"]
    batch = pruned.encode_batch(texts)
    for n, text in enumerate(texts):
        a, b = full.encode(text), pruned.encode(text)
        np.testing.assert_array_equal(a.dense, b.dense)  # the dense side keeps every token
        want = {k: w for k, w in a.sparse.items() if w >= np.float32(1.5)}
        assert b.sparse == want == batch.sparse[n]
    assert sum(len(full.encode(t).sparse) - len(pruned.encode(t).sparse) for t in texts) > 0
    with pytest.raises(QueryError, match="needs IDF query weights"):
        QueryEncoder(_weights_bundle(tmp_path, None).bundle, sparse_min_idf=0.5)
    with pytest.raises(QueryError, match="finite number"):
        QueryEncoder(full.bundle, sparse_min_idf=-1)


def test_weights_file_is_listed_hashed_and_checked(tmp_path: Path) -> None:
    enc = _weights_bundle(tmp_path, np.ones(200, np.float32))
    manifest = enc.bundle.manifest
    assert manifest["sparse_query_weights"]["kind"] == "idf"
    assert manifest["sparse_query_weights"]["file"] in manifest["files"]
    from lr_opensearch.errors import BundleError

    with pytest.raises(BundleError, match="expected"):
        _weights_bundle(tmp_path / "bad", np.ones(7, np.float32))


def test_bundle_written_before_the_fit_still_loads_with_the_same_outputs() -> None:
    bundle = load_bundle(OLD_BUNDLE)
    expected = json.loads((DATA / "bundle-v1-before-fit.expected.json").read_text())
    assert bundle.bundle_id == expected["bundle_id"]
    assert bundle.fit is None and bundle.sparse_weights is None and bundle.sparse_weights_kind == "count"
    batch = QueryEncoder(bundle).encode_batch(expected["queries"])
    np.testing.assert_array_equal(batch.dense, np.asarray(expected["dense"], np.float32))
    assert list(batch.sparse) == expected["sparse"]


def test_bad_corpus_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"_id": "a", "text": "ok"}\n\n{"_id": "b", "text": \n')
    with pytest.raises(CorpusError, match=r"corpus\.jsonl:3: not valid JSON"):
        list(read_records(path, ("title", "text")))
    path.write_text('{"_id": "a", "text": ["not", "a", "string"]}\n')
    with pytest.raises(CorpusError, match=r"corpus\.jsonl:1: fields \['text'\] must be strings"):
        list(read_records(path, ("title", "text")))


def test_read_records_gzip_jsonl_and_text(tmp_path: Path) -> None:
    gz = tmp_path / "queries.jsonl.gz"
    with gzip.open(gz, "wt") as f:
        f.write('{"_id": "q1", "text": "what is a tower"}\n')
    assert list(read_records(gz, ("text",))) == [("what is a tower",)]
    txt = tmp_path / "docs.txt"
    txt.write_text("first document\n\n second one \n")
    assert list(read_records(txt, ("title", "text"))) == [("", "first document"), ("", "second one")]


def test_fitted_on_compares_path_size_and_sha256(tmp_path: Path) -> None:
    from lr_opensearch.fit.pseudo import file_facts

    a = _corpus(tmp_path / "a.jsonl", [("t", "x y z")])
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(a.read_bytes())
    other = _corpus(tmp_path / "b.jsonl", [("t", "x y w")])
    fit = {"corpora": [file_facts(a)]}
    assert fitted_on(fit, a) and fitted_on(fit, copy) and not fitted_on(fit, other)
    assert not fitted_on(None, a)


def test_build_with_fit_corpus_records_stats_that_info_prints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    from model_fixtures import save_model_dir, tiny_bert

    from lr_opensearch.cli import main

    model, tok = tiny_bert()
    model_dir = save_model_dir(model, tok, tmp_path / "ckpt")
    corpus = _corpus(tmp_path / "corpus.jsonl", [(f"Note {i}", s) for i, s in enumerate(SENTENCES)])
    queries = tmp_path / "queries.txt"
    queries.write_text("what is tall\nheat transfer\n")
    out = tmp_path / "bundle"
    argv = ["-q", "bundle", "build", "--model", str(model_dir), "--out", str(out), "--batch-size", "64",
            "--fit-corpus", str(corpus), "--fit-queries", str(queries), "--fit-max-queries", "300"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "held-back cosine" in printed and "sparse q.   idf weights" in printed
    bundle = load_bundle(out)
    fit = bundle.fit
    assert fit is not None and fit["corpora"][0]["name"] == "corpus.jsonl"
    assert fit["queries"]["query"] == 2 and sum(fit["queries"].values()) <= 300
    table = fit["tables"]["default"]
    assert table["holdout_cosine"] >= table["holdout_cosine_e0"] and table["lam"] in LAMS
    assert bundle.sparse_weights is not None and bundle.sparse_weights_kind == "idf"
    assert main(["bundle", "info", str(out)]) == 0
    info = capsys.readouterr().out
    assert "fit         corpora corpus.jsonl" in info and "table default: lam" in info
    prior = f"prior E0 mapped by {table['prior_rows']} frequent rows" if table["prior_rows"] else "prior E0 "
    assert prior in info
    assert main(["bundle", "info", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sparse_query_weights"] == "idf"
    with caplog.at_level(logging.WARNING):
        assert main(["-q", "bundle", "build", "--model", str(model_dir), "--out", str(tmp_path / "b2"),
                     "--batch-size", "64"]) == 0
    assert "UNFITTED" in caplog.text
    assert load_bundle(tmp_path / "b2").fit is None


def test_ingest_hints_once_when_the_corpus_is_not_a_fit_corpus(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from lr_opensearch.fit.pseudo import file_facts
    from lr_opensearch.indexing.run import _fit_hint

    a = _corpus(tmp_path / "a.jsonl", [("t", "x y z")])
    b = _corpus(tmp_path / "b.jsonl", [("t", "x y w")])
    bundle = SimpleNamespace(fit={"corpora": [file_facts(a)]}, path=tmp_path / "bundle")
    with caplog.at_level(logging.INFO, logger="lr_opensearch.indexing.run"):
        _fit_hint(bundle, SimpleNamespace(corpus=str(a), is_stdin=False))  # type: ignore[arg-type]
        assert "hint" not in caplog.text
        _fit_hint(bundle, SimpleNamespace(corpus=str(b), is_stdin=False))  # type: ignore[arg-type]
    assert caplog.text.count("hint: bundle") == 1 and "a.jsonl" in caplog.text



def test_demo_bundle_cache_key_follows_the_fit_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    from lr_opensearch.fit import pseudo
    from lr_opensearch.fit.fitted import recipe_key  # names lr demo's stored bundle too

    key = recipe_key()
    assert key == recipe_key() and len(key) == 8
    monkeypatch.setattr(pseudo, "RECIPE_WEIGHTS", {"passage": 2.0})
    assert recipe_key() != key  # a changed recipe never reuses an old cached bundle
    monkeypatch.undo()
    monkeypatch.setattr("lr_opensearch.fit.distill.DEFAULT_DISTILL", DistillConfig(epochs=7))
    assert recipe_key() != key
    monkeypatch.undo()
    monkeypatch.setattr("lr_opensearch.legs.builtin.SPARSE", dataclasses.replace(
        legs_builtin.SPARSE, default_weight=0.3))
    monkeypatch.setattr("lr_opensearch.legs.registry._LEGS", {
        **registry._LEGS, "sparse": legs_builtin.SPARSE})
    assert recipe_key() != key
    monkeypatch.undo()
    # a leg registered at weight 0 changes no bundle: the stored one is reused
    extra = dataclasses.replace(legs_builtin.BM25, name="bm25_title", default_weight=0.0)
    monkeypatch.setattr("lr_opensearch.legs.registry._LEGS", {**registry._LEGS,
                                                              "bm25_title": extra})
    assert recipe_key() == key
