"""The document forward: shapes, the sparse definition, padding invariance, DocEncoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from model_fixtures import one_thread, tiny_bert, tiny_llama  # noqa: F401
from tiny_artifacts import SENTENCES

from lr_opensearch.model import DocEncoder, DocSettings, Framing, special_token_ids, tokenize_texts

pytestmark = pytest.mark.usefixtures("one_thread")

MODELS = {
    "llama": lambda: tiny_llama(),
    "bert-mlm": lambda: tiny_bert(),
    "bert-tied-mean": lambda: tiny_bert(architecture="BertModel", pooling="mean", normalize=True),
}


def _batch(rows: list[list[int]], left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    length = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.long)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    for n, r in enumerate(rows):
        sl = slice(length - len(r), length) if left else slice(0, len(r))
        ids[n, sl], mask[n, sl] = torch.tensor(r), 1
    return ids, mask


@pytest.mark.parametrize("name", list(MODELS))
def test_doc_forward_shapes_and_sparse_definition(name: str) -> None:
    model, tok = MODELS[name]()
    rows, _ = tokenize_texts(tok, SENTENCES[:4], model.framing, 64)
    ids, mask = _batch(rows)
    with torch.no_grad():
        out = model.encode_documents(ids, mask)
        assert out.dense.shape == (4, model.hidden_size)
        assert out.sparse.shape == (4, model.vocab_size)
        # the definition, computed naively: log(1 + relu(max of the logits over the real
        # positions that are not the framing's special tokens (BOS/CLS, EOS/SEP)))
        hidden = model.body(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))
        weight, bias = model.head.projection(model.hf)
        logits = model.head.transform(model.hf, hidden) @ weight.T + (0 if bias is None else bias)
        content = torch.zeros_like(mask, dtype=torch.bool)
        head, tail = len(model.framing.prefix), len(model.framing.suffix)
        assert head + tail > 0  # every fixture frames its documents
        for n, row in enumerate(rows):
            content[n, head : len(row) - tail] = True
        logits = logits.masked_fill(~content.unsqueeze(-1), float("-inf"))
        expected = torch.log1p(torch.relu(logits.max(1).values))
    torch.testing.assert_close(out.sparse, expected, rtol=0, atol=1e-5)
    assert (out.sparse >= 0).all() and torch.isfinite(out.sparse).all()
    if model.normalize:
        torch.testing.assert_close(out.dense.norm(dim=-1), torch.ones(4))


@pytest.mark.parametrize("name", list(MODELS))
@pytest.mark.parametrize("left", [False, True])
def test_padding_does_not_change_a_document(name: str, left: bool) -> None:
    model, tok = MODELS[name]()
    rows, _ = tokenize_texts(tok, [SENTENCES[1], SENTENCES[0]], model.framing, 64)
    assert len(rows[1]) < len(rows[0])
    with torch.no_grad():
        alone = model.encode_documents(*_batch([rows[1]]))
        padded = model.encode_documents(*_batch(rows, left=left))
    torch.testing.assert_close(padded.dense[1], alone.dense[0], rtol=0, atol=1e-5)
    torch.testing.assert_close(padded.sparse[1], alone.sparse[0], rtol=0, atol=1e-5)


def test_doc_forward_is_differentiable() -> None:
    model, tok = tiny_bert()
    model.train()
    rows, _ = tokenize_texts(tok, SENTENCES[:3], model.framing, 64)
    out = model.encode_documents(*_batch(rows))
    (out.dense.sum() + out.sparse.sum()).backward()
    emb = model.hf.get_input_embeddings().weight.grad
    transform = model.hf.cls.predictions.transform.dense.weight.grad
    assert emb is not None and emb.abs().sum() > 0
    assert transform is not None and transform.abs().sum() > 0


def test_framing_and_truncation() -> None:
    _, tok = tiny_bert()
    framing = Framing.derive(tok, "encoder")
    assert framing.prefix == (tok.token_to_id("[CLS]"),)
    assert framing.suffix == (tok.token_to_id("[SEP]"),)
    rows, cut = tokenize_texts(tok, [SENTENCES[1], "paris"], framing, 6)
    assert cut == [True, False]
    assert len(rows[0]) == 6 and rows[0][0] == framing.prefix[0] and rows[0][-1] == framing.suffix[0]
    _, bpe = tiny_llama()
    dec = Framing.derive(bpe, "decoder", eos_token_id=1)
    assert dec.prefix == (bpe.token_to_id("<|begin_of_text|>"),) and dec.suffix == (1,)


def test_doc_encoder_topk_min_weight_and_order() -> None:
    model, tok = tiny_bert()
    specials = set(special_token_ids(tok))
    texts = [SENTENCES[i] for i in (2, 0, 5, 1, 7)]
    rows, _ = tokenize_texts(tok, texts, model.framing, 64)
    with torch.no_grad():
        full = model.encode_documents(*_batch(rows)).sparse
    min_weight = float(full.median())
    enc = DocEncoder(model, tok, DocSettings(64, served_dim=20, top_k=7, min_weight=min_weight),
                     batch_size=2, device="cpu")
    batch = enc.encode(texts)
    assert batch.dense.shape == (5, 20) and batch.dense.dtype.name == "float32"
    assert batch.truncated == [False] * 5
    for n, terms in enumerate(batch.sparse):
        assert 0 < len(terms) <= 7
        assert all(w > min_weight for w in terms.values())
        assert not specials & set(terms)
        for t, w in terms.items():
            assert w == pytest.approx(float(full[n, t]), abs=1e-5)
        # they are the 7 largest non-special weights
        row = full[n].clone()
        row[list(specials)] = 0
        top = torch.topk(row, 7).values
        assert min(terms.values()) >= float(top[len(terms) - 1]) - 1e-5
    alone = enc.encode([texts[3]])
    assert alone.dense[0] == pytest.approx(batch.dense[3], abs=1e-5)
    assert alone.sparse[0].keys() == batch.sparse[3].keys()


def test_doc_encoder_reports_truncation() -> None:
    model, tok = tiny_llama()
    enc = DocEncoder(model, tok, DocSettings(max_length=5, top_k=4), device="cpu")
    batch = enc.encode([SENTENCES[1], "Paris"])
    assert batch.truncated == [True, False]
    assert all(0 < len(s) <= 4 for s in batch.sparse)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_dense_only_forward_equals_the_full_forward(name: str) -> None:
    model, tok = MODELS[name]()
    enc = DocEncoder(model, tok, DocSettings(max_length=32), device="cpu", batch_size=2)
    texts = [*SENTENCES[:3], "a"]
    batch = enc.encode(texts)
    dense = enc.encode_dense(texts)
    assert dense.shape == batch.dense.shape
    torch.testing.assert_close(torch.from_numpy(dense), torch.from_numpy(batch.dense), rtol=0, atol=0)


def test_served_prefix_is_renormalised_like_the_matryoshka_loss() -> None:
    model, tok = MODELS["bert-tied-mean"]()  # normalize=True
    texts = SENTENCES[:4]
    full = DocEncoder(model, tok, DocSettings(max_length=64), device="cpu").encode_dense(texts)
    cut = DocEncoder(model, tok, DocSettings(max_length=64, served_dim=8), device="cpu").encode_dense(texts)
    assert cut.shape == (4, 8)
    expected = torch.nn.functional.normalize(torch.from_numpy(full[:, :8]), dim=-1)
    torch.testing.assert_close(torch.from_numpy(cut), expected, rtol=1e-5, atol=1e-6)
    assert abs(float(torch.from_numpy(full[:, :8]).norm(dim=-1).max()) - 1) > 1e-3  # a cut alone is not unit
    # a model that does not normalise serves the raw prefix
    raw, rtok = MODELS["bert-mlm"]()
    a = DocEncoder(raw, rtok, DocSettings(max_length=64), device="cpu").encode_dense(texts)
    b = DocEncoder(raw, rtok, DocSettings(max_length=64, served_dim=8), device="cpu").encode_dense(texts)
    np.testing.assert_array_equal(a[:, :8], b)
