"""The sparse document side's per-term scale and bias (issue 48): the head, its fit, its
file, the bundle round trip, and the pseudo-queries' sources the fit learns from."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from model_fixtures import one_thread, save_model_dir, tiny_bert, tiny_checkpoint_and_corpus  # noqa: F401
from tiny_artifacts import SENTENCES

from lr_opensearch.bundle import Bundle, BundleConfig, load_bundle
from lr_opensearch.errors import BundleError, ConfigError
from lr_opensearch.fit.build import TableSettings, build_bundle
from lr_opensearch.fit.pseudo import clean_text, make_pseudo_queries
from lr_opensearch.fit.sparse import QuerySet, SparseFitConfig
from lr_opensearch.fit.sparse_head import fit_term_affine
from lr_opensearch.fit.tables import FitRecipe
from lr_opensearch.model import DocEncoder, LightRetrieverModel
from lr_opensearch.model.framing import tokenize_texts
from lr_opensearch.model.settings import DocSettings
from lr_opensearch.model.sparse_fits import TERM_AFFINE_FILE
from lr_opensearch.model.term_affine import TermAffine

pytestmark = pytest.mark.usefixtures("one_thread")


def _random_affine(vocab: int, seed: int = 1) -> TermAffine:
    g = torch.Generator().manual_seed(seed)
    return TermAffine(torch.rand(vocab, generator=g) * 2 + 0.1, torch.randn(vocab, generator=g))


def test_the_head_is_the_affine_map_of_every_positions_logit_before_the_max() -> None:
    """s'_t = log1p(relu(max_pos(a_t * logit + c_t))): computed from the maxima (the fused
    path) it equals the naive per-position form, and no head is today's vector."""
    model, tok = tiny_bert()
    ids, _ = tokenize_texts(tok, SENTENCES[:4], model.framing, 64)
    from lr_opensearch.model.doc_encoder import padded

    input_ids, mask = padded(ids)
    with torch.no_grad():
        plain = model.encode_documents(input_ids, mask).sparse
        hidden = model.body(input_ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))
        logits = model.head.transform(model.hf, hidden) @ model.head.projection(model.hf)[0].t()
        logits = logits + model.head.projection(model.hf)[1]
        content = model.content_mask(mask.bool())
        head = _random_affine(model.vocab_size)
        model.set_term_affine(head)
        fitted = model.encode_documents(input_ids, mask).sparse
    per_position = (logits * head.scale + head.bias).masked_fill(~content.unsqueeze(-1), float("-inf"))
    expected = torch.log1p(torch.relu(per_position.max(dim=1).values))
    torch.testing.assert_close(fitted, expected, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(fitted, plain, atol=1e-3)
    model.set_term_affine(TermAffine(torch.ones(model.vocab_size), torch.zeros(model.vocab_size)))
    with torch.no_grad():
        torch.testing.assert_close(model.encode_documents(input_ids, mask).sparse, plain)


def test_the_file_carries_its_format_and_is_checked(tmp_path: Path) -> None:
    head = _random_affine(7)
    loaded = TermAffine.load(head.save(tmp_path / "a.safetensors"), 7)
    torch.testing.assert_close(loaded.scale, head.scale)
    torch.testing.assert_close(loaded.bias, head.bias)
    with pytest.raises(BundleError, match="5 terms, but the sparse head has 7|7 terms, but the sparse head has 5"):
        TermAffine.load(tmp_path / "a.safetensors", 5)
    from safetensors.torch import save_file

    save_file({"scale": torch.ones(7), "bias": torch.zeros(7)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(BundleError, match="not a sparse term affine file"):
        TermAffine.load(tmp_path / "foreign.safetensors", 7)
    save_file({"scale": torch.ones(7), "bias": torch.zeros(7)}, str(tmp_path / "newer.safetensors"),
              metadata={"format": "lr-sparse-term-affine", "format_version": "99"})
    with pytest.raises(BundleError, match="newer than this library"):
        TermAffine.load(tmp_path / "newer.safetensors", 7)
    with pytest.raises(BundleError, match="scale must be finite and > 0"):
        TermAffine(torch.tensor([1.0, 0.0]), torch.zeros(2))


def _noisy_corpus(seed: int = 0) -> tuple[np.ndarray, QuerySet]:
    """30 documents over 40 terms: terms 0-29 are each one document's own (z = 1 there, 0
    elsewhere); terms 30-39 are noise, large and random in every document. Each query names
    its document's own term and two noise terms: the head as it is ranks by the noise."""
    rng = np.random.default_rng(seed)
    n, vocab = 30, 40
    z = np.zeros((n, vocab), np.float32)
    z[np.arange(n), np.arange(n)] = 1.0
    z[:, 30:] = rng.uniform(0, 4, (n, 10))
    rows, cols = [], []
    sources = []
    for q in range(600):
        d = q % n
        for t in (d, 30 + rng.integers(10), 30 + rng.integers(10)):
            rows.append(q)
            cols.append(int(t))
        sources.append(d)
    bags = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(600, vocab))
    bags.sum_duplicates()
    idf = np.ones(vocab, np.float32)
    return z.astype(np.float16), QuerySet.build(bags, np.asarray(sources), idf, np.arange(n))


def test_the_fit_learns_to_drop_terms_that_do_not_tell_documents_apart() -> None:
    maxima, queries = _noisy_corpus()
    scale, bias, stats = fit_term_affine(maxima, queries, SparseFitConfig(epochs=20, batch=64, lr=0.1,
                                                                          flops=0.1, holdout=0.2),
                                         progress=False)
    print(f"\nheld-back MRR {stats.holdout_mrr_before:.3f} -> {stats.holdout_mrr_after:.3f}")
    assert stats.holdout_mrr_before < 0.5 and stats.holdout_mrr_after > 0.9
    own = np.log1p(np.maximum(scale[:30] * 1.0 + bias[:30], 0))
    noise = np.log1p(np.maximum(scale[30:] * 4.0 + bias[30:], 0))
    assert own.min() > noise.max()  # the own terms now outweigh the noise at its largest
    assert (scale > 0).all() and stats.queries + stats.holdout_queries == len(queries)
    with pytest.raises(ConfigError, match="at least 10"):
        fit_term_affine(maxima, QuerySet(queries.vectors[:5], queries.sources[:5]), SparseFitConfig(),
                        progress=False)


def test_query_set_weighs_distinct_tokens_by_idf_and_keeps_encoded_sources() -> None:
    bags = sp.csr_matrix(np.array([[0.5, 0.5, 0], [0, 0, 1.0], [1.0, 0, 0]]))
    idf = np.array([2.0, 3.0, 5.0], np.float32)
    got = QuerySet.build(bags, np.array([1, -1, 0]), idf, doc_rows=np.array([-1, 0]))
    assert got.vectors.toarray().tolist() == [[2.0, 3.0, 0.0]]  # query 2's document not encoded
    assert got.sources.tolist() == [0]


def test_pseudo_queries_name_the_document_they_were_cut_from() -> None:
    docs = [(f"title number {i}", s) for i, s in enumerate(SENTENCES)]
    pq = make_pseudo_queries(docs, sentences_per_doc=2, spans_per_doc=3, passage_share=0.5,
                            passage_words=(3, 6), seed=3)
    assert len(pq.sources) == len(pq) and set(pq.recipe) >= {"title", "span", "passage"}
    for text, source in zip(pq.texts, pq.sources, strict=True):
        title, body = docs[int(source)]
        assert text in clean_text(f"{title} {body}") or text in clean_text(body)


def test_a_bundle_with_the_fitted_head_round_trips_and_one_without_keeps_its_id(tmp_path: Path) -> None:
    model_dir, corpus = tiny_checkpoint_and_corpus(tmp_path)
    kw = {"tables": TableSettings(batch_size=64, max_length=64), "progress": False}
    plain = load_bundle(build_bundle(model_dir, tmp_path / "plain", **kw,
                                     fit=FitRecipe(corpora=(corpus,), max_queries=100, sparse=None)))
    assert "sparse_term_affine" not in plain.manifest["config"]
    assert "sparse_doc" not in plain.manifest["fit"]
    assert not (plain.doc_encoder_dir / TERM_AFFINE_FILE).exists()
    fitted = load_bundle(build_bundle(model_dir, tmp_path / "fitted", **kw, fit=FitRecipe(
        corpora=(corpus,), max_queries=100, sparse=SparseFitConfig(epochs=2, batch=32))))
    assert fitted.config.sparse_term_affine is True
    record = fitted.manifest["fit"]["sparse_doc"]
    assert record["queries"] > 0 and record["config"]["epochs"] == 2
    assert f"doc_encoder/{TERM_AFFINE_FILE}" in fitted.manifest["files"]
    from lr_opensearch.cli.bundle import fit_lines

    assert any("sparse doc  per-term scale and bias: 2 epochs" in line for line in fit_lines(fitted.fit, "idf"))
    head = TermAffine.load(fitted.doc_encoder_dir / TERM_AFFINE_FILE, fitted.vocab_size)
    assert not torch.allclose(head.bias, torch.zeros_like(head.bias))
    # the bundle's doc encoder = the checkpoint with the saved head
    loaded = DocEncoder.from_bundle(fitted, device="cpu")
    assert loaded.model.term_affine is not None
    model = LightRetrieverModel.from_pretrained(model_dir)
    model.set_term_affine(head)
    expected = DocEncoder(model, fitted.tokenizer, DocSettings(max_length=64), device="cpu").encode(SENTENCES[:4])
    got = loaded.encode(SENTENCES[:4])
    for g, e in zip(got.sparse, expected.sparse, strict=True):
        assert g.keys() == e.keys()
        np.testing.assert_allclose(list(g.values()), [e[k] for k in g], rtol=1e-5)
    # without the flag the same files encode as before: the bundle names the head, not the file
    before = DocEncoder.from_bundle(plain, device="cpu").encode(SENTENCES[:4]).sparse
    assert before != got.sparse
    assert_onnx_encodes_as(fitted, got.sparse, SENTENCES[:4])


def assert_onnx_encodes_as(bundle: Bundle, want: list[dict[int, float]], texts: list[str]) -> None:
    """``--runtime auto`` on a CPU puts a fitted bundle's document encoder on ONNX Runtime
    (issue 48: the numpy head applies the fits), and it keeps torch's terms and weights."""
    from lr_opensearch.model.onnx_encoder import OnnxDocEncoder
    from lr_opensearch.model.runtime import open_doc_encoder

    encoder = open_doc_encoder(bundle, runtime="auto", device="cpu")
    assert isinstance(encoder, OnnxDocEncoder)
    for g, e in zip(encoder.encode(texts).sparse, want, strict=True):
        assert g.keys() == e.keys()
        np.testing.assert_allclose(list(g.values()), [e[k] for k in g], atol=1e-4)


def test_a_bundle_that_names_the_head_without_its_file_is_refused(tmp_path: Path) -> None:
    model, tok = tiny_bert()
    model_dir = save_model_dir(model, tok, tmp_path / "ckpt")
    with pytest.raises(ConfigError, match=TERM_AFFINE_FILE):
        LightRetrieverModel.from_pretrained(model_dir, term_affine=True)
    _random_affine(model.vocab_size).save(model_dir / TERM_AFFINE_FILE)
    assert LightRetrieverModel.from_pretrained(model_dir, term_affine=False).term_affine is None
    assert LightRetrieverModel.from_pretrained(model_dir).term_affine is not None


def test_the_config_field_is_left_out_when_off_and_refused_with_medusa() -> None:
    base = {"backbone_name": "x", "architecture": "BertModel", "kind": "encoder", "pooling": "cls",
            "normalize": False, "dense_dim": 8, "served_dim": 8, "max_length": 16, "sparse_head": "tied"}
    assert "sparse_term_affine" not in BundleConfig(**base).to_dict()
    on = BundleConfig(**base, sparse_term_affine=True)
    assert BundleConfig.from_dict(json.loads(json.dumps(on.to_dict()))).sparse_term_affine is True
    with pytest.raises(BundleError, match="sparse_term_affine applies to sparse_mode 'max'"):
        BundleConfig(**base, sparse_term_affine=True, sparse_mode="medusa_last", medusa_heads=1)


def test_cli_fit_sparse_setting() -> None:
    from lr_opensearch.cli.bundle import sparse_setting
    from lr_opensearch.fit.sparse import DEFAULT_SPARSE_FIT

    assert sparse_setting(None) == DEFAULT_SPARSE_FIT
    assert sparse_setting(0) is None
    assert sparse_setting(4).epochs == 4
    with pytest.raises(ConfigError, match="--fit-sparse must be >= 0"):
        sparse_setting(-1)


@pytest.mark.slow
@pytest.mark.node
@pytest.mark.parametrize(("flag", "value", "record"), [("--fit-sparse", "1", "sparse_doc"),
                                                       ("--fit-sparse-lowrank", "32", "sparse_lowrank")])
def test_the_packaged_minilm_fitted_with_the_sparse_head_through_lr_eval(
        opensearch_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str,
        record: str) -> None:
    """The real model: `lr bundle build --fit-corpus ADI --fit-sparse 1` (a per-term scale
    and bias) or `--fit-sparse-lowrank 32` (a low-rank correction of the projection), then
    `lr eval` on the node (ingest through the bundle's doc encoder with its fitted head, the
    sparse leg searched as it is served); the index's stored terms are the fitted head's."""
    from ingest_support import data_dir

    from lr_opensearch.cli import main
    from lr_opensearch.engine.client import make_client

    adi = data_dir() / "adi"
    out = tmp_path / "bundle"
    assert main(["bundle", "build", "--fit-corpus", str(adi / "corpus.jsonl.gz"), flag, value,
                 "--out", str(out)]) == 0
    bundle = load_bundle(out)
    assert bundle.fit[record]["documents"] == 82
    assert bundle.config.sparse_term_affine == (record == "sparse_doc")
    assert bundle.config.sparse_lowrank == (32 if record == "sparse_lowrank" else 0)
    index = f"lr-sparse-fit-{bundle.bundle_id[:12]}"
    client = make_client(opensearch_url)
    try:
        capsys.readouterr()
        assert main(["eval", "--dataset", str(adi), "--bundle", str(out), "--index", index,
                     "--url", opensearch_url, "--runs", "bm25,lr-sparse,lr-hybrid", "--no-sweep",
                     "--out", str(tmp_path / "eval"), "--json"]) == 0
        runs = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["runs"]
        print(f"\n[sparse fit {flag} {value}] lr eval ADI nDCG@10: " + ", ".join(f"{k} {v['ndcg@10']:.4f}" for k, v in runs.items()))
        assert all(0.1 < r["ndcg@10"] <= 1.0 for r in runs.values())
        first = client.search(index=index, body={"size": 1, "query": {"match_all": {}}})["hits"]["hits"][0]
        from lr_opensearch.indexing.documents import SparseKeys
        from lr_opensearch.instructions import document_text

        src, keys = first["_source"], SparseKeys(bundle.tokenizer)
        ids = DocEncoder.from_bundle(bundle, device="cpu").encode(
            [document_text(src.get("title") or "", src.get("text") or "")]).sparse[0]
        want = {keys.key(t): w for t, w in ids.items()}
        assert src["lr_sparse"].keys() == want.keys()
        np.testing.assert_allclose([src["lr_sparse"][k] for k in want], list(want.values()), rtol=1e-3)
    finally:
        client.indices.delete(index=index, ignore_unavailable=True)


@pytest.mark.parametrize("recipe", [{"sparse": SparseFitConfig()}, {"sparse_lowrank": "lowrank"}])
def test_a_sparse_fit_where_the_build_cannot_run_torch_says_what_to_do(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, recipe: dict[str, object]) -> None:
    """The sparse fits train on torch: ``--runtime onnx`` refuses them naming ``--runtime
    torch``, a machine without torch names the extra; one line each, before any work."""
    import lr_opensearch.model.runtime as runtime
    from lr_opensearch.fit.sparse import LowRankFitConfig

    if recipe.get("sparse_lowrank"):
        recipe = {"sparse_lowrank": LowRankFitConfig(rank=2)}
    flag = "--fit-sparse" if "sparse" in recipe else "--fit-sparse-lowrank"
    model_dir, corpus = tiny_checkpoint_and_corpus(tmp_path)
    fit = FitRecipe(corpora=(corpus,), max_queries=100, **recipe)  # type: ignore[arg-type]
    assert fit.sparse_fits == (flag,)
    with pytest.raises(ConfigError, match=rf"--runtime onnx: not with {flag} .*; use --runtime torch$"):
        build_bundle(model_dir, tmp_path / "out", fit=dataclasses.replace(fit, runtime="onnx"))
    monkeypatch.setattr(runtime, "installed", lambda name: name != "torch")
    with pytest.raises(ConfigError, match=rf"lr bundle build with {flag} .*needs torch.*lr-opensearch\[train\]"):
        build_bundle(model_dir, tmp_path / "out", fit=fit)
    assert not (tmp_path / "out").exists()
