"""The doc encoder's precisions (issue 28 part 3): the proved bfloat16 screen of the sparse
projection gives float32's kept weights, bf16 stays within cosine 0.999 of fp32, and
``--encode-precision`` reaches the encoder from ingest and ``lr bundle build``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from model_fixtures import one_thread, tiny_bert, tiny_checkpoint_and_corpus, tiny_llama  # noqa: F401
from tiny_artifacts import SENTENCES

from lr_opensearch.errors import ConfigError
from lr_opensearch.model import DocEncoder, DocSettings, projection_max
from lr_opensearch.model import fused as fused_module
from lr_opensearch.model.precision import check_precision, prepare
from lr_opensearch.options import ENCODE_PRECISIONS

pytestmark = pytest.mark.usefixtures("one_thread")

MODELS = {
    "bert-mlm": lambda: tiny_bert(),
    "bert-tied-mean": lambda: tiny_bert(architecture="BertModel", pooling="mean", normalize=True),
    "llama": lambda: tiny_llama(),
}


def _projection_inputs(seed: int = 0) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(6, 12, 48, generator=gen)
    weight = torch.randn(700, 48, generator=gen)
    bias = torch.randn(700, generator=gen)
    mask = torch.ones(6, 12, dtype=torch.bool)
    mask[1, 7:] = False  # right padding
    mask[2, :3] = False  # left padding
    mask[4] = False  # no real token at all
    return hidden, mask, weight, bias


def _top(values: torch.Tensor, k: int) -> list[dict[int, float]]:
    top = values.topk(k, dim=1)
    return [dict(zip(i.tolist(), v.tolist(), strict=True)) for v, i in zip(top.values, top.indices, strict=True)]


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("slack", [None, 1e6])
def test_bf16_screen_keeps_float32s_top_entries(with_bias: bool, slack: float | None,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The ``exact_top`` largest maxima of every row are float32's: the same entries and
    values as the float32 pass. A huge slack makes the proof fail everywhere: every row
    then falls back to float32 and the result is float32's as well."""
    hidden, mask, weight, bias = _projection_inputs()
    b = bias if with_bias else None
    if slack is not None:
        monkeypatch.setattr(fused_module, "_SCREEN_SLACK", slack)
    with torch.inference_mode():
        plain = projection_max(hidden, mask, weight, b)
        screened = projection_max(hidden, mask, weight, b, exact_top=20)
    assert 8 * 20 < weight.shape[0]  # the candidates are a subset: the proof is exercised
    assert torch.isinf(screened[4]).all() and (screened[4] < 0).all()
    for row in (0, 1, 2, 3, 5):
        want, got = _top(plain[row:row + 1], 20)[0], _top(screened[row:row + 1], 20)[0]
        # the 20 largest values, each float32's value of its token (ties may swap tokens)
        assert sorted(got.values()) == pytest.approx(sorted(want.values()), abs=1e-5)
        for token, value in got.items():
            assert value == pytest.approx(float(plain[row, token]), abs=1e-5)
    # the other entries are the bfloat16 pass's: close, not equal
    assert (screened[0] - plain[0]).abs().max() < 0.1 * plain[0].abs().max()


def test_bf16_screen_falls_back_where_the_proof_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows whose bound does not hold are computed in float32 throughout (all entries)."""
    hidden, mask, weight, bias = _projection_inputs(seed=1)
    monkeypatch.setattr(fused_module, "_SCREEN_SLACK", 1e6)
    with torch.inference_mode():
        plain = projection_max(hidden, mask, weight, bias)
        screened = projection_max(hidden, mask, weight, bias, exact_top=20)
    torch.testing.assert_close(screened, plain, rtol=0, atol=1e-5)


def _encoder(name: str, precision: str, top_k: int, exact_top: bool | None = None) -> DocEncoder:
    model, tok = MODELS[name]()
    enc = DocEncoder(model, tok, DocSettings(max_length=64, top_k=top_k), device="cpu", precision=precision)
    if exact_top is False:
        enc._exact_top = None
    elif exact_top:
        enc._exact_top = top_k + len(enc.excluded)
    return enc


@pytest.mark.parametrize("name", list(MODELS))
def test_doc_encoder_screen_equals_float32(name: str) -> None:
    """fp32 with the bf16 screen (the default where bf16 is fast) stores what float32
    throughout stores: the same terms and weights, the same dense vectors."""
    texts = SENTENCES * 2
    plain = _encoder(name, "fp32", 4, exact_top=False).encode(texts)
    screened = _encoder(name, "fp32", 4, exact_top=True).encode(texts)
    np.testing.assert_array_equal(screened.dense, plain.dense)
    for got, want in zip(screened.sparse, plain.sparse, strict=True):
        assert got.keys() == want.keys()
        for token, weight in want.items():
            assert got[token] == pytest.approx(weight, abs=1e-5)


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.mark.parametrize("precision", ["mixed", "bf16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_bfloat16_precisions_within_cosine_0999_of_fp32(name: str, precision: str) -> None:
    """mixed and bf16: dense vectors and (untruncated) sparse vectors within cosine 0.999
    of fp32, for the documents and for dense-only encodes (the fit's pseudo-queries)."""
    model, tok = MODELS[name]()
    vocab = model.vocab_size
    fp32 = _encoder(name, "fp32", vocab, exact_top=False)
    bf16 = _encoder(name, precision, vocab)
    linear = bf16.model.hf.base_model.get_submodule(_first_linear(bf16.model))
    assert linear.weight.dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
    a, b = fp32.encode(SENTENCES), bf16.encode(SENTENCES)
    assert _cosine(a.dense, b.dense).min() >= 0.999
    assert np.abs(a.dense - b.dense).max() > 0  # bf16 really computed differently
    dense = np.stack([np.bincount(list(d), weights=list(d.values()), minlength=vocab) for d in a.sparse])
    other = np.stack([np.bincount(list(d), weights=list(d.values()), minlength=vocab) for d in b.sparse])
    assert _cosine(dense, other).min() >= 0.999
    assert _cosine(fp32.encode_dense(SENTENCES), bf16.encode_dense(SENTENCES)).min() >= 0.999


def _first_linear(model: Any) -> str:
    base = model.hf.base_model
    return next(n for n, m in base.named_modules() if isinstance(m, torch.nn.Linear))


@pytest.mark.parametrize("name", list(MODELS))
def test_prepare_converts_a_copy(name: str) -> None:
    """``lr bundle build`` saves the model after the fit: bf16 must not touch it; the
    converted body hands float32 hidden states to the heads."""
    model, _ = MODELS[name]()
    linear = _first_linear(model)
    converted = prepare(model, "bf16")
    assert converted is not model and prepare(model, "fp32") is model
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert converted.hf.base_model.get_submodule(linear).weight.dtype == torch.bfloat16
    ids = torch.tensor([[2, 7, 9, 3]])
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        hidden = converted.body(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))
    assert hidden.dtype == torch.float32


def test_mixed_runs_the_bodys_products_in_bfloat16_on_a_copy() -> None:
    """mixed: the same weights (float32, shared, not copied), the body's linear layers fed
    and computing bfloat16 under autocast, its LayerNorms float32, its output float32; the
    model ``lr bundle build`` saves afterwards is left as it was."""
    model, _ = MODELS["bert-tied-mean"]()
    mixed = prepare(model, "mixed")
    assert mixed is not model and model.body_autocast is None
    assert mixed.hf is model.hf and {p.dtype for p in model.parameters()} == {torch.float32}
    seen: dict[str, set[torch.dtype]] = {}

    def record(module: torch.nn.Module, args: Any, out: torch.Tensor) -> None:
        seen.setdefault(type(module).__name__, set()).add(out.dtype)

    hooks = [m.register_forward_hook(record) for m in model.hf.base_model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.LayerNorm))]
    ids = torch.tensor([[2, 7, 9, 3]])
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        hidden = mixed.body(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))
        for hook in hooks:
            hook.remove()
        plain = model.body(ids, mask, (mask.cumsum(-1) - 1).clamp(min=0))
    assert seen == {"Linear": {torch.bfloat16}, "LayerNorm": {torch.float32}}
    assert hidden.dtype == plain.dtype == torch.float32
    assert 0 < (hidden - plain).abs().max() < 0.1 * plain.abs().max()


def test_unknown_precision_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match="fp32, mixed, bf16"):
        check_precision("fp16", torch.device("cpu"))
    assert ENCODE_PRECISIONS[0] == "fp32"


def test_ingest_flag_reaches_the_config_and_the_workers(tmp_path: Path) -> None:
    from ingest.cli import config_from_args, parse_args
    from ingest.launcher import worker_argv

    args = parse_args(["c.jsonl", "--bundle", "b", "--index", "i", "--encode-precision", "bf16"])
    config = config_from_args(args)
    assert config.encode_precision == "bf16"
    argv = worker_argv(config, 0, tmp_path / "s.json")
    assert argv[argv.index("--encode-precision") + 1] == "bf16"
    assert config_from_args(parse_args(argv[3:])).encode_precision == "bf16"
    assert config_from_args(parse_args(["c.jsonl", "--bundle", "b", "--index", "i"])).encode_precision == "fp32"
    with pytest.raises(SystemExit):
        parse_args(["c.jsonl", "--encode-precision", "int4"])


@pytest.mark.node
def test_ingest_at_bf16_stores_the_bf16_encoders_vectors(os_client: Any, opensearch_url: str,
                                                         index_name: str, tmp_path: Path) -> None:
    """``run`` with ``encode_precision="bf16"`` loads the bundle's encoder at bf16: the
    stored dense vectors are the bf16 encoder's (not fp32's), within cosine 0.999 of fp32."""
    from ingest_support import build_tiny_bundle, data_dir, ingest_config, read_corpus

    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.indexing.reader import document_text
    from lr_opensearch.indexing.run import run

    tiny = build_tiny_bundle(tmp_path / "b")
    corpus = data_dir() / "adi" / "corpus.jsonl.gz"
    docs = read_corpus(corpus, limit=12)
    small = tmp_path / "corpus.jsonl"
    small.write_text("".join(json.dumps(d) + "\n" for d in docs))
    summary = run(ingest_config(small, tiny, index_name, opensearch_url, tmp_path / "state",
                                encode_precision="bf16"))
    assert summary.complete and summary.counts.indexed == len(docs)
    texts = [document_text(d.get("title", ""), d["text"]) for d in docs]
    bundle = load_bundle(tiny)
    bf16 = DocEncoder.from_bundle(bundle, device="cpu", precision="bf16").encode(texts).dense
    fp32 = DocEncoder.from_bundle(bundle, device="cpu").encode(texts).dense
    stored = np.asarray([os_client.get(index=index_name, id=d["_id"])["_source"]["lr_dense"]
                         for d in docs])
    np.testing.assert_allclose(stored, bf16, rtol=1e-4, atol=1e-5)
    assert np.abs(stored - fp32).max() > 1e-4  # not fp32's vectors
    assert _cosine(stored, fp32).min() >= 0.999


def test_bundle_build_flag_reaches_the_fit_encoder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``lr bundle build --encode-precision bf16 --fit-corpus ...``: the fit's DocEncoder
    computes at bf16; the saved doc encoder keeps float32 weights."""
    from lr_opensearch.bundle import load_bundle
    from lr_opensearch.cli import main

    model_dir, corpus = tiny_checkpoint_and_corpus(tmp_path)
    seen: list[str] = []
    original = DocEncoder.__init__

    def spy(self: DocEncoder, *args: Any, **kwargs: Any) -> None:
        seen.append(kwargs.get("precision", "fp32"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(DocEncoder, "__init__", spy)
    out = tmp_path / "bundle"
    assert main(["bundle", "build", "--model", str(model_dir), "--out", str(out), "--max-length", "64",
                 "--fit-corpus", str(corpus), "--fit-max-queries", "200", "--batch-size", "64",
                 "--encode-precision", "bf16"]) == 0
    assert seen == ["bf16"]
    from safetensors import safe_open

    with safe_open(str(load_bundle(out).doc_encoder_dir / "model.safetensors"), "pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32"}
