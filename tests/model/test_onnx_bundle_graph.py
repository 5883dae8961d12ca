"""A bundle that carries its document encoder's ONNX graph (``BUNDLE/onnx/``, issue 47
item 2): ingest then needs neither torch, nor a network, nor a cache (the project image
mounts the bundle and nothing else); a graph made for other weights is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from ingest_support import build_tiny_bundle
from model_fixtures import one_thread  # noqa: F401

from lr_opensearch.bundle import load_bundle
from lr_opensearch.cli import main
from lr_opensearch.errors import ConfigError
from lr_opensearch.model import DocEncoder
from lr_opensearch.model.onnx_encoder import OnnxDocEncoder
from lr_opensearch.model.onnx_graph import BUNDLE_GRAPH_DIR, MANIFEST

pytestmark = pytest.mark.usefixtures("one_thread")
TEXTS = ["a sentence to encode", "the tower is tall and the river is wide"]

# A machine without torch (nor transformers), with an empty cache: only the bundle's graph.
ENCODE_WITHOUT_TORCH = """\
import importlib.abc, json, sys
class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'transformers'):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, NoTorch())
from lr_opensearch.bundle import load_bundle
from lr_opensearch.model import open_doc_encoder
e = open_doc_encoder(load_bundle(sys.argv[1]))
b = e.encode(json.loads(sys.argv[2]))
print(json.dumps({"encoder": type(e).__name__, "graph": str(e.graph.path),
                  "dense": b.dense.tolist(), "sparse": [sorted(s) for s in b.sparse]}))
"""


def test_lr_bundle_onnx_lets_ingest_encode_without_torch_or_a_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LR_CACHE_DIR", str(tmp_path / "host-cache"))
    path = build_tiny_bundle(tmp_path)
    assert main(["-q", "bundle", "onnx", str(path)]) == 0
    own = path / BUNDLE_GRAPH_DIR
    assert f"onnx graph  {own}" in capsys.readouterr().out
    bundle = load_bundle(path)
    bundle.verify_all()  # the graph sits outside the manifest: the bundle and its id unchanged
    assert json.loads((own / MANIFEST).read_text())["encoder_key"]
    empty = tmp_path / "container-cache"
    done = subprocess.run([sys.executable, "-c", ENCODE_WITHOUT_TORCH, str(path), json.dumps(TEXTS)],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "LR_CACHE_DIR": str(empty)})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["encoder"] == "OnnxDocEncoder" and got["graph"] == str(own)
    assert not empty.exists()  # nothing made, nothing cached
    want = DocEncoder.from_bundle(bundle, device="cpu").encode(TEXTS)
    np.testing.assert_allclose(np.array(got["dense"]), want.dense, atol=1e-5)
    assert got["sparse"] == [sorted(s) for s in want.sparse]


def test_a_bundle_graph_made_for_other_weights_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LR_CACHE_DIR", str(tmp_path / "cache"))
    first, second = build_tiny_bundle(tmp_path, seed=0), build_tiny_bundle(tmp_path, seed=1)
    assert main(["-q", "bundle", "onnx", str(first)]) == 0
    shutil.copytree(first / BUNDLE_GRAPH_DIR, second / BUNDLE_GRAPH_DIR)
    with pytest.raises(ConfigError, match=r"made for another encoder.*lr bundle onnx"):
        OnnxDocEncoder.from_bundle(load_bundle(second))
    assert main(["-q", "bundle", "onnx", str(second)]) == 0  # what the error says to do
    assert OnnxDocEncoder.from_bundle(load_bundle(second)).graph.path == second / BUNDLE_GRAPH_DIR
