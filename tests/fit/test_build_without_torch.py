"""``lr bundle build`` with no torch (issue 47): the table, the fit and the doc encoder on
ONNX Runtime, numpy and safetensors give the bundle torch's build gives; the search results
do not depend on which runtime built the bundle or encoded the documents."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ingest_support import data_dir, ingest_config, read_corpus, write_jsonl
from model_fixtures import one_thread, save_model_dir, tiny_bert  # noqa: F401
from safetensors.numpy import load_file
from tiny_artifacts import SENTENCES

from lr_opensearch.bundle import load_bundle
from lr_opensearch.fit.build import BackboneSettings, TableSettings, build_bundle
from lr_opensearch.fit.tables import FitRecipe
from lr_opensearch.model import DocEncoder
from lr_opensearch.model.onnx_graph import ensure_graph

REPO = Path(__file__).resolve().parents[2]
BLOCKED = ("torch", "transformers")
NO_TORCH = f"""\
import atexit, importlib.abc, json, os, sys
class NoTorch(importlib.abc.MetaPathFinder):  # a machine without torch (pip install .[build])
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f'No module named {{name!r}} (blocked by the test)')
sys.meta_path.insert(0, NoTorch())
atexit.register(lambda: open(os.environ['LR_TEST_IMPORTED'], 'w').write(json.dumps(
    sorted(m for m in sys.modules if m.split('.')[0] in {BLOCKED!r}))))
"""


def build_without_torch(tmp_path: Path, args: list[str], env: dict[str, str],
                        timeout: float = 600) -> str:
    """``lr bundle build ARGS`` in a fresh interpreter where ``import torch`` fails (a
    sitecustomize on PYTHONPATH); returns its output. Fails unless it built the bundle
    without ever holding torch or transformers."""
    return lr_without_torch(tmp_path, ["bundle", "build", *args], env, timeout)


def lr_without_torch(tmp_path: Path, argv: list[str], env: dict[str, str],
                     timeout: float = 600) -> str:
    """``lr ARGV`` where ``import torch`` fails (see ``build_without_torch``); its output.
    Fails unless it succeeded without ever holding torch or transformers."""
    shim = tmp_path / "no_torch"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(NO_TORCH)
    imported = tmp_path / "imported.json"
    proc = subprocess.run(
        [sys.executable, "-m", "lr_opensearch.cli", *argv],
        capture_output=True, text=True, timeout=timeout, cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": f"{shim}{os.pathsep}{REPO}",
             "LR_TEST_IMPORTED": str(imported)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(imported.read_text()) == []
    return proc.stdout


def tiny_checkpoint(root: Path, architecture: str) -> tuple[Path, Path]:
    """A user's own tiny BERT checkpoint and a corpus of the test sentences to fit it on."""
    model_dir = save_model_dir(*tiny_bert(architecture=architecture), root / "ckpt")
    corpus = write_jsonl(root / "corpus.jsonl", [{"_id": str(i), "title": "", "text": s}
                                                  for i, s in enumerate(SENTENCES * 3)])
    return model_dir, corpus


def only_table(cache: Path) -> np.ndarray:
    files = sorted(cache.glob("*.safetensors"))
    assert len(files) == 1, files
    return load_file(str(files[0]))["table"]


def assert_same_bundle(onnx_dir: Path, torch_dir: Path, *, table_atol: float) -> None:
    """The same artifact: the manifest's fields, the doc encoder's files byte for byte,
    the query weights, the tables within ``table_atol``; the torch path loads both alike."""
    a, b = (json.loads((d / "lightretriever.json").read_text()) for d in (onnx_dir, torch_dir))
    assert set(a) == set(b)
    for key in ("format", "format_version", "config", "tokenizer", "query_tables", "doc_encoder",
                "sparse_query_weights"):
        assert a.get(key) == b.get(key), key
    assert set(a["files"]) == set(b["files"])
    same = [f for f in a["files"] if not f.startswith("query_tables/")]
    assert any(f.startswith("doc_encoder/") for f in same)
    assert {f: a["files"][f] for f in same} == {f: b["files"][f] for f in same}
    assert (a["fit"] is None) == (b["fit"] is None)
    if a["fit"]:
        assert set(a["fit"]) == set(b["fit"])
        for name, table in a["fit"]["tables"].items():
            assert table["rows_fitted"] == b["fit"]["tables"][name]["rows_fitted"]
    x, y = load_bundle(onnx_dir), load_bundle(torch_dir)
    for name in x.instructions:
        np.testing.assert_allclose(x.table(name).astype(np.float32),
                                   y.table(name).astype(np.float32), atol=table_atol)
    texts = SENTENCES[:3]
    np.testing.assert_array_equal(DocEncoder.from_bundle(x, device="cpu").encode_dense(texts),
                                  DocEncoder.from_bundle(y, device="cpu").encode_dense(texts))


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("architecture", ["BertForMaskedLM", "BertModel"])
def test_bundle_build_without_torch_writes_the_torch_builds_bundle(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, architecture: str) -> None:
    """A user's own BERT checkpoint whose graph was exported once: ``lr bundle build
    --fit-corpus`` with torch blocked writes the bundle ``--runtime torch`` writes (the
    unfitted table within 1e-5, the fitted one within the fit's float16 steps)."""
    model_dir, corpus = tiny_checkpoint(tmp_path, architecture)
    cache = tmp_path / "cache"
    head = "mlm" if architecture == "BertForMaskedLM" else "tied"
    ensure_graph(model_dir, head, vocab_limit=150, cache=cache)  # the one-time export
    flags = ["--model", str(model_dir), "--fit-corpus", str(corpus), "--fit-max-queries", "100",
             "--max-length", "64", "--batch-size", "64", "--instruction", "default=",
             "--instruction", "qa=find the answer"]
    mean = architecture == "BertModel"  # rows normalised: the other branch of the table
    out = build_without_torch(tmp_path, [*flags, "--out", str(tmp_path / "onnx"),
                                         *(["--pooling", "mean", "--normalize"] if mean else [])],
                              {"LR_CACHE_DIR": str(cache), "LR_TABLE_CACHE": str(tmp_path / "t-onnx")})
    assert "onnx graph" in out and (tmp_path / "onnx" / "onnx" / "graph.json").is_file()
    monkeypatch.setenv("LR_CACHE_DIR", str(cache))
    monkeypatch.setenv("LR_TABLE_CACHE", str(tmp_path / "t-torch"))
    build_bundle(model_dir, tmp_path / "torch", progress=False,
                 backbone=BackboneSettings(device="cpu", pooling="mean" if mean else None,
                                           normalize=True if mean else None),
                 tables=TableSettings(batch_size=64, max_length=64,
                                      instructions={"default": "",
                                                    "qa": "Instruct: find the answer\nQuery: "}),
                 fit=FitRecipe(corpora=(corpus,), max_queries=100, runtime="torch"))
    # the unfitted tables, as each build cached them: one file name per instruction
    onnx_tables = sorted((tmp_path / "t-onnx").glob("*.safetensors"))
    torch_tables = sorted((tmp_path / "t-torch").glob("*.safetensors"))
    assert [p.name for p in onnx_tables] == [p.name for p in torch_tables] and len(onnx_tables) == 2
    for x, y in zip(onnx_tables, torch_tables, strict=True):
        np.testing.assert_allclose(load_file(str(x))["table"], load_file(str(y))["table"], atol=1e-5)
    # the fit's targets differ by float rounding (1e-6); the ridge fit and the float16
    # table carry it to a few float16 steps (tests/model/test_onnx_runtime.py)
    assert_same_bundle(tmp_path / "onnx", tmp_path / "torch", table_atol=5e-3)


def test_a_build_without_scipy_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """scipy (the fit's solver) is the ``build`` extra's: without it ``lr bundle build`` and a
    zero-config ingest say so in one line before any work."""
    import lr_opensearch.model.onnx_graph as onnx_graph
    from lr_opensearch.cli import main
    from lr_opensearch.errors import ConfigError
    from lr_opensearch.fit.fitted import fitted_bundle

    monkeypatch.setattr(onnx_graph, "installed", lambda name: name != "scipy")
    assert main(["bundle", "build", "--out", str(tmp_path / "out"), "--no-fit"]) == 1
    assert re.search(r"lr bundle build needs scipy.*lr-opensearch\[build\]", caplog.text)
    with pytest.raises(ConfigError, match=r"without --bundle\) needs scipy.*\[build\]"):
        fitted_bundle(tmp_path / "corpus.jsonl")
    assert not (tmp_path / "out").exists()


def _top10(bundle: Path, client: Any, index: str, queries: list[str]) -> dict[str, list[Any]]:
    """Per search mode, per query, the top 10 (id, score) of ``index`` searched with ``bundle``."""
    from lr_opensearch import Retriever

    retriever = Retriever(load_bundle(bundle), client, index)
    return {mode: [[(h.doc_id, h.score) for h in hits]
                   for hits in retriever.search_batch(queries, 10, mode=mode)]
            for mode in ("hybrid", "dense", "sparse")}


def assert_same_results(a: dict[str, list[Any]], b: dict[str, list[Any]], *,
                        scores: bool = True) -> None:
    for mode in a:
        for x, y in zip(a[mode], b[mode], strict=True):
            assert len(x) == 10 and [i for i, _ in x] == [i for i, _ in y], mode
            if scores:
                np.testing.assert_allclose([s for _, s in x], [s for _, s in y], atol=1e-5,
                                           rtol=0, err_msg=mode)


@pytest.mark.node
@pytest.mark.usefixtures("one_thread")
def test_search_results_do_not_depend_on_the_runtime(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, os_client: Any, opensearch_url: str,
        index_name: str) -> None:
    """Issue 47 item 4: a bundle built on ONNX Runtime searching documents encoded on torch
    finds what it finds in documents encoded on ONNX Runtime (top 10 ids equal, scores
    within 1e-5, in every mode), and so does a bundle built on torch; the two bundles rank
    alike."""
    from lr_opensearch.indexing.run import run

    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=60)
    corpus = write_jsonl(tmp_path / "adi.jsonl", docs)
    queries = [json.loads(line)["text"] for line in
               gzip.open(data_dir() / "adi" / "queries.jsonl.gz", "rt")][:12]
    model_dir = save_model_dir(*tiny_bert(), tmp_path / "ckpt")
    monkeypatch.setenv("LR_CACHE_DIR", str(tmp_path / "cache"))
    kw: dict[str, Any] = {"tables": TableSettings(batch_size=64, max_length=128),
                          "progress": False, "backbone": BackboneSettings(device="cpu")}
    bundles = {runtime: build_bundle(model_dir, tmp_path / f"bundle-{runtime}", **kw, fit=FitRecipe(
        corpora=(corpus,), max_queries=200, runtime="auto" if runtime == "onnx" else "torch"))
        for runtime in ("onnx", "torch")}
    results: dict[tuple[str, str], dict[str, list[Any]]] = {}
    indices = [f"{index_name}-{b}-{r}" for b in bundles for r in ("onnx", "torch")]
    try:
        for built, bundle in bundles.items():
            for encoded in ("onnx", "torch"):
                index = f"{index_name}-{built}-{encoded}"
                run(ingest_config(corpus, bundle, index, opensearch_url,
                                  tmp_path / f"state-{built}-{encoded}", runtime=encoded,
                                  device="cpu"))
                results[built, encoded] = _top10(bundle, os_client, index, queries)
    finally:
        os_client.indices.delete(index=",".join(indices), ignore_unavailable=True)
    assert_same_results(results["onnx", "torch"], results["onnx", "onnx"])
    assert_same_results(results["torch", "onnx"], results["torch", "torch"])
    assert_same_results(results["onnx", "torch"], results["torch", "onnx"], scores=False)


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.einsum("ij,ij->i", a, b) / np.maximum(norms, 1e-30)


@pytest.mark.slow
def test_the_packaged_minilm_builds_without_torch_as_with_it(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The packaged all-MiniLM-L6-v2 fitted on ADI: ``lr bundle build`` with torch blocked
    (the jar's graph) and ``--runtime torch`` give the same bundle: every row of the table
    at cosine >= 0.99999, the doc encoder's files and the query weights byte for byte.
    (1,000 fit queries keep it short: about 1.5 minutes on two idle cores, both builds.)"""
    corpus = str(data_dir() / "adi" / "corpus.jsonl.gz")
    flags = ["--model", "packaged:minilm", "--fit-corpus", corpus, "--fit-max-queries", "1000"]
    out = build_without_torch(tmp_path, [*flags, "--out", str(tmp_path / "onnx")],
                              {"LR_TABLE_CACHE": str(tmp_path / "t-onnx")})
    assert "all-minilm-l6-v2" in out  # the graph is the LangChain4j jar's
    monkeypatch.setenv("LR_TABLE_CACHE", str(tmp_path / "t-torch"))
    build_bundle("packaged:minilm", tmp_path / "torch", progress=False,
                 fit=FitRecipe(corpora=(corpus,), max_queries=1000, runtime="torch"))
    (unfitted_onnx,), (unfitted_torch,) = (sorted((tmp_path / d).glob("*.safetensors"))
                                           for d in ("t-onnx", "t-torch"))
    np.testing.assert_allclose(load_file(str(unfitted_onnx))["table"],
                               load_file(str(unfitted_torch))["table"], atol=1e-5)
    a, b = load_bundle(tmp_path / "onnx"), load_bundle(tmp_path / "torch")
    assert _row_cosines(a.table(), b.table()).min() >= 0.99999
    assert_same_bundle(tmp_path / "onnx", tmp_path / "torch", table_atol=5e-3)
