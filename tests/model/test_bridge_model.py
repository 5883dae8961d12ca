"""BRIDGE-Embed's Medusa sparse side (issue 19): head shapes, the aggregation formula, the
self-distillation start, the bundle fields, and training -> export -> ingest's stored terms.

Tiny random Llama / BERT models (model_fixtures, trainer_support), CPU, seconds each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from model_fixtures import tiny_bert, tiny_llama
from trainer_support import TINY_CONFIG, tiny_llama_dir, tiny_overrides, write_tiny_records

from lr_opensearch.bundle import BundleConfig, load_bundle
from lr_opensearch.errors import BundleError, ConfigError
from lr_opensearch.model import DocEncoder
from lr_opensearch.model.framing import tokenize_texts
from lr_opensearch.model.medusa import (
    MEDUSA_FILE,
    MedusaHeads,
    aggregate,
    last_positions,
    soft_top_k,
)
from trainer.config import load_config
from trainer.losses import build_loss

DOCS = ["heat transfer in a laminar boundary layer", "patients in a clinical trial",
        "the eiffel tower in paris"]


def _batch(model: Any, tok: Any, texts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    rows, _ = tokenize_texts(tok, texts, model.framing, 48)
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for n, r in enumerate(rows):
        ids[n, : len(r)], mask[n, : len(r)] = torch.tensor(r), 1
    return ids, mask


def test_medusa_heads_start_as_the_original_head_and_have_the_paper_shapes():
    torch.manual_seed(0)
    weight, bias = torch.randn(50, 8), torch.randn(50)
    heads = MedusaHeads(weight, bias, heads=3)
    assert heads.heads == 3
    assert [tuple(w.weight.shape) for w in heads.w1] == [(8, 8)] * 3   # W1: d x d
    assert [tuple(w.weight.shape) for w in heads.w2] == [(50, 8)] * 3  # W2: V x d
    h = torch.randn(4, 8)
    assert heads.logits(0, h).shape == (4, 50)
    assert torch.allclose(heads.logits(0, h), h @ weight.T + bias, atol=1e-6)  # head 0 = LM head
    assert not torch.allclose(heads.logits(1, h), heads.logits(2, h))  # the others differ
    with pytest.raises(ConfigError, match=">= 1"):
        MedusaHeads(weight, bias, heads=0)


@pytest.mark.parametrize("mode", ["medusa_last", "medusa_max"])
def test_aggregation_follows_the_formula(mode):
    torch.manual_seed(1)
    weight = torch.randn(40, 6)
    heads = MedusaHeads(weight, None, heads=2)
    hidden = torch.randn(2, 5, 6)
    mask = torch.tensor([[1, 1, 1, 1, 0], [0, 1, 1, 1, 1]], dtype=torch.bool)  # both paddings
    content = mask.clone()
    content[0, 0] = content[1, 1] = False
    eos = 7
    out = aggregate(heads, hidden, mask, content, (weight, None), eos, mode)
    assert last_positions(mask).tolist() == [3, 4]
    want = torch.zeros(2, 40)
    for n in range(2):
        for b, t in enumerate((3, 4)):
            p = torch.softmax(heads.logits(n, hidden[b, t]), -1)
            if mode == "medusa_last":
                part = p
            else:  # the naive max over content positions of head n's logits
                z = torch.stack([heads.logits(n, hidden[b, s]) for s in range(5) if content[b, s]])
                part = torch.log1p(torch.relu(z.max(0).values))
            want[b] += (1 - p[eos]) * part
    assert out.sparse.shape == (2, 40)
    assert torch.allclose(out.sparse, want, atol=1e-5)
    assert torch.allclose(out.base_logits, torch.stack([hidden[0, 3], hidden[1, 4]]) @ weight.T, atol=1e-5)


@pytest.mark.parametrize("make", [tiny_llama, tiny_bert])
def test_document_forward_in_medusa_mode_and_self_distillation_at_start(make):
    model, tok = make(sparse_mode="medusa_last", medusa_heads=3)
    ids, mask = _batch(model, tok, DOCS)
    out = model.encode_documents(ids, mask)
    assert out.sparse.shape == (3, model.vocab_size) and (out.sparse >= 0).all()
    assert out.head_logits is not None and out.base_logits is not None
    distill = build_loss("self_distill")
    assert distill(out.head_logits, out.base_logits).loss.item() == pytest.approx(0.0, abs=1e-6)
    with torch.no_grad():
        model.medusa.w1[0].weight.normal_(0, 0.5)
    moved = model.encode_documents(ids, mask)
    assert distill(moved.head_logits, moved.base_logits).loss.item() > 1e-4
    plain, _ = make()  # the default is LightRetriever's max mode, no extra outputs
    assert plain.sparse_mode == "max" and plain.medusa is None
    assert plain.encode_documents(ids, mask).head_logits is None


def test_bundle_config_records_the_mode_and_old_manifests_stay_max():
    base = dict(backbone_name="b", architecture="A", kind="decoder", pooling="last",
                normalize=True, dense_dim=8, served_dim=8, max_length=16, sparse_head="lm")
    plain = BundleConfig(**base)
    assert "sparse_mode" not in plain.to_dict()  # "max" bundles keep their manifest and id
    assert BundleConfig.from_dict(plain.to_dict()).sparse_mode == "max"
    medusa = BundleConfig(**base, sparse_mode="medusa_last", medusa_heads=3, sparse_top_k=64)
    again = BundleConfig.from_dict(medusa.to_dict())
    assert (again.sparse_mode, again.medusa_heads, again.sparse_top_k) == ("medusa_last", 3, 64)
    with pytest.raises(BundleError, match="medusa_heads"):
        BundleConfig(**base, sparse_mode="medusa_max")
    with pytest.raises(BundleError, match="sparse_mode"):
        BundleConfig(**base, sparse_mode="mean")


def test_bridge_config_options_are_checked():
    with pytest.raises(ConfigError, match="sparse_mode"):
        load_config(TINY_CONFIG, ["loss.s_matryoshka_weight=1"])
    with pytest.raises(ConfigError, match="Medusa"):
        load_config(TINY_CONFIG, ["loss.self_distill_weight=1"])
    with pytest.raises(ConfigError, match="unknown"):
        load_config(TINY_CONFIG, ["loss.s_matryoshka_sizess=[4]"])
    shipped = load_config(Path(TINY_CONFIG).with_name("bridge-cpu.yaml"))
    assert shipped.model.sparse_mode == "medusa_last" and shipped.model.medusa_heads == 3
    assert shipped.loss.s_matryoshka_sizes == (128, 256, 512) and shipped.lora.r == 64


def train_bridge_bundle(root: Path, *, top_k: int = 12) -> tuple[Path, Any]:
    """A tiny Llama trained 3 steps with every BRIDGE term, exported with k = ``top_k``.

    Returns (bundle path, the trainer whose in-memory model was exported)."""
    from trainer.export import export_model
    from trainer.train import Trainer

    records = write_tiny_records(root / "tiny.jsonl")
    extra = {"run.steps": 3, "model.pooling": "last", "model.normalize": False,
             "model.sparse_mode": "medusa_last", "model.medusa_heads": 2,
             "loss.sparse_weight": 0, "loss.kl_weight": 0, "loss.s_matryoshka_weight": 1,
             "loss.s_matryoshka_sizes": "[4, 8, 16]", "loss.self_distill_weight": 0.5,
             "loss.rrf_weight": 10, "loss.temperature": 1.0, "export.sparse_top_k": top_k}
    config = load_config(TINY_CONFIG, tiny_overrides(tiny_llama_dir(root), records,
                                                     root / "run", **extra))
    trainer = Trainer(config)
    before = {n: p.detach().clone() for n, p in trainer.model.medusa.named_parameters()}
    result = trainer.run()
    for name in ("s_matryoshka", "self_distill", "rrf"):
        assert name in result.last_logs
    changed = [n for n, p in trainer.model.medusa.named_parameters() if not torch.equal(p, before[n])]
    assert changed  # the heads trained
    bundle = export_model(trainer.model, trainer.tokenizer, config, root / "bundle", progress=False)
    return bundle, trainer


def expected_terms(trainer: Any, texts: list[str], k: int) -> list[dict[int, float]]:
    """The trained in-memory model's stored terms: its forward, then soft top-k at k with the
    special (and padded) ids left out, computed here without DocEncoder."""
    from trainer.objective import sparse_excluded

    model = trainer.model.eval()
    ids, mask = _batch(model, trainer.tokenizer, texts)
    with torch.no_grad():
        sparse = model.encode_documents(ids, mask).sparse
    limit = trainer.tokenizer.get_vocab_size(with_added_tokens=True)
    excluded = sparse_excluded(trainer.tokenizer, model.vocab_size)
    values, indices = soft_top_k(sparse[:, :limit], k, model.soft_top_k_temperature,
                                 [i for i in excluded if i < limit])
    return [{int(t): float(w) for t, w in zip(i.tolist(), v.tolist(), strict=True) if w > 0}
            for v, i in zip(values, indices, strict=True)]


def test_export_records_the_heads_and_the_doc_encoder_stores_the_trained_top_k(tmp_path):
    path, trainer = train_bridge_bundle(tmp_path)
    bundle = load_bundle(path)
    cfg = bundle.config
    assert (cfg.sparse_mode, cfg.medusa_heads, cfg.sparse_top_k) == ("medusa_last", 2, 12)
    assert (bundle.doc_encoder_dir / MEDUSA_FILE).is_file()
    assert f"doc_encoder/{MEDUSA_FILE}" in bundle.manifest["files"]
    got = DocEncoder.from_bundle(bundle, device="cpu").encode(DOCS).sparse
    want = expected_terms(trainer, DOCS, 12)
    for g, w in zip(got, want, strict=True):
        assert list(g) == list(w) and len(g) == 12
        assert [pytest.approx(v, rel=1e-4, abs=1e-7) for v in w.values()] == list(g.values())
        assert sum(v * v for v in g.values()) == pytest.approx(1.0, rel=1e-4)


def test_two_stages_dense_first_then_medusa_from_the_exported_doc_encoder(tmp_path):
    """The paper's schedule: stage 1 trains the dense side only (sparse weights 0) and is
    exported; stage 2 starts from that bundle's merged doc encoder (``model.path``) with the
    Medusa heads and its own LoRA. Stage 2 starts from exactly the stage-1 weights."""
    from trainer.export import export_model
    from trainer.train import Trainer

    records = write_tiny_records(tmp_path / "tiny.jsonl")
    common = {"model.pooling": "last", "model.normalize": False, "loss.kl_weight": 0,
              "loss.temperature": 1.0}
    stage1 = load_config(TINY_CONFIG, tiny_overrides(
        tiny_llama_dir(tmp_path), records, tmp_path / "run1",
        **{**common, "run.steps": 2, "loss.sparse_weight": 0}))
    first = Trainer(stage1)
    first.run()
    bundle1 = load_bundle(export_model(first.model, first.tokenizer, stage1, tmp_path / "b1",
                                       progress=False))
    stage2 = load_config(TINY_CONFIG, tiny_overrides(
        bundle1.doc_encoder_dir, records, tmp_path / "run2",
        **{**common, "run.steps": 1, "lora.r": 8, "lora.alpha": 4, "loss.sparse_weight": 0,
           "model.sparse_mode": "medusa_last", "model.medusa_heads": 2,
           "loss.s_matryoshka_weight": 1, "loss.s_matryoshka_sizes": "[4, 8]",
           "export.sparse_top_k": 8}))
    second = Trainer(stage2)
    texts = DOCS
    ids, mask = _batch(second.model, second.tokenizer, texts)
    with torch.no_grad():
        start = second.model.eval().encode_documents(ids, mask).dense
    shipped = DocEncoder.from_bundle(bundle1, device="cpu").encode_dense(texts)
    torch.testing.assert_close(start, torch.as_tensor(shipped), rtol=1e-4, atol=1e-5)
    result = second.run()
    assert "s_matryoshka" in result.last_logs
    bundle2 = load_bundle(export_model(second.model, second.tokenizer, stage2, tmp_path / "b2",
                                       progress=False))
    assert (bundle2.config.sparse_mode, bundle2.config.sparse_top_k) == ("medusa_last", 8)
