"""``lr index create/info/delete`` against the real node, with a real (tiny) bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tiny_artifacts import tiny_bundle

from lr_opensearch.bundle import load_bundle

pytestmark = [pytest.mark.node, pytest.mark.matrix]  # matrix: also run on OpenSearch 2.19


def _lr(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LR_OPENSEARCH_")}
    return subprocess.run([sys.executable, "-m", "lr_opensearch.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def test_index_create_info_delete(tmp_path: Path, opensearch_url: str, os_client: Any,
                                  index_name: str) -> None:
    path = tiny_bundle(tmp_path / "bundle")
    bundle = load_bundle(path)
    conn = ["--url", opensearch_url]
    made = _lr("index", "create", "--bundle", str(path), "--index", index_name, "--m", "8", *conn)
    assert made.returncode == 0, made.stderr
    meta = os_client.indices.get_mapping(index=index_name)[index_name]["mappings"]["_meta"]
    assert meta["lightretriever"]["bundle_id"] == bundle.bundle_id
    assert meta["lightretriever"]["dense_dim"] == bundle.config.served_dim

    again = _lr("index", "create", "--bundle", str(path), "--index", index_name, *conn)
    assert again.returncode == 1 and "already exists" in again.stderr
    ok = _lr("index", "create", "--bundle", str(path), "--index", index_name, "--exist-ok", *conn)
    assert ok.returncode == 0 and "matches bundle" in ok.stdout

    other = tiny_bundle(tmp_path / "other", seed=1)
    clash = _lr("index", "create", "--bundle", str(other), "--index", index_name, "--exist-ok",
                *conn)
    assert clash.returncode == 1 and "different bundle" in clash.stderr

    info = _lr("index", "info", index_name, "--json", *conn)
    assert info.returncode == 0, info.stderr
    report = json.loads(info.stdout)
    assert report["docs"] == 0 and report["lightretriever"]["bundle_id"] == bundle.bundle_id
    assert report["dense"]["method"]["parameters"]["m"] == 8
    text = _lr("index", "info", index_name, *conn)
    assert bundle.bundle_id in text.stdout and "lucene" in text.stdout

    refused = _lr("index", "delete", index_name, *conn)
    assert refused.returncode == 1 and os_client.indices.exists(index=index_name)
    gone = _lr("index", "delete", index_name, "--yes", index_name, *conn)
    assert gone.returncode == 0 and not os_client.indices.exists(index=index_name)


def test_index_delete_pattern_keeps_foreign_indices(tmp_path: Path, opensearch_url: str,
                                                     os_client: Any, index_name: str) -> None:
    """A pattern is resolved to names first; only LightRetriever indices (their _meta) are
    deleted, each named; a foreign index matching it is named and kept; no wildcard reaches
    the engine (whose action.destructive_requires_name is false by default)."""
    path = tiny_bundle(tmp_path / "bundle")
    conn = ["--url", opensearch_url]
    ours, foreign = f"{index_name}-lr", f"{index_name}-precious"
    made = _lr("index", "create", "--bundle", str(path), "--index", ours, *conn)
    assert made.returncode == 0, made.stderr
    os_client.indices.create(index=foreign)
    os_client.index(index=foreign, id="1", body={"text": "keep me"}, refresh=True)
    setting = "action.destructive_requires_name"  # off, as on the cluster of the report
    os_client.cluster.put_settings(body={"transient": {setting: False}})
    try:
        pattern = f"{index_name}-*"
        out = _lr("index", "delete", pattern, "--yes", pattern, *conn)
        assert os_client.indices.exists(index=foreign), out.stdout + out.stderr
        assert not os_client.indices.exists(index=ours), out.stdout + out.stderr
        assert f"deleted index {ours}" in out.stdout
        assert foreign in out.stderr and "not a LightRetriever index" in out.stderr
        assert f"deleted index {pattern}" not in out.stdout
        assert out.returncode == 1  # something matched was refused

        named = _lr("index", "delete", foreign, "--yes", foreign, *conn)
        assert named.returncode == 1 and "not a LightRetriever index" in named.stderr
        assert os_client.indices.exists(index=foreign)

        none = _lr("index", "delete", pattern, "--yes", pattern, *conn)
        assert none.returncode == 1 and "no LightRetriever index matches" in none.stderr
        assert os_client.indices.exists(index=foreign)
    finally:
        os_client.cluster.put_settings(body={"transient": {setting: None}})
        os_client.indices.delete(index=f"{foreign},{ours}", ignore_unavailable=True)


def test_adapter_delete_index_takes_one_concrete_name() -> None:
    """The adapter never passes a pattern, a list or _all to the engine's delete."""
    from lr_opensearch.engine.adapter import EngineAdapter
    from lr_opensearch.errors import ConfigError

    class Client:
        class indices:  # noqa: N801 - the client's spelling
            @staticmethod
            def delete(**kwargs: Any) -> None:
                raise AssertionError(f"sent {kwargs}")

    adapter = EngineAdapter(Client())
    for target in ("ad*", "a,b", "_all", "*", "ad?"):
        with pytest.raises(ConfigError, match="one index by name"):
            adapter.delete_index(target)


def _into_closed_pipe(*args: str) -> subprocess.CompletedProcess[str]:
    """``lr ARGS | head`` where head has already gone: stdout is a pipe nobody reads."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LR_OPENSEARCH_")}
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "lr_opensearch.cli", *args], env=env,
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write)


def test_a_closed_stdout_pipe_ends_quietly(tmp_path: Path, opensearch_url: str,
                                           index_name: str) -> None:
    """`lr index list --json | head` and `lr search --json ... | head`: no traceback, the exit
    status of a process that SIGPIPE ended (128 + 13), as Unix tools give."""
    path = tiny_bundle(tmp_path / "bundle")
    conn = ["--url", opensearch_url]
    made = _lr("index", "create", "--bundle", str(path), "--index", index_name, *conn)
    assert made.returncode == 0, made.stderr
    for args in (["index", "list", "--json"],
                 ["search", "--bundle", str(path), "--index", index_name, "--json", "a query"]):
        done = _into_closed_pipe(*args, *conn)
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
        assert done.returncode == 141, (args, done.returncode, done.stderr)


def test_a_create_index_block_is_named_with_how_to_lift_it(tmp_path: Path, opensearch_url: str,
                                                           os_client: Any,
                                                           index_name: str) -> None:
    """After a flood-stage disk watermark the cluster keeps ``cluster.blocks.create_index``:
    `lr index create` names that block and how to lift it, not the k-NN plugin."""
    path = tiny_bundle(tmp_path / "bundle")
    block = "cluster.blocks.create_index"
    os_client.cluster.put_settings(body={"persistent": {block: True}})
    try:
        made = _lr("index", "create", "--bundle", str(path), "--index", index_name,
                   "--url", opensearch_url)
    finally:
        os_client.cluster.put_settings(body={"persistent": {block: None}})
    assert made.returncode == 1 and not os_client.indices.exists(index=index_name)
    lines = made.stderr.strip().splitlines()
    assert len(lines) == 1 and block in lines[0], made.stderr
    assert '{"persistent": {"cluster.blocks.create_index": null}}' in lines[0]
    assert "watermark" in lines[0] and "k-NN" not in lines[0]
