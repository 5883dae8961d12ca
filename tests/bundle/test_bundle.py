"""The bundle format: round trip, checksums, foreign/newer formats, shape checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from tiny_artifacts import (
    bpe_tokenizer,
    random_tables,
    tiny_bundle,
    tiny_config,
    wordpiece_tokenizer,
)

from lr_opensearch.bundle import (
    FORMAT_NAME,
    MANIFEST_FILE,
    BundleConfig,
    compute_bundle_id,
    load_bundle,
    save_bundle,
)
from lr_opensearch.bundle.files import hash_file
from lr_opensearch.errors import BundleError


def _flip_byte(path: Path, offset_from_end: int = 3) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


def test_round_trip_tables_config_tokenizer(tmp_path: Path) -> None:
    tok = wordpiece_tokenizer()
    config = tiny_config(dense_dim=12, served_dim=8, instructions={"default": "", "qa": "Query: "})
    tables = random_tables(config, tok.get_vocab_size(with_added_tokens=True), seed=3)
    path = save_bundle(tmp_path / "b", config, tokenizer=tok, tables=tables)
    b = load_bundle(path)
    assert b.config == config
    for name, table in tables.items():
        got = b.table(name)
        assert got.dtype == np.float16 and got.shape == table.shape
        np.testing.assert_array_equal(np.asarray(got), table.astype(np.float16))
    assert b.table() is b.table("default")
    text = "What is the capital of France?"
    assert b.tokenizer.encode(text).ids == tok.encode(text).ids
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["format"] == FORMAT_NAME and manifest["format_version"] == 1
    assert set(manifest["files"]) == {"tokenizer.json", "query_tables/default.safetensors",
                                      "query_tables/qa.safetensors"}
    for rel, info in manifest["files"].items():
        assert info["sha256"] == hash_file(path / rel)
    specials = {tok.token_to_id(t) for t in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]}
    assert b.special_token_ids == specials
    assert b.instructions["qa"] == "Query: "


def test_table_file_is_plain_safetensors(tmp_path: Path) -> None:
    from safetensors import safe_open

    b = load_bundle(tiny_bundle(tmp_path / "b"))
    with safe_open(str(b.path / "query_tables/default.safetensors"), framework="np") as f:
        assert list(f.keys()) == ["table"]
        np.testing.assert_array_equal(f.get_tensor("table"), np.asarray(b.table()))


def test_bundle_id_depends_on_content_not_time(tmp_path: Path) -> None:
    tok = wordpiece_tokenizer()
    a = load_bundle(tiny_bundle(tmp_path / "a", tok, seed=1))
    b = load_bundle(tiny_bundle(tmp_path / "b", tok, seed=1))
    c = load_bundle(tiny_bundle(tmp_path / "c", tok, seed=2))
    d = load_bundle(tiny_bundle(tmp_path / "d", tok, seed=1, served_dim=8))
    assert a.bundle_id == b.bundle_id
    assert len({a.bundle_id, c.bundle_id, d.bundle_id}) == 3
    assert a.bundle_id == compute_bundle_id(a.manifest["files"], a.manifest["config"])


@pytest.mark.parametrize("rel", ["query_tables/default.safetensors", "tokenizer.json"])
def test_checksum_tamper_detected_and_named(tmp_path: Path, rel: str) -> None:
    path = tiny_bundle(tmp_path / "b")
    _flip_byte(path / rel)
    with pytest.raises(BundleError, match=f"checksum mismatch for {rel}"):
        load_bundle(path)
    if rel.endswith(".safetensors"):
        assert load_bundle(path, verify=False).table().shape[1] == 16  # verify=False skips hashing


def test_doc_encoder_copied_and_verified_on_first_use(tmp_path: Path) -> None:
    src = tmp_path / "hf"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "bert"}')
    (src / "model.safetensors").write_bytes(b"0123456789" * 10)
    path = tiny_bundle(tmp_path / "b", doc_encoder_dir=src)
    assert (load_bundle(path).doc_encoder_dir / "config.json").read_text() == '{"model_type": "bert"}'
    _flip_byte(path / "doc_encoder/model.safetensors")
    b = load_bundle(path)  # the query side does not hash the doc encoder
    with pytest.raises(BundleError, match="doc_encoder/model.safetensors"):
        _ = b.doc_encoder_dir
    with pytest.raises(BundleError, match="doc_encoder/model.safetensors"):
        load_bundle(path).verify_all()
    with pytest.raises(BundleError, match="no doc_encoder"):
        _ = load_bundle(tiny_bundle(tmp_path / "q")).doc_encoder_dir


def test_missing_file_and_truncation(tmp_path: Path) -> None:
    path = tiny_bundle(tmp_path / "b")
    table = path / "query_tables/default.safetensors"
    table.write_bytes(table.read_bytes()[:-10])
    with pytest.raises(BundleError, match="default.safetensors has .* bytes"):
        load_bundle(path, verify=False)
    table.unlink()
    with pytest.raises(BundleError, match="query_tables/default.safetensors .* is missing"):
        load_bundle(path)


def _rewrite_manifest(path: Path, **changes: object) -> None:
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    manifest.update(changes)
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))


def test_foreign_missing_and_newer_manifest(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="does not exist"):
        load_bundle(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BundleError, match="not a LightRetriever bundle"):
        load_bundle(tmp_path / "empty")
    path = tiny_bundle(tmp_path / "b")
    _rewrite_manifest(path, format_version=2)
    with pytest.raises(BundleError, match="version 2.*Upgrade lr-opensearch"):
        load_bundle(path)
    _rewrite_manifest(path, format="sentence-transformers", format_version=1)
    with pytest.raises(BundleError, match="not a LightRetriever bundle"):
        load_bundle(path)
    (path / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(BundleError, match="not valid JSON"):
        load_bundle(path)


def test_edited_manifest_config_changes_id_and_is_refused(tmp_path: Path) -> None:
    path = tiny_bundle(tmp_path / "b")
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    manifest["config"]["served_dim"] = 4
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match="bundle_id does not match"):
        load_bundle(path)


def test_table_shape_mismatch_on_load(tmp_path: Path) -> None:
    path = tiny_bundle(tmp_path / "b")
    rel = "query_tables/default.safetensors"
    v = load_bundle(path).vocab_size
    save_file({"table": np.zeros((v - 1, 16), np.float16)}, str(path / rel))
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    manifest["files"][rel] = {"sha256": hash_file(path / rel), "size": os.path.getsize(path / rel)}
    manifest["bundle_id"] = compute_bundle_id(manifest["files"], manifest["config"])
    (path / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(BundleError, match=rf"table shape \[{v - 1}, 16\] disagrees .* \[{v}, 16\]"):
        load_bundle(path)


def test_save_rejects_bad_tables(tmp_path: Path) -> None:
    tok = bpe_tokenizer()
    v = tok.get_vocab_size(with_added_tokens=True)
    config = tiny_config(dense_dim=8)
    with pytest.raises(BundleError, match=rf"shape \[{v + 1}, 8\], expected \[{v}, 8\]"):
        save_bundle(tmp_path / "a", config, tokenizer=tok, tables={"default": np.zeros((v + 1, 8))})
    with pytest.raises(BundleError, match=rf"expected \[{v}, 8\]"):
        save_bundle(tmp_path / "a", config, tokenizer=tok, tables={"default": np.zeros((v, 9))})
    with pytest.raises(BundleError, match="must match the config instructions"):
        save_bundle(tmp_path / "a", config, tokenizer=tok, tables={"other": np.zeros((v, 8))})
    big = np.zeros((v, 8), np.float32)
    big[5, 2] = 1e6  # overflows float16
    with pytest.raises(BundleError, match="non-finite .* row 5"):
        save_bundle(tmp_path / "a", config, tokenizer=tok, tables={"default": big})
    assert not (tmp_path / "a").exists() and not list(tmp_path.glob(".a.tmp-*"))


def test_overwrite_rules(tmp_path: Path) -> None:
    path = tiny_bundle(tmp_path / "b", seed=1)
    with pytest.raises(BundleError, match="already exists"):
        tiny_bundle(path)
    tok = wordpiece_tokenizer()
    config = tiny_config()
    tables = random_tables(config, tok.get_vocab_size(with_added_tokens=True), seed=9)
    save_bundle(path, config, tokenizer=tok, tables=tables, overwrite=True)
    np.testing.assert_array_equal(np.asarray(load_bundle(path).table()), tables["default"].astype(np.float16))
    other = tmp_path / "not_a_bundle"
    other.mkdir()
    (other / "precious.txt").write_text("keep me")
    with pytest.raises(BundleError, match="not a bundle; refusing"):
        save_bundle(other, config, tokenizer=tok, tables=tables, overwrite=True)
    assert (other / "precious.txt").exists()


def test_config_validation_lists_valid_options() -> None:
    with pytest.raises(BundleError, match=r"BundleConfig.pooling 'max'; valid options: cls, mean, last"):
        tiny_config(pooling="max")
    with pytest.raises(BundleError, match="served_dim=32 must be in 1..dense_dim=16"):
        tiny_config(served_dim=32)
    with pytest.raises(BundleError, match="default_instruction='qa' is not one of"):
        tiny_config(default_instruction="qa")
    with pytest.raises(BundleError, match="instruction names"):
        tiny_config(instructions={"../x": ""}, default_instruction="../x")
    config = tiny_config(instructions={"default": "", "qa": "Q: "})
    assert BundleConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(BundleError, match=r"fields missing: \['kind'\]"):
        BundleConfig.from_dict({k: v for k, v in config.to_dict().items() if k != "kind"})


def test_unknown_instruction_lists_valid(tmp_path: Path) -> None:
    b = load_bundle(tiny_bundle(tmp_path / "b"))
    with pytest.raises(BundleError, match=r"no instruction 'qa'; valid: \['default'\]"):
        b.table("qa")


def test_cli_bundle_info(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lr_opensearch.cli import main
    from lr_opensearch.cli.bundle import parse_instructions
    from lr_opensearch.errors import ConfigError

    path = tiny_bundle(tmp_path / "b")
    assert main(["bundle", "info", str(path), "--json", "--verify"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["bundle_id"] == load_bundle(path).bundle_id and info["vocab_size"] == 200
    assert info["query_tables"]["default"]["shape"] == [200, 16]
    assert main(["bundle", "info", str(path)]) == 0
    assert "table       default (default): [200, 16]" in capsys.readouterr().out
    _flip_byte(path / "tokenizer.json")
    assert main(["bundle", "info", str(path)]) == 1  # BundleError -> exit 1, message logged
    assert parse_instructions(["default=", "qa=Find: a=b"]) == {"default": "", "qa": "Instruct: Find: a=b\nQuery: "}
    with pytest.raises(ConfigError, match="NAME=TEXT"):
        parse_instructions(["noequals"])


def test_cli_bundle_build_from_a_tiny_checkpoint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from model_fixtures import save_model_dir, tiny_bert

    from lr_opensearch.cli import main
    from lr_opensearch.query import QueryEncoder

    model, tok = tiny_bert()
    model_dir = save_model_dir(model, tok, tmp_path / "ckpt")
    out = tmp_path / "bundle"
    argv = ["-q", "bundle", "build", "--model", str(model_dir), "--out", str(out), "--instruction", "default=",
            "--instruction", "qa=Find passages", "--served-dim", "16", "--batch-size", "64"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"built {out}" in printed and f"onnx graph  {out / 'onnx'}" in printed
    assert (out / "onnx" / "graph.json").is_file()  # ingest then needs no torch (issue 47)
    bundle = load_bundle(out)
    assert dict(bundle.config.instructions) == {"default": "", "qa": "Instruct: Find passages\nQuery: "}
    assert bundle.config.served_dim == 16 and (bundle.doc_encoder_dir / "config.json").is_file()
    encoder = QueryEncoder(bundle)
    a, b = encoder.encode("the tower is tall").dense, encoder.encode("the tower is tall", "qa").dense
    assert a.shape == (16,) and not np.allclose(a, b)
    assert main(argv) == 1  # exists: BundleError, no overwrite
    bare = tmp_path / "bare"
    assert main([*argv[:6], str(bare), *argv[7:], "--no-onnx-graph"]) == 0
    assert not (bare / "onnx").exists() and (bare / "lightretriever.json").is_file()


def test_query_norm_is_pinned_in_the_manifest_and_old_bundles_read_rows() -> None:
    cfg = tiny_config(normalize=True, query_norm="mean")
    assert BundleConfig.from_dict(cfg.to_dict()).query_norm == "mean"
    old = {k: v for k, v in cfg.to_dict().items() if k != "query_norm"}
    assert BundleConfig.from_dict(old).query_norm == "rows"  # what bundles before the field hold
    with pytest.raises(BundleError, match="query_norm"):
        tiny_config(query_norm="tokens")
