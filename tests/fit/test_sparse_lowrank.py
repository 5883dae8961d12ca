"""The sparse projection's low-rank correction (issue 48, 1b): the head, its file, its fit
on cached states, the bundle round trip on either runtime."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from model_fixtures import one_thread, tiny_bert, tiny_checkpoint_and_corpus  # noqa: F401
from test_sparse_fit import assert_onnx_encodes_as
from tiny_artifacts import SENTENCES

from lr_opensearch.bundle import BundleConfig, load_bundle
from lr_opensearch.errors import BundleError, ConfigError
from lr_opensearch.fit.build import TableSettings, build_bundle
from lr_opensearch.fit.sparse import LowRankFitConfig, QuerySet
from lr_opensearch.fit.sparse_lowrank import StateCache, _step_loss, fit_lowrank
from lr_opensearch.fit.tables import FitRecipe
from lr_opensearch.model import DocEncoder, LightRetrieverModel
from lr_opensearch.model.framing import tokenize_texts
from lr_opensearch.model.runtime import open_doc_encoder
from lr_opensearch.model.settings import DocSettings
from lr_opensearch.model.sparse_fits import LOWRANK_FILE
from lr_opensearch.model.sparse_lowrank import LowRankCorrection

pytestmark = pytest.mark.usefixtures("one_thread")


def _random_correction(vocab: int, hidden: int, rank: int = 3, seed: int = 1) -> LowRankCorrection:
    g = torch.Generator().manual_seed(seed)
    return LowRankCorrection(torch.randn(vocab, rank, generator=g), torch.randn(hidden, rank, generator=g))


def test_the_correction_is_added_to_every_positions_projection_before_the_max() -> None:
    model, tok = tiny_bert()
    ids, _ = tokenize_texts(tok, SENTENCES[:4], model.framing, 64)
    from lr_opensearch.model.doc_encoder import padded

    input_ids, mask = padded(ids)
    weight, bias = model.head.projection(model.hf)
    with torch.no_grad():
        plain = model.encode_documents(input_ids, mask).sparse
        states, content = model.document_states(input_ids, mask)
        head = _random_correction(model.vocab_size, model.hidden_size)
        model.sparse_lowrank = head
        fitted = model.encode_documents(input_ids, mask).sparse
        logits = states @ (weight + head.up @ head.down.t()).t() + (0 if bias is None else bias)
    expected = torch.log1p(torch.relu(logits.masked_fill(~content.unsqueeze(-1), -torch.inf).amax(1)))
    torch.testing.assert_close(fitted, expected, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(fitted, plain, atol=1e-3)
    model.sparse_lowrank = LowRankCorrection(torch.zeros(model.vocab_size, 2), torch.ones(model.hidden_size, 2))
    with torch.no_grad():
        torch.testing.assert_close(model.encode_documents(input_ids, mask).sparse, plain)


def test_the_file_carries_its_format_and_is_checked(tmp_path: Path) -> None:
    head = _random_correction(7, 5)
    loaded = LowRankCorrection.load(head.save(tmp_path / "c.safetensors"), 7, 5)
    torch.testing.assert_close(loaded.up, head.up)
    torch.testing.assert_close(loaded.down, head.down)
    with pytest.raises(BundleError, match=r"projection is \[7, 4\]"):
        LowRankCorrection.load(tmp_path / "c.safetensors", 7, 4)
    from safetensors.torch import save_file

    save_file({"up": head.up, "down": head.down}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(BundleError, match="not a sparse low-rank correction file"):
        LowRankCorrection.load(tmp_path / "foreign.safetensors", 7, 5)
    save_file({"up": head.up, "down": head.down}, str(tmp_path / "newer.safetensors"),
              metadata={"format": "lr-sparse-lowrank", "format_version": "9"})
    with pytest.raises(BundleError, match="newer than this library"):
        LowRankCorrection.load(tmp_path / "newer.safetensors", 7, 5)
    with pytest.raises(BundleError, match=r"must be \[V, r\] and \[H, r\]"):
        LowRankCorrection(torch.zeros(7, 2), torch.zeros(5, 3))


def _cache(seed: int = 0) -> tuple[StateCache, QuerySet, torch.Tensor, np.ndarray]:
    """40 documents of 6 positions over a vocabulary of 60 and 16 hidden dimensions. The
    projection as it is is small noise; the queries name each document's 3 most
    distinctive terms (its maxima against the other documents') under a hidden rank-2
    correction of it: only a fitted correction ranks them well."""
    rng = np.random.default_rng(seed)
    n, pos, vocab, hidden = 40, 6, 60, 16
    states = rng.normal(size=(n * pos, hidden)).astype(np.float32)
    weight = rng.normal(scale=0.05, size=(vocab, hidden)).astype(np.float32)
    true = weight + rng.normal(size=(vocab, 2)) @ rng.normal(size=(2, hidden))
    maxima = (states @ true.T).reshape(n, pos, vocab).max(1)
    tops = np.argsort(-(maxima - maxima.mean(0)) / maxima.std(0), axis=1)[:, :3]
    rows = np.repeat(np.arange(4 * n), 3)
    cols = np.concatenate([tops[q % n] for q in range(4 * n)])
    bags = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(4 * n, vocab))
    queries = QuerySet.build(bags, np.arange(4 * n) % n, np.ones(vocab, np.float32), np.arange(n))
    cache = StateCache.of([states[d * pos : (d + 1) * pos].astype(np.float16) for d in range(n)],
                          [np.arange(d * pos, (d + 1) * pos) % vocab for d in range(n)])
    return cache, queries, torch.from_numpy(weight), true.astype(np.float32)


def _mrr(cache: StateCache, queries: QuerySet, weight: torch.Tensor) -> float:
    states = torch.from_numpy(cache.states.astype(np.float32)).reshape(len(cache), -1, weight.shape[1])
    s = torch.log1p(torch.relu((states @ weight.t()).amax(1))).numpy()
    scores = queries.vectors @ s.T
    own = scores[np.arange(len(queries)), queries.sources]
    return float(np.mean(1.0 / (1 + (scores > own[:, None]).sum(1))))


def test_the_fit_learns_the_terms_a_hidden_correction_gives() -> None:
    cache, queries, weight, true = _cache()
    config = LowRankFitConfig(rank=4, steps=300, batch=16, negatives=8, lr=0.1, flops=0.0, flops_columns=20)
    up, down, stats = fit_lowrank(cache, queries, weight, None, config, progress=False)
    before, after = _mrr(cache, queries, weight), _mrr(cache, queries, weight + up @ down.t())
    print(f"\nsource MRR {before:.3f} -> {after:.3f}, loss {stats.loss_first:.3f} -> {stats.loss_last:.3f}")
    assert before < 0.2 and after > 0.6  # (the hidden correction itself: 0.35; the fit is discriminative)
    assert _mrr(cache, queries, torch.from_numpy(true)) > before + 0.1  # the set-up as described
    assert stats.loss_last < stats.loss_first and stats.documents == 40 and stats.queries == 160
    with pytest.raises(ConfigError, match="at least 16 pseudo-queries"):
        fit_lowrank(cache, QuerySet(queries.vectors[:5], queries.sources[:5]), weight, None, config,
                    progress=False)


@pytest.mark.parametrize("pairs", ["cut", "masked"])
def test_one_steps_loss_by_hand(pairs: str) -> None:
    """Two documents of two positions, two queries, no negatives, no FLOPS weight: the
    softmax cross-entropy of the hand-computed scores; "masked" scores a query's own
    document without the positions that hold its tokens."""
    states = [np.array([[1.0, 0.0], [0.0, 2.0]], np.float16), np.array([[0.5, 0.5], [2.0, 1.0]], np.float16)]
    tokens = [np.array([0, 1]), np.array([2, 0])]
    cache = StateCache.of(states, tokens)
    weight = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    bags = sp.csr_matrix(np.array([[1.0, 0, 0], [0, 1.0, 1.0]]))
    queries = QuerySet.build(bags, np.array([0, 1]), np.array([2.0, 1.0, 3.0], np.float32), np.arange(2))
    config = LowRankFitConfig(rank=1, batch=2, negatives=0, flops=0.0, flops_columns=1, pairs=pairs)
    up, down = torch.zeros(3, 1), torch.ones(2, 1)
    loss, _ = _step_loss(cache, queries, np.array([0, 1]), (weight, None), (up, down), config,
                         np.random.default_rng(0))
    z = np.stack([(s.astype(np.float32) @ weight.numpy().T).max(0) for s in states])  # [2 docs, 3 terms]
    if pairs == "masked":  # query 0 (term 0) without doc 0's position 0, query 1 (terms 1, 2) without doc 1's 0
        own = [(states[0][1:].astype(np.float32) @ weight.numpy().T).max(0),
               (states[1][1:].astype(np.float32) @ weight.numpy().T).max(0)]
    s = np.log1p(np.maximum(z, 0))
    q = bags.toarray() * np.array([2.0, 1.0, 3.0])
    scores = q @ s.T
    if pairs == "masked":
        for i in range(2):
            scores[i, i] = q[i] @ np.log1p(np.maximum(own[i], 0))
    expected = np.mean([np.log(np.exp(scores[i]).sum()) - scores[i, i] for i in range(2)])
    assert float(loss) == pytest.approx(expected, rel=1e-4)


def test_a_bundle_with_the_correction_round_trips_on_either_runtime(tmp_path: Path) -> None:
    model_dir, corpus = tiny_checkpoint_and_corpus(tmp_path)
    kw = {"tables": TableSettings(batch_size=64, max_length=64), "progress": False}
    plain = load_bundle(build_bundle(model_dir, tmp_path / "plain", **kw,
                                     fit=FitRecipe(corpora=(corpus,), max_queries=100, sparse=None)))
    assert "sparse_lowrank" not in plain.manifest["config"] and "sparse_lowrank" not in plain.manifest["fit"]
    config = LowRankFitConfig(rank=4, steps=5, batch=8, negatives=4, lr=0.05, flops_columns=16)
    fitted = load_bundle(build_bundle(model_dir, tmp_path / "fitted", **kw, fit=FitRecipe(
        corpora=(corpus,), max_queries=100, sparse_lowrank=config)))
    assert fitted.config.sparse_lowrank == 4 and f"doc_encoder/{LOWRANK_FILE}" in fitted.manifest["files"]
    record = fitted.manifest["fit"]["sparse_lowrank"]
    assert record["config"]["steps"] == 5 and record["queries"] > 0
    from lr_opensearch.cli.bundle import fit_lines

    assert any("low-rank correction (rank 4, cut pairs): 5 steps" in line for line in fit_lines(fitted.fit, "idf"))
    head = LowRankCorrection.load(fitted.doc_encoder_dir / LOWRANK_FILE, fitted.vocab_size, 32)
    assert head.up.abs().sum() > 0
    loaded = DocEncoder.from_bundle(fitted, device="cpu")
    model = LightRetrieverModel.from_pretrained(model_dir)
    model.sparse_lowrank = head
    expected = DocEncoder(model, fitted.tokenizer, DocSettings(max_length=64), device="cpu").encode(SENTENCES[:4])
    got = loaded.encode(SENTENCES[:4])
    for g, e in zip(got.sparse, expected.sparse, strict=True):
        assert g.keys() == e.keys()
        np.testing.assert_allclose(list(g.values()), [e[k] for k in g], rtol=1e-4)
    assert DocEncoder.from_bundle(plain, device="cpu").encode(SENTENCES[:4]).sparse != got.sparse
    assert_onnx_encodes_as(fitted, got.sparse, SENTENCES[:4])
    (fitted.doc_encoder_dir / LOWRANK_FILE).unlink()
    for runtime in ("torch", "onnx"):
        with pytest.raises(BundleError, match=f"doc_encoder/{LOWRANK_FILE} is missing; rebuild"):
            open_doc_encoder(fitted, runtime=runtime, device="cpu")


def test_the_config_field_is_left_out_when_off_and_refused_with_medusa() -> None:
    base = {"backbone_name": "x", "architecture": "BertModel", "kind": "encoder", "pooling": "cls",
            "normalize": False, "dense_dim": 8, "served_dim": 8, "max_length": 16, "sparse_head": "tied"}
    assert "sparse_lowrank" not in BundleConfig(**base).to_dict()
    on = BundleConfig(**base, sparse_lowrank=16)
    assert BundleConfig.from_dict(json.loads(json.dumps(on.to_dict()))).sparse_lowrank == 16
    with pytest.raises(BundleError, match="sparse_lowrank is a rank >= 0"):
        BundleConfig(**base, sparse_lowrank=4, sparse_mode="medusa_last", medusa_heads=1)


def test_cli_fit_sparse_lowrank_setting() -> None:
    from lr_opensearch.cli.bundle import lowrank_setting
    from lr_opensearch.fit.sparse import DEFAULT_SPARSE_LOWRANK

    assert lowrank_setting(None) == DEFAULT_SPARSE_LOWRANK
    assert lowrank_setting(0) is None
    assert lowrank_setting(16).rank == 16
    with pytest.raises(ConfigError, match="--fit-sparse-lowrank must be >= 0 rank"):
        lowrank_setting(-1)
    with pytest.raises(ConfigError, match="pairs must be one of cut, masked"):
        LowRankFitConfig(pairs="other")


def test_an_older_bundle_loads_unchanged_without_a_correction() -> None:
    old = Path(__file__).resolve().parents[1] / "data" / "bundle-v1-before-fit"
    bundle = load_bundle(old)
    expected = json.loads((old.parent / "bundle-v1-before-fit.expected.json").read_text())
    assert bundle.bundle_id == expected["bundle_id"] and bundle.config.sparse_lowrank == 0
    assert "sparse_lowrank" not in bundle.config.to_dict()


@pytest.mark.node
def test_a_bundle_with_both_fitted_heads_ingests_with_torch_blocked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, os_client: Any, opensearch_url: str,
        index_name: str) -> None:
    """Issue 48: ``lr ingest`` of a bundle built with ``--fit-sparse-lowrank`` and
    ``--fit-sparse``, torch blocked (ONNX Runtime; the graph cached once): every stored
    document holds the terms and weights torch's encoder gives it."""
    from test_build_without_torch import lr_without_torch

    from lr_opensearch.fit.sparse import SparseFitConfig
    from lr_opensearch.indexing.documents import SparseKeys
    from lr_opensearch.instructions import document_text
    from lr_opensearch.model.onnx_encoder import OnnxDocEncoder

    model_dir, corpus = tiny_checkpoint_and_corpus(tmp_path)
    monkeypatch.setenv("LR_CACHE_DIR", str(tmp_path / "cache"))
    lowrank = LowRankFitConfig(rank=4, steps=5, batch=8, negatives=4, lr=0.05, flops_columns=16)
    bundle = load_bundle(build_bundle(
        model_dir, tmp_path / "fitted", tables=TableSettings(batch_size=64, max_length=64), progress=False,
        fit=FitRecipe(corpora=(corpus,), max_queries=100, sparse=SparseFitConfig(epochs=1, batch=32),
                      sparse_lowrank=lowrank)))
    assert bundle.config.sparse_term_affine and bundle.config.sparse_lowrank == 4
    OnnxDocEncoder.from_bundle(bundle)  # the graph: exported once, with torch, into the cache
    try:
        lr_without_torch(tmp_path, ["ingest", str(corpus), "--bundle", str(bundle.path), "--index",
                                    index_name, "--url", opensearch_url, "--no-progress",
                                    "--state-dir", str(tmp_path / "state")],
                         {"LR_CACHE_DIR": str(tmp_path / "cache")})
        os_client.indices.refresh(index=index_name)
        hits = os_client.search(index=index_name, body={"size": 100, "query": {"match_all": {}}})["hits"]["hits"]
    finally:
        os_client.indices.delete(index=index_name, ignore_unavailable=True)
    assert len(hits) == len(SENTENCES)
    keys = SparseKeys(bundle.tokenizer)
    texts = [document_text(h["_source"].get("title") or "", h["_source"]["text"]) for h in hits]
    for hit, terms in zip(hits, DocEncoder.from_bundle(bundle, device="cpu").encode(texts).sparse, strict=True):
        want = {keys.key(t): w for t, w in terms.items()}
        assert hit["_source"]["lr_sparse"].keys() == want.keys()
        np.testing.assert_allclose([hit["_source"]["lr_sparse"][k] for k in want], list(want.values()),
                                   rtol=1e-3)
