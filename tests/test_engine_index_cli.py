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
