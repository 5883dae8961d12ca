"""UR²N model half (issue 18): the XTR layer on T5 and on a causal LM, the XTR loss, the
training entry, the UR²N bundle and the reranker. Tiny random models only."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from model_fixtures import one_thread  # noqa: F401 (fixture)
from tiny_artifacts import bpe_tokenizer, wordpiece_tokenizer
from trainer_support import tiny_llama_dir, write_tiny_records
from transformers import LlamaConfig, LlamaForCausalLM, T5Config, T5ForConditionalGeneration

from lr_opensearch.errors import BundleError, ConfigError
from lr_opensearch.model.framing import plain_tokenizer
from lr_opensearch.ur2n.bundle import MANIFEST_FILE, UR2NConfig, load_ur2n_bundle
from lr_opensearch.ur2n.model import UR2NModel, UR2NReranker
from lr_opensearch.ur2n.text import frame_template
from trainer.losses import build_loss
from trainer.losses.xtr import xtr_alignment_scores
from trainer.ur2n import UR2NTrainer, load_ur2n_config

TINY_UR2N = Path(__file__).resolve().parents[2] / "trainer" / "configs" / "ur2n-tiny.yaml"
DOCS = ["paris is the capital of france", "wing lift drag boundary layer", "doctors treat patients"]


def tiny_t5(seed: int = 0) -> UR2NModel:
    tok = wordpiece_tokenizer(150)
    torch.manual_seed(seed)
    config = T5Config(vocab_size=tok.get_vocab_size(), d_model=32, d_kv=8, d_ff=64, num_layers=2,
                      num_decoder_layers=2, num_heads=4, decoder_start_token_id=0, pad_token_id=0,
                      eos_token_id=tok.token_to_id("[SEP]"), initializer_factor=1.0)
    return UR2NModel.from_hf(T5ForConditionalGeneration(config), tok, token_dim=8, seed=seed)


def tiny_decoder(seed: int = 0) -> UR2NModel:
    tok = bpe_tokenizer(300)
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=True,
                         bos_token_id=tok.token_to_id("<|begin_of_text|>"),
                         eos_token_id=tok.token_to_id("<|end_of_text|>"))
    return UR2NModel.from_hf(LlamaForCausalLM(config), tok, token_dim=8, seed=seed)


BUILDERS = {"t5": tiny_t5, "decoder": tiny_decoder}


# ----------------------------------------------------------------------------- the XTR loss


def _hand_example() -> tuple[torch.Tensor, ...]:
    """Two queries, two documents, D = 2; padding rows hold large values that must not count."""
    q = torch.tensor([[[1.0, 0.0], [0.0, 1.0]],       # q0: a, b
                      [[0.6, 0.8], [5.0, 5.0]]])      # q1: c, padding
    d = torch.tensor([[[1.0, 0.0], [0.6, 0.8], [9.0, 9.0]],   # d0 (third row is padding)
                      [[0.0, 1.0], [0.28, 0.96], [0.0, 0.0]]])
    qm = torch.tensor([[True, True], [True, False]])
    dm = torch.tensor([[True, True, False], [True, True, True]])
    return q, d, qm, dm


def test_xtr_scores_match_hand_computed_alignment() -> None:
    q, d, qm, dm = _hand_example()
    # k=3: a retrieves d0t0 (1), d0t1 (.6), d1t1 (.28); b: d1t0 (1), d1t1 (.96), d0t1 (.8);
    # c: d0t1 (1), d1t1 (.936), d1t0 (.8). f(q0,d0)=(1+.8)/2, f(q0,d1)=(.28+1)/2, f(q1,.)=max.
    got = xtr_alignment_scores(q, d, qm, dm, top_k=3)
    assert torch.allclose(got, torch.tensor([[0.9, 0.64], [1.0, 0.936]]), atol=1e-6)
    # k=1: c retrieves only d0t1, so d1 has Z = 0 and scores 0; a -> d0t0, b -> d1t0.
    got = xtr_alignment_scores(q, d, qm, dm, top_k=1)
    assert torch.allclose(got, torch.tensor([[1.0, 1.0], [1.0, 0.0]]), atol=1e-6)


def test_xtr_loss_is_cross_entropy_over_alignment_scores() -> None:
    q, d, qm, dm = _hand_example()
    loss = build_loss("xtr", temperature=0.1, top_k=3)
    out = loss(q, d, query_mask=qm, doc_mask=dm)
    expected = (math.log(1 + math.exp(-2.6)) + math.log(1 + math.exp(0.64))) / 2
    assert out.loss.item() == pytest.approx(expected, abs=1e-5)
    assert out.logs["accuracy"] == 0.5  # q0 ranks d0 first; q1 prefers d0 over its positive d1
    with pytest.raises(ConfigError, match="top_k"):
        build_loss("xtr", top_k=0)


# ----------------------------------------------------------------------------- the model


@pytest.mark.parametrize("kind", ["t5", "decoder"])
def test_untrained_xtr_layer_is_a_clone_of_the_last_layer(kind: str, one_thread: None) -> None:  # noqa: F811
    model = BUILDERS[kind]()
    batch = model.batch(model.frame(DOCS, kind="document"))
    inputs = model.layer_inputs(batch)
    out = model.head.layer(*inputs.args, **inputs.kwargs)
    clone = model.head.norm(out[0] if isinstance(out, tuple) else out)
    hf = model.hf
    stack = hf.encoder if kind == "t5" else hf.base_model
    with torch.no_grad():
        real = stack(input_ids=batch.ids, attention_mask=batch.attention_mask).last_hidden_state
    mask = batch.attention_mask.bool()
    assert torch.allclose(clone[mask], real[mask], atol=1e-5)


@pytest.mark.parametrize("kind", ["t5", "decoder"])
def test_token_embeddings_are_normalised_rows_of_the_text_tokens_only(kind: str, one_thread: None) -> None:  # noqa: F811
    model = BUILDERS[kind]()
    framed = model.frame(DOCS, kind="document")
    embs = model.token_embeddings(DOCS, kind="document", batch_size=2)
    assert [e.shape for e in embs] == [(sum(f.in_slot), 8) for f in framed]
    assert all(e.dtype == np.float32 and np.allclose(np.linalg.norm(e, axis=1), 1, atol=1e-5) for e in embs)
    # the text's tokens as read after "Document: " (byte-level BPE keeps the space in " paris")
    plain = plain_tokenizer(model.tokenizer).encode(" " + DOCS[0], add_special_tokens=False).ids
    kept = [i for i, s in zip(framed[0].ids, framed[0].in_slot, strict=True) if s]
    assert kept == plain  # "Document:" and the special tokens are dropped
    alone = model.token_embeddings(DOCS[:1], kind="document")[0]
    assert np.allclose(alone, embs[0], atol=1e-5)  # padding in a batch changes nothing
    with pytest.raises(ConfigError, match="valid: query, document"):
        model.token_embeddings(DOCS, kind="passage")


def _reference_rerank(model: UR2NModel, query: str, texts: list[str]) -> list[float]:
    """log P(true) over {true, false}, one unpadded sequence at a time, straight from HF."""
    c, out = model.config, []
    for text in texts:
        framed = frame_template(model.tokenizer, c.rerank_template, {"query": query, "document": text},
                                "document", c.max_length, suffix=c.kind == "t5")
        ids = torch.tensor([framed.ids])
        with torch.no_grad():
            if c.kind == "t5":
                start = torch.tensor([[model.hf.config.decoder_start_token_id]])
                logits = model.hf(input_ids=ids, decoder_input_ids=start).logits[0, 0]
            else:
                logits = model.hf(input_ids=ids).logits[0, -1]
        pair = logits[[c.false_token_id, c.true_token_id]]
        out.append(float(torch.log_softmax(pair, dim=-1)[1]))
    return out


@pytest.mark.parametrize("kind", ["t5", "decoder"])
def test_training_the_xtr_layer_leaves_the_reranker_unchanged(kind: str, tmp_path: Path,
                                                              one_thread: None) -> None:  # noqa: F811
    model = BUILDERS[kind]()
    query = "capital of france"
    before = model.rerank_scores(query, DOCS)
    assert before == pytest.approx(_reference_rerank(model, query, DOCS), abs=1e-5)
    backbone = {k: v.clone() for k, v in model.hf.state_dict().items()}
    head = {k: v.clone() for k, v in model.head.state_dict().items()}
    records = write_tiny_records(tmp_path / "r.jsonl")
    config = load_ur2n_config(TINY_UR2N, [f"model.path={tmp_path}", f"data.sources=[{{name: t, path: {records}}}]",
                                          f"run.output_dir={tmp_path / 'run'}"])
    UR2NTrainer(config, model=model).run()
    assert model.rerank_scores(query, DOCS) == before  # bit for bit
    assert all(torch.equal(v, backbone[k]) for k, v in model.hf.state_dict().items())
    assert any(not torch.equal(v, head[k]) for k, v in model.head.state_dict().items())
    assert any(not torch.equal(v, head[k]) for k, v in model.head.state_dict().items() if k.startswith("layer."))


@pytest.mark.parametrize("kind", ["t5", "decoder"])
def test_export_load_gives_the_same_embeddings_and_scores(kind: str, tmp_path: Path,
                                                          one_thread: None) -> None:  # noqa: F811
    model = BUILDERS[kind]()
    with torch.no_grad():  # a head that differs from the backbone's last layer
        for p in model.head.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    path = model.save(tmp_path / "b", training={"note": "test"})
    bundle = load_ur2n_bundle(path)
    assert bundle.config == model.config and bundle.config.kind == kind
    assert bundle.training == {"note": "test"}
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["format"] == "ur2n-bundle" and manifest["format_version"] == 1
    assert "xtr_head.safetensors" in manifest["files"] and "backbone/config.json" in manifest["files"]
    loaded = UR2NModel.from_bundle(bundle)
    for a, b in zip(model.token_embeddings(DOCS, kind="query"), loaded.token_embeddings(DOCS, kind="query"),
                    strict=True):
        np.testing.assert_allclose(a, b, atol=1e-6)
    reranker = UR2NReranker(path)
    assert reranker.name == "ur2n"
    assert reranker.score("capital of france", DOCS) == pytest.approx(
        model.rerank_scores("capital of france", DOCS), abs=1e-6)
    c = model.config  # room for two document tokens: every document gets cut
    limit = 2 + len(frame_template(model.tokenizer, c.rerank_template, {"query": "capital of france", "document": ""},
                                   "document", c.max_length, suffix=kind == "t5").ids)
    short = UR2NReranker(loaded, max_length=limit).score("capital of france", DOCS)
    assert short == pytest.approx(model.rerank_scores("capital of france", DOCS, max_length=limit), abs=1e-6)
    assert short != pytest.approx(reranker.score("capital of france", DOCS), abs=1e-6)  # cut documents


def test_rerank_document_is_cut_to_fit_and_the_prompt_end_kept() -> None:
    tok = bpe_tokenizer(300)
    long_doc = " ".join(["paris"] * 200)
    framed = frame_template(tok, "Query: {query} Document: {document} Relevant:",
                            {"query": "capital", "document": long_doc}, "document", 40, suffix=False)
    assert len(framed.ids) == 40
    tail = tok.encode(" Relevant:", add_special_tokens=False).ids
    assert framed.ids[-len(tail):] == tail


# ----------------------------------------------------------------------------- bundle and config


def test_bundle_refuses_modified_files_and_foreign_manifests(tmp_path: Path, one_thread: None) -> None:  # noqa: F811
    path = tiny_decoder().save(tmp_path / "b")
    head = path / "xtr_head.safetensors"
    data = bytearray(head.read_bytes())
    data[-1] ^= 0xFF
    head.write_bytes(bytes(data))
    with pytest.raises(BundleError, match="checksum mismatch for xtr_head.safetensors"):
        load_ur2n_bundle(path)
    (path / MANIFEST_FILE).write_text(json.dumps({"format": "lightretriever-bundle"}))
    with pytest.raises(BundleError, match="not a UR²N bundle"):
        load_ur2n_bundle(path)
    with pytest.raises(BundleError, match="must hold exactly the slots"):
        UR2NConfig("x", "T5", "t5", 8, 4, 1, 2, query_template="Q: {query}")


def test_bundle_module_needs_no_torch() -> None:
    code = ("import sys, lr_opensearch.ur2n.bundle\n"
            "print([m for m in ('torch', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_config_rejects_unknown_keys_and_lists_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown setting\(s\) \['topk'\].*top_k"):
        load_ur2n_config(TINY_UR2N, ["loss.topk=3", "model.path=x", "data.sources=[{name: a, path: b}]"])
    with pytest.raises(ConfigError, match="data.sources is empty"):
        load_ur2n_config(TINY_UR2N, ["model.path=x"])


def test_training_entry_writes_metrics_and_a_loadable_bundle(tmp_path: Path, one_thread: None) -> None:  # noqa: F811
    from trainer.ur2n import main

    model_dir = tiny_llama_dir(tmp_path)
    records = write_tiny_records(tmp_path / "r.jsonl")
    rc = main(["--config", str(TINY_UR2N), "--set", f"model.path={model_dir}",
               "--set", f"data.sources=[{{name: t, path: {records}}}]",
               "--set", f"run.output_dir={tmp_path / 'run'}", "--set", f"export.out={tmp_path / 'b'}"])
    assert rc == 0
    lines = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3] and all(math.isfinite(r["loss"]) for r in lines)
    bundle = load_ur2n_bundle(tmp_path / "b")
    assert bundle.config.token_dim == 8 and bundle.training["steps"] == 3
    assert len(bundle.training["loss_curve"]) == 3
