"""The document encoder on ONNX Runtime (issue 47): the same vectors as torch's, its graph
checked before use, the runtime chosen as ``--runtime`` says, no torch on its import path."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from ingest_support import build_tiny_bundle
from model_fixtures import one_thread, save_model_dir, tiny_bert  # noqa: F401
from tiny_artifacts import SENTENCES, tiny_bundle

from lr_opensearch.bundle import load_bundle
from lr_opensearch.errors import ConfigError
from lr_opensearch.model import DocEncoder
from lr_opensearch.model.fused import projection_max, sparse_activation
from lr_opensearch.model.numpy_head import NumpyHead
from lr_opensearch.model.onnx_encoder import OnnxDocEncoder
from lr_opensearch.model.onnx_graph import GRAPH_FILE, MANIFEST, graph_dir
from lr_opensearch.model.runtime import choose_runtime, open_doc_encoder
from lr_opensearch.model.sparse_fits import LOWRANK_FILE, TERM_AFFINE_FILE
from lr_opensearch.model.sparse_lowrank import LowRankCorrection
from lr_opensearch.model.term_affine import TermAffine

pytestmark = pytest.mark.usefixtures("one_thread")
DOCS = [*SENTENCES, "a", "the the the the", SENTENCES[0] * 6]


def assert_same_documents(torch_encoder: DocEncoder, onnx_encoder: OnnxDocEncoder,
                          texts: list[str], *, weight_tol: float = 1e-4) -> tuple[float, int]:
    """Issue 47's criteria: dense cosine >= 0.99999, the same kept terms, weights within
    ``weight_tol``. Returns (max cosine gap, terms compared)."""
    a, b = torch_encoder.encode(texts), onnx_encoder.encode(texts)
    cos = (a.dense * b.dense).sum(1) / np.linalg.norm(a.dense, axis=1) / np.linalg.norm(b.dense, axis=1)
    assert cos.min() >= 0.99999, cos.min()
    assert a.truncated == b.truncated
    terms = 0
    for i, (x, y) in enumerate(zip(a.sparse, b.sparse, strict=True)):
        assert set(x) == set(y), (i, sorted(set(x) ^ set(y)))
        assert all(abs(x[t] - y[t]) <= weight_tol for t in x), i
        terms += len(x)
    return float(1 - cos.min()), terms


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tied_bundle(root: Path, fits: str = "") -> Path:
    """A bare BertModel (tied sparse head), CLS pooling, normalised, served prefix 16 of
    32, a document prompt: every branch of the numpy head the MLM bundle does not take.
    ``fits`` ("affine", "lowrank" or both): a fitted sparse head beside its weights, random
    and large enough to change every document's kept terms (issue 48)."""
    model, tok = tiny_bert(seed=3, architecture="BertModel", pooling="cls", normalize=True)
    model_dir = save_model_dir(model, tok, root / "tied_model")
    g, fields = torch.Generator().manual_seed(5), {}
    if "affine" in fits:
        TermAffine(torch.rand(model.vocab_size, generator=g) * 2 + 0.1,
                   torch.randn(model.vocab_size, generator=g)).save(model_dir / TERM_AFFINE_FILE)
        fields["sparse_term_affine"] = True
    if "lowrank" in fits:
        LowRankCorrection(torch.randn(model.vocab_size, 3, generator=g),
                          torch.randn(32, 3, generator=g)).save(model_dir / LOWRANK_FILE)
        fields["sparse_lowrank"] = 3
    return tiny_bundle(root / "tied_bundle", tok, seed=3, doc_encoder_dir=model_dir, dense_dim=32,
                       served_dim=16, architecture="BertModel", sparse_head="tied", pooling="cls",
                       normalize=True, max_length=40, sparse_top_k=12, sparse_min_weight=0.05,
                       document_prompt="passage: ", **fields)


FITTED = {f"tied-{fits}": functools.partial(tied_bundle, fits=fits)
          for fits in ("affine", "lowrank", "affine+lowrank")}


@pytest.mark.parametrize("screen", [False, True], ids=["numpy", "screened"])
@pytest.mark.parametrize("make", [build_tiny_bundle, tied_bundle, *FITTED.values()],
                         ids=["mlm-mean", "tied-cls", *FITTED])
def test_onnx_runtime_encodes_as_torch(tmp_path: Path, cache: Path, make, screen: bool) -> None:  # noqa: ANN001
    """The same documents on both runtimes, a bundle's fitted sparse head included (issue
    48): ``--runtime auto`` picks ONNX Runtime for it on a CPU."""
    bundle = load_bundle(make(tmp_path))
    onnx = OnnxDocEncoder.from_bundle(bundle, batch_size=4, screen=screen)
    assert onnx.graph.source.startswith("export torch")
    assert isinstance(open_doc_encoder(bundle, device="cpu"), OnnxDocEncoder)
    torch_encoder = DocEncoder.from_bundle(bundle, device="cpu", batch_size=4)
    gap, terms = assert_same_documents(torch_encoder, onnx, DOCS)
    assert terms > len(DOCS)  # terms were compared, not empty dicts
    np.testing.assert_allclose(onnx.encode_dense(SENTENCES), torch_encoder.encode_dense(SENTENCES),
                               atol=1e-5)
    # the graph is cached: a second encoder reuses it, no second export
    again = OnnxDocEncoder.from_bundle(bundle, screen=False)
    assert again.graph.path == onnx.graph.path and len(list((cache / "onnx").iterdir())) == 1


def test_a_fitted_heads_files_are_not_the_graphs(tmp_path: Path) -> None:
    """The fitted sparse head's files sit beside the backbone's weights but are not part of
    them: the graph's key (and a packaged jar's match) is the unfitted checkpoint's, so a
    fitted bundle of the packaged MiniLM encodes with the jar's graph, no torch export."""
    from lr_opensearch.model.checkpoint import weight_files
    from lr_opensearch.model.onnx_graph import graph_key

    fitted = load_bundle(tied_bundle(tmp_path / "fitted", "affine+lowrank")).doc_encoder_dir
    plain = load_bundle(tied_bundle(tmp_path / "plain")).doc_encoder_dir
    assert {LOWRANK_FILE, TERM_AFFINE_FILE} <= {p.name for p in fitted.iterdir()}
    assert [p.name for p in weight_files(fitted)] == [p.name for p in weight_files(plain)]
    assert graph_key(fitted, "tied") == graph_key(plain, "tied")


def test_numpy_head_equals_the_torch_head() -> None:
    """The sparse head (projection, max, ReLU, log1p, top-k) in numpy against torch's
    ``projection_max`` + ``sparse_activation`` + ``DocEncoder.select_terms``, on rows with
    padding, a prefix, a suffix and one row without content."""
    rng = np.random.default_rng(0)
    hidden = rng.normal(size=(3, 7, 8)).astype(np.float32)
    weight = rng.normal(size=(50, 8)).astype(np.float32)
    bias = rng.normal(size=50).astype(np.float32)
    mask = np.array([[1] * 7, [1] * 4 + [0] * 3, [1, 1, 0, 0, 0, 0, 0]])
    head = NumpyHead(weight=weight, bias=bias, pooling="mean", normalize=False, served_dim=8,
                     suffix=1, excluded=np.array([0, 3]), vocab_limit=45, top_k=6, min_weight=0.1)
    ours = head.sparse(hidden, mask, prefix=1)
    content = head.content(mask, prefix=1)
    assert content.sum(1).tolist() == [5, 2, 0]
    theirs = sparse_activation(projection_max(torch.from_numpy(hidden), torch.from_numpy(content),
                                              torch.from_numpy(weight), torch.from_numpy(bias)))
    np.testing.assert_allclose(ours, theirs.numpy(), atol=1e-6)
    assert not ours[2].any()  # no content: no weight
    kept = head.select_terms(ours)
    w = theirs[:, :45].clone()
    w[:, [0, 3]] = 0
    values, indices = torch.topk(w, 6, dim=1)
    expected = [{int(t): float(v) for t, v in zip(i, x, strict=True) if v > 0.1}
                for i, x in zip(indices, values, strict=True)]
    assert [set(k) for k in kept] == [set(e) for e in expected] and kept[0]
    assert all(abs(k[t] - e[t]) < 1e-6 for k, e in zip(kept, expected, strict=True) for t in e)


def test_the_screened_projection_keeps_the_same_terms() -> None:
    """``screened_head`` (torch's bfloat16 screen) keeps the terms and float32 weights of
    numpy's projection, on a vocabulary wide enough for the screen to leave most out."""
    from lr_opensearch.model.screened_head import screened_sparse

    rng = np.random.default_rng(1)
    hidden = rng.normal(size=(4, 20, 32)).astype(np.float32)
    weight = rng.normal(size=(3000, 32)).astype(np.float32)
    mask = np.ones((4, 20), dtype=np.int64)
    mask[2, 9:] = 0
    head = NumpyHead(weight=weight, bias=None, pooling="cls", normalize=False, served_dim=32,
                     suffix=1, excluded=np.array([5]), vocab_limit=3000, top_k=16)
    plain = head.select_terms(head.sparse(hidden, mask, prefix=1))
    screened = head.select_terms(screened_sparse(head, hidden, mask, prefix=1))
    assert [set(a) for a in plain] == [set(b) for b in screened] and all(len(a) == 16 for a in plain)
    assert max(abs(a[t] - b[t]) for a, b in zip(plain, screened, strict=True) for t in a) < 1e-5


def test_a_tampered_or_foreign_graph_is_refused_before_encoding(tmp_path: Path, cache: Path) -> None:
    bundle = load_bundle(build_tiny_bundle(tmp_path))
    path = OnnxDocEncoder.from_bundle(bundle).graph.path
    meta = json.loads((path / MANIFEST).read_text())
    (path / MANIFEST).write_text(json.dumps({**meta, "vocab_size": meta["vocab_size"] + 1}))
    with pytest.raises(ConfigError, match=r"vocabulary .* delete"):
        OnnxDocEncoder.from_bundle(bundle)
    (path / MANIFEST).write_text(json.dumps({**meta, "hidden_size": 16}))
    with pytest.raises(ConfigError, match="hidden size 16"):
        OnnxDocEncoder.from_bundle(bundle)
    (path / MANIFEST).write_text(json.dumps(meta))
    with open(path / GRAPH_FILE, "ab") as f:
        f.write(b"\0")
    with pytest.raises(ConfigError, match=f"{GRAPH_FILE}: sha256 .* but graph.json says"):
        OnnxDocEncoder.from_bundle(bundle)
    (path / GRAPH_FILE).unlink()
    with pytest.raises(ConfigError, match=f"{GRAPH_FILE} is missing"):
        OnnxDocEncoder.from_bundle(bundle)


def test_a_graph_of_another_hidden_size_is_refused(tmp_path: Path, cache: Path) -> None:
    """A graph whose output is not the encoder's width (another model's graph, its sha256
    recorded): the probe run at load refuses it, naming the graph, before any document."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from lr_opensearch.node.lock import sha256_file as file_sha256

    bundle = load_bundle(build_tiny_bundle(tmp_path))
    path = OnnxDocEncoder.from_bundle(bundle).graph.path
    table = numpy_helper.from_array(np.zeros((bundle.vocab_size, 16), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["hidden"])], "other",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "t"])
         for n in ("input_ids", "attention_mask")],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["b", "t", 16])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path / GRAPH_FILE))
    meta = json.loads((path / MANIFEST).read_text())
    meta["onnx_sha256"] = file_sha256(path / GRAPH_FILE)
    (path / MANIFEST).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=r"output shape \[1, 2, 16\].*hidden size 32"):
        OnnxDocEncoder.from_bundle(bundle)


def test_no_graph_without_torch_or_a_jar_is_one_line(tmp_path: Path, cache: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import lr_opensearch.model.onnx_graph as onnx_graph

    bundle = load_bundle(build_tiny_bundle(tmp_path))
    monkeypatch.setattr(onnx_graph, "installed", lambda name: name != "torch")
    with pytest.raises(ConfigError, match=r"no ONNX graph for the encoder .* torch, which exports") as err:
        OnnxDocEncoder.from_bundle(bundle)
    assert f"`lr bundle onnx {bundle.path}`" in str(err.value)  # what the project image needs
    assert not graph_dir(bundle.doc_encoder_dir, "mlm").exists()


def test_the_runtime_choice() -> None:
    cpu = {"kind": "encoder", "sparse_mode": "max", "device": "cpu", "precision": "fp32"}
    assert choose_runtime("auto", **cpu) == "onnx"
    assert choose_runtime("torch", **cpu) == "torch"
    assert choose_runtime("auto", **{**cpu, "precision": "bf16"}) == "torch"
    assert choose_runtime("auto", **{**cpu, "kind": "decoder"}) == "torch"
    assert choose_runtime("auto", **{**cpu, "sparse_mode": "medusa_last"}) == "torch"
    assert choose_runtime("auto", **{**cpu, "device": "cuda"}) == "torch"
    with pytest.raises(ConfigError, match="--runtime onnx: not with a decoder backbone"):
        choose_runtime("onnx", **{**cpu, "kind": "decoder"})
    with pytest.raises(ConfigError, match="--runtime onnx: not with --device cuda"):
        choose_runtime("onnx", **{**cpu, "device": "cuda"})
    with pytest.raises(ConfigError, match="valid"):
        choose_runtime("tensorrt", **cpu)


def test_without_torch_a_build_and_a_torch_encoder_say_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``lr bundle build`` cannot do without torch (a decoder LLM backbone, ``--runtime
    torch``) says so in one line naming it and the extra, before any work."""
    from model_fixtures import tiny_llama

    import lr_opensearch.model.runtime as runtime
    from lr_opensearch.fit.build import build_bundle
    from lr_opensearch.fit.tables import FitRecipe

    llama = save_model_dir(*tiny_llama(), tmp_path / "llama")
    bert = save_model_dir(*tiny_bert(), tmp_path / "bert")
    monkeypatch.setattr(runtime, "installed", lambda name: name != "torch")
    with pytest.raises(ConfigError, match=r"lr bundle build with a decoder backbone .*needs torch"
                                          r".*lr-opensearch\[train\]"):
        build_bundle(llama, tmp_path / "out")
    with pytest.raises(ConfigError, match=r"lr bundle build with --runtime torch needs torch.*\[train\]"):
        build_bundle(bert, tmp_path / "out", fit=FitRecipe(runtime="torch"))
    # a checkpoint of one's own with no graph yet: the one-time export needs torch
    import lr_opensearch.model.onnx_graph as onnx_graph

    monkeypatch.setattr(onnx_graph, "installed", lambda name: name != "torch")
    monkeypatch.setenv("LR_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ConfigError, match=r"no ONNX graph for the encoder .*lr-opensearch\[train\]"):
        build_bundle(bert, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(ConfigError, match=r"--device cuda.*needs torch.*\[train\]"):
        choose_runtime("auto", kind="encoder", sparse_mode="max", device="cuda", precision="fp32")


def test_open_doc_encoder_defaults_to_onnx_on_a_cpu(tmp_path: Path, cache: Path) -> None:
    bundle = load_bundle(build_tiny_bundle(tmp_path))
    assert isinstance(open_doc_encoder(bundle, device="cpu"), OnnxDocEncoder)
    assert isinstance(open_doc_encoder(bundle, device="cpu", runtime="torch"), DocEncoder)


def test_the_onnx_path_imports_no_torch(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    bundle = build_tiny_bundle(tmp_path)
    # the graph is made once (with torch) in this process; encoding then needs none
    import os

    os.environ["LR_CACHE_DIR"] = str(cache)
    try:
        OnnxDocEncoder.from_bundle(load_bundle(bundle))
    finally:
        del os.environ["LR_CACHE_DIR"]
    code = ("import importlib.abc, json, sys\n"
            "class NoTorch(importlib.abc.MetaPathFinder):  # a machine without torch\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('torch', 'transformers'):\n"
            "            raise ModuleNotFoundError(name)\n"
            "sys.meta_path.insert(0, NoTorch())\n"
            "from lr_opensearch.bundle import load_bundle\n"
            "from lr_opensearch.model import open_doc_encoder\n"
            f"e = open_doc_encoder(load_bundle({str(bundle)!r}), device='cpu')\n"
            "b = e.encode(['a sentence to encode'])\n"
            "assert type(e).__name__ == 'OnnxDocEncoder' and b.sparse[0]\n"
            "print(json.dumps([m for m in ('torch', 'transformers') if m in sys.modules]))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "LR_CACHE_DIR": str(cache)})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def _rankings(bundle_path: Path, encoder: object, docs: list[str], queries: list[str]
              ) -> tuple[list[list[int]], list[list[int]]]:
    """Per query, the documents by the LR dense leg (the bundle's table) and by the LR sparse
    leg (the bundle's query weights x the stored document weights): what the index ranks."""
    from lr_opensearch.indexing.documents import SparseKeys, sparse_features
    from lr_opensearch.query import QueryEncoder

    bundle = load_bundle(bundle_path)
    encoded = encoder.encode(docs)  # type: ignore[attr-defined]
    keys = SparseKeys(bundle.tokenizer)
    stored = [sparse_features(d, keys) for d in encoded.sparse]
    dense, sparse = [], []
    batch = QueryEncoder(bundle).encode_batch(queries)
    for qd, qs in zip(batch.dense, batch.sparse, strict=True):
        dense.append(np.argsort(-(encoded.dense @ qd), kind="stable")[:5].tolist())
        scores = np.array([sum(w * doc.get(k, 0.0) for k, w in qs.items()) for doc in stored])
        sparse.append(np.argsort(-scores, kind="stable")[:5].tolist())
    return dense, sparse


def test_a_bundle_built_on_onnx_searches_torch_encoded_documents_alike(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 47 item 4: the bundle and the index do not depend on the runtime. A bundle
    whose fit ran on ONNX Runtime (the default on a CPU) against documents encoded on torch
    ranks as a bundle fitted on torch against documents encoded on ONNX Runtime."""
    from model_fixtures import tiny_checkpoint_and_corpus

    from lr_opensearch.fit.build import BackboneSettings, TableSettings, build_bundle
    from lr_opensearch.fit.tables import FitRecipe

    model_dir, corpus = tiny_checkpoint_and_corpus(tmp_path)
    monkeypatch.setenv("LR_TABLE_CACHE", str(tmp_path / "tables"))
    kw = {"tables": TableSettings(batch_size=64, max_length=64), "progress": False,
          "backbone": BackboneSettings(device="cpu")}
    made: list[str] = []
    init = OnnxDocEncoder.__init__
    monkeypatch.setattr(OnnxDocEncoder, "__init__",
                        lambda self, *a, **k: made.append("onnx") or init(self, *a, **k))
    on_onnx = build_bundle(model_dir, tmp_path / "onnx", fit=FitRecipe(corpora=(corpus,),
                           max_queries=100), **kw)
    assert made == ["onnx"]  # the fit's encoder: ONNX Runtime by default on a CPU
    on_torch = build_bundle(model_dir, tmp_path / "torch", fit=FitRecipe(
        corpora=(corpus,), max_queries=100, runtime="torch"), **kw)
    assert made == ["onnx"]
    a, b = load_bundle(on_onnx), load_bundle(on_torch)
    # the fit's targets differ by float rounding (1e-6); the ridge fit and the float16 table
    # carry it to a few float16 steps (measured 0.002)
    np.testing.assert_allclose(a.table().astype(np.float32), b.table().astype(np.float32), atol=5e-3)
    queries = [s.split(",")[0] for s in SENTENCES] + ["the capital", "a small model"]
    by_onnx_bundle = _rankings(on_onnx, DocEncoder.from_bundle(a, device="cpu"), DOCS, queries)
    by_torch_bundle = _rankings(on_torch, OnnxDocEncoder.from_bundle(b), DOCS, queries)
    assert by_onnx_bundle == by_torch_bundle


def test_the_ingest_install_pulls_no_torch() -> None:
    """Issue 47 item 2: ``pip install lr-opensearch`` and ``.[ingest]`` declare no torch (nor
    what only torch needs); ``.[ingest]`` brings ONNX Runtime; ``.[build]`` adds scipy (the
    table's fit) and no torch; ``.[train]`` brings torch."""
    import re

    import tomllib  # Python 3.11+, as tests/apps/test_bench_imports.py

    project = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]

    def names(deps: list[str]) -> set[str]:
        return {re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0].lower() for d in deps}

    torch_side = {"torch", "transformers", "peft", "accelerate", "triton"}
    assert not names(project["dependencies"] + extras["ingest"]) & torch_side
    assert {"onnxruntime", "onnx"} <= names(extras["ingest"])
    assert {"torch", "transformers"} <= names(extras["train"])
    # lr bundle build without torch (issue 47): the ingest extra and scipy, the fit's solver
    build = names(extras["build"])
    assert build == {"lr-opensearch", "scipy"} and "lr-opensearch[ingest]" in extras["build"]
    assert "scipy" not in names(project["dependencies"] + extras["ingest"])
