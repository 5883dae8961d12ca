"""build_bundle from tiny random checkpoints: the cached table is exact (up to float16)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from model_fixtures import (  # noqa: F401
    one_thread,
    query_tokens,
    save_model_dir,
    tiny_bert,
    tiny_checkpoint_and_corpus,
    tiny_llama,
)
from tiny_artifacts import SENTENCES

from lr_opensearch.bundle import load_bundle
from lr_opensearch.fit.build import BackboneSettings, TableSettings, build_bundle
from lr_opensearch.fit.tables import FitRecipe
from lr_opensearch.model import DocEncoder, DocSettings, LightRetrieverModel, instruction_ids
from lr_opensearch.query import QueryEncoder

pytestmark = pytest.mark.usefixtures("one_thread")

INSTRUCTIONS = {"default": "", "web": "Instruct: find web passages for the query\nQuery: "}
QUERIES = ["boundary layer heat transfer", "the tower is tall", "Paris"]
FP16 = {"rtol": 2e-3, "atol": 2e-3}  # tables are stored as float16


def _check_bundle(model: LightRetrieverModel, tok, bundle_dir: Path) -> None:  # noqa: ANN001
    bundle = load_bundle(bundle_dir)
    cfg = bundle.config
    assert (cfg.kind, cfg.pooling, cfg.sparse_head) == (model.kind, model.pooling, model.head.kind)
    assert cfg.dense_dim == cfg.served_dim == model.hidden_size
    assert cfg.normalize == model.normalize
    encoder = QueryEncoder(bundle)
    for name, text in INSTRUCTIONS.items():
        prompt = instruction_ids(tok, text)
        tokens = query_tokens(tok, QUERIES)
        with torch.no_grad():
            expected = model.encode_query_dense(prompt, tokens).numpy()
        encoded = [encoder.encode(q, instruction=name) for q in QUERIES]
        assert [list(e.token_ids) for e in encoded] == tokens
        got = np.stack([e.dense for e in encoded])
        diff = np.abs(got - expected).max()
        print(f"\n{model.architecture}/{name}: max |QueryEncoder - encode_query_dense| = {diff:.1e}")
        np.testing.assert_allclose(got, expected, **FP16)
        assert not np.allclose(got[0], got[1], atol=1e-3)  # different queries differ
    # the doc encoder in the bundle is the same model
    reloaded = DocEncoder.from_bundle(bundle, device="cpu").encode(SENTENCES[:3])
    original = DocEncoder(model, tok, DocSettings(max_length=cfg.max_length), device="cpu").encode(SENTENCES[:3])
    np.testing.assert_allclose(reloaded.dense, original.dense, atol=1e-5)
    assert [s.keys() for s in reloaded.sparse] == [s.keys() for s in original.sparse]


def test_build_bundle_from_tiny_bert_mlm(tmp_path: Path) -> None:
    model, tok = tiny_bert()
    model_dir = save_model_dir(model, tok, tmp_path / "ckpt")
    out = build_bundle(model_dir, tmp_path / "bundle",
                       tables=TableSettings(instructions=INSTRUCTIONS, batch_size=64), progress=False)
    loaded = LightRetrieverModel.from_pretrained(model_dir)
    assert loaded.head.kind == "mlm" and loaded.pooling == "cls"
    _check_bundle(loaded.eval(), tok, out)
    with pytest.raises(Exception, match="already exists"):
        build_bundle(model_dir, out, progress=False)


def test_build_bundle_from_tiny_llama(tmp_path: Path) -> None:
    model, tok = tiny_llama()
    model_dir = save_model_dir(model, tok, tmp_path / "ckpt")
    out = build_bundle(model_dir, tmp_path / "bundle", progress=False,
                       tables=TableSettings(instructions=INSTRUCTIONS, batch_size=64, max_length=64))
    loaded = LightRetrieverModel.from_pretrained(model_dir)
    assert loaded.kind == "decoder" and loaded.head.kind == "lm" and loaded.pooling == "last"
    _check_bundle(loaded.eval(), tok, out)


def test_sentence_transformers_settings_are_used(tmp_path: Path) -> None:
    model, tok = tiny_bert(architecture="BertModel")
    model_dir = save_model_dir(model, tok, tmp_path / "st")
    (model_dir / "1_Pooling").mkdir()
    (model_dir / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    (model_dir / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]))
    (model_dir / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48}))
    out = build_bundle(model_dir, tmp_path / "bundle", tables=TableSettings(served_dim=16, batch_size=64),
                       progress=False)
    cfg = load_bundle(out).config
    assert (cfg.pooling, cfg.normalize, cfg.max_length, cfg.sparse_head) == ("mean", True, 48, "tied")
    assert cfg.served_dim == 16 and cfg.dense_dim == 32
    rows = load_bundle(out).table().astype(np.float32)
    np.testing.assert_allclose(np.linalg.norm(rows, axis=1), 1.0, atol=2e-3)  # normalised rows


def test_build_from_a_lora_model_saves_the_merged_weights(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    from lr_opensearch.fit.build import build_bundle_from_model

    model, tok = tiny_bert()
    model.hf = get_peft_model(model.hf, LoraConfig(r=4, lora_alpha=8, target_modules=["query", "value"]))
    with torch.no_grad():
        for name, param in model.hf.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # LoRA B starts at zero: make the adapter matter
    model.eval()
    before = DocEncoder(model, tok, DocSettings(max_length=64), device="cpu").encode(SENTENCES[:3])
    out = build_bundle_from_model(model, tok, tmp_path / "bundle",
                                  tables=TableSettings(max_length=64, batch_size=64),
                                  progress=False, backbone_name="tiny/lora")
    saved = (out / "doc_encoder" / "model.safetensors").read_bytes()
    assert b"lora" not in saved[:20000]  # merged: no adapter tensors in the header
    after = DocEncoder.from_bundle(load_bundle(out), device="cpu").encode(SENTENCES[:3])
    np.testing.assert_allclose(after.dense, before.dense, atol=1e-5)
    plain, _ = tiny_bert()
    plain_out = DocEncoder(plain, tok, DocSettings(max_length=64), device="cpu").encode(SENTENCES[:3])
    assert np.abs(plain_out.dense - before.dense).max() > 1e-3  # the adapter changed the model


def test_fitted_tables_approach_the_full_model_end_to_end(tmp_path: Path) -> None:
    """Decoder + byte-level BPE (the tokenizer path without the word cache): the fitted
    bundle's model-free dense queries are closer to the full model's than the unfitted."""
    model, tok = tiny_llama()
    model_dir = save_model_dir(model, tok, tmp_path / "ckpt")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": str(i), "title": "", "text": s}) + "\n"
                              for i, s in enumerate(SENTENCES)))
    kw = {"tables": TableSettings(instructions={"default": "Query: "}, batch_size=64, max_length=64),
          "progress": False}
    plain = load_bundle(build_bundle(model_dir, tmp_path / "plain", **kw))
    fitted = load_bundle(build_bundle(model_dir, tmp_path / "fit",
                                      fit=FitRecipe(corpora=(corpus,), max_queries=400), **kw))
    queries = [" ".join(s.split()[:6]) for s in SENTENCES]
    full = DocEncoder.from_bundle(fitted, device="cpu").encode(["Query: " + q for q in queries]).dense

    def cosine(bundle) -> float:  # noqa: ANN001
        dense = QueryEncoder(bundle).encode_batch(queries).dense
        return float(np.mean(np.sum(dense * full, 1) / np.linalg.norm(dense, axis=1)
                             / np.linalg.norm(full, axis=1)))

    print(f"\ncosine to the full model: unfitted {cosine(plain):.3f}, fitted {cosine(fitted):.3f}")
    assert cosine(fitted) > cosine(plain) + 0.05
    assert plain.sparse_weights_kind == "count" and fitted.sparse_weights_kind == "idf"


def test_build_runs_on_the_device_named_or_the_default_one(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The table's and the fit's forwards run where ``device`` says (default: the GPU if
    there is one, ``doc_encoder.default_device``); a device this machine lacks is refused
    before any work."""
    import lr_opensearch.model.doc_encoder as doc_encoder
    from lr_opensearch.errors import ConfigError

    model_dir, corpus = tiny_checkpoint_and_corpus(tmp_path)
    seen: list[str] = []
    table = LightRetrieverModel.token_table
    monkeypatch.setattr(LightRetrieverModel, "token_table",
                        lambda self, *a, **k: seen.append(f"table {self.device}") or table(self, *a, **k))
    encode_dense = DocEncoder.encode_dense
    monkeypatch.setattr(DocEncoder, "encode_dense",
                        lambda self, *a, **k: seen.append(f"fit {self.device}") or encode_dense(self, *a, **k))
    monkeypatch.setattr(doc_encoder, "default_device",
                        lambda: seen.append("default asked") or torch.device("cpu"))
    kw = {"tables": TableSettings(batch_size=64, max_length=64), "progress": False}
    monkeypatch.setenv("LR_TABLE_CACHE", str(tmp_path / "tables1"))
    # the fit on torch (--runtime torch; on a CPU the default is ONNX Runtime: test_onnx_runtime)
    build_bundle(model_dir, tmp_path / "b1", fit=FitRecipe(corpora=(corpus,), max_queries=100,
                                                           runtime="torch"), **kw)
    assert seen[0] == "default asked" and set(seen[1:]) == {"table cpu", "fit cpu"}
    seen.clear()
    monkeypatch.setenv("LR_TABLE_CACHE", str(tmp_path / "tables2"))  # not the cached table
    build_bundle(model_dir, tmp_path / "b2", backbone=BackboneSettings(device="cpu"),
                 fit=FitRecipe(runtime="torch"), **kw)
    assert seen == ["table cpu"]  # named: the default is not asked
    monkeypatch.setenv("LR_TABLE_CACHE", str(tmp_path / "tables3"))
    build_bundle(model_dir, tmp_path / "b2-onnx", backbone=BackboneSettings(device="cpu"), **kw)
    assert seen == ["table cpu"]  # --runtime auto on the CPU: the table on ONNX Runtime
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    with pytest.raises(ConfigError, match=r"--device cuda:\d+"):
        build_bundle(model_dir, tmp_path / "b3", backbone=BackboneSettings(device=f"cuda:{count}"),
                     **kw)
    assert not (tmp_path / "b3").exists() and seen == ["table cpu"]
