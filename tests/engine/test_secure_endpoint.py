"""Every connection option against a real TLS + basic-auth endpoint (nginx in front of the
session's OpenSearch node, certificates made per session: tests/secure_proxy.py): CA file
verified, wrong CA and wrong password give one clear line each (never a stack trace),
``--insecure`` works and warns, and ingest, search and eval all work through it. The
password never appears in any output, even with debug logging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

import pytest
from ingest_support import REPO, build_tiny_bundle, data_dir, read_corpus, write_jsonl

from lr_opensearch.engine.client import connect
from lr_opensearch.errors import EngineError

pytestmark = pytest.mark.node


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("secure_bundle"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LR_OPENSEARCH_")}
    return {**env, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", **extra}


def _run(module: str, *args: str, env: dict[str, str] | None = None,
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, text=True,
                          capture_output=True, timeout=600, check=False, env=env or _env())


def _clean(proc: subprocess.CompletedProcess[str], *secrets: str) -> str:
    """stdout + stderr, after checking that no secret and no stack trace is in them."""
    out = proc.stdout + proc.stderr
    for secret in secrets:
        assert secret not in out, f"a secret leaked into the output:\n{out}"
    return out


def test_ingest_search_and_eval_through_tls_and_basic_auth(
        secure_endpoint: Any, tiny: Path, os_client: Any, tmp_path: Path) -> None:
    ep = secure_endpoint
    index = f"lr-test-secure-{uuid.uuid4().hex[:8]}"
    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz")
    corpus = write_jsonl(tmp_path / "adi.jsonl", docs)
    try:
        # ingest: the password from the environment, CA verified, debug logging on
        ingested = _run("ingest.bulk", str(corpus), "--bundle", str(tiny), "--index", index,
                        "--url", ep.url, "--user", ep.user, "--ca-certs", str(ep.ca),
                        "--state-dir", str(tmp_path / "state"), "--no-progress", "-v",
                        env=_env(LR_OPENSEARCH_PASSWORD=ep.password))
        _clean(ingested, ep.password)
        assert ingested.returncode == 0, ingested.stderr[-3000:]
        os_client.indices.refresh(index=index)
        assert os_client.count(index=index)["count"] == len(docs)  # through the proxy
        # search: password as an argument (it shows in ps, but in no output), debug on
        found = _run("lr_opensearch.cli", "-v", "search", "--bundle", str(tiny), "--index",
                     index, "--url", ep.url, "--user", ep.user, "--password", ep.password,
                     "--ca-certs", str(ep.ca), "--json", "computer information retrieval")
        _clean(found, ep.password)
        assert found.returncode == 0, found.stderr[-3000:]
        assert len(json.loads(found.stdout)[0]["hits"]) == 10
        # eval: credentials inside the URL, from the environment
        parts = urllib.parse.urlsplit(ep.url)
        with_creds = f"https://{ep.user}:{ep.password}@{parts.netloc}"
        out_dir = tmp_path / "eval"
        evaluated = _run("lr_opensearch.cli", "eval", "--dataset", str(data_dir() / "adi"),
                         "--bundle", str(tiny), "--index", index, "--runs", "bm25,lr-hybrid",
                         "--no-sweep", "--json", "--out", str(out_dir),
                         env=_env(LR_OPENSEARCH_URL=with_creds,
                                  LR_OPENSEARCH_CA_CERTS=str(ep.ca)))
        _clean(evaluated, ep.password)
        assert evaluated.returncode == 0, evaluated.stderr[-3000:]
        report = json.loads(evaluated.stdout.strip().splitlines()[-1])
        assert report["index_status"] == "reused" and report["runs"]["lr-hybrid"]["ndcg@10"] > 0
        for path in out_dir.rglob("*"):
            if path.is_file():
                assert ep.password.encode() not in path.read_bytes(), path
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)


def test_wrong_ca_is_one_clear_tls_error(secure_endpoint: Any) -> None:
    ep = secure_endpoint
    with pytest.raises(EngineError, match="TLS verification of https://127.0.0.1"):
        connect(ep.url, user=ep.user, password=ep.password, ca_certs=str(ep.wrong_ca))
    proc = _run("lr_opensearch.cli", "index", "info", "anything", "--url", ep.url,
                "--user", ep.user, "--password", ep.password, "--ca-certs", str(ep.wrong_ca))
    out = _clean(proc, ep.password)
    assert proc.returncode == 1
    assert f"TLS verification of {ep.url} failed" in out and "--ca-certs" in out
    assert "Traceback" not in out and len(proc.stderr.strip().splitlines()) == 1
    # no CA at all: the system store does not know this CA either
    proc = _run("lr_opensearch.cli", "index", "info", "anything", "--url", ep.url,
                env=_env(LR_OPENSEARCH_USER=ep.user, LR_OPENSEARCH_PASSWORD=ep.password))
    out = _clean(proc, ep.password)
    assert proc.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in out and "Traceback" not in out


def test_insecure_works_and_warns(secure_endpoint: Any, tiny: Path, os_client: Any,
                                  tmp_path: Path) -> None:
    ep = secure_endpoint
    index = f"lr-test-insecure-{uuid.uuid4().hex[:8]}"
    corpus = write_jsonl(tmp_path / "c.jsonl",
                         read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=12))
    try:
        proc = _run("ingest.bulk", str(corpus), "--bundle", str(tiny), "--index", index,
                    "--url", ep.url, "--insecure", "--state-dir", str(tmp_path / "s"),
                    "--no-progress", env=_env(LR_OPENSEARCH_USER=ep.user,
                                              LR_OPENSEARCH_PASSWORD=ep.password))
        out = _clean(proc, ep.password)
        assert proc.returncode == 0, out[-3000:]
        assert f"TLS certificate verification is OFF for {ep.url}" in out
        info = _run("lr_opensearch.cli", "index", "info", index, "--url", ep.url, "--user",
                    ep.user, "--password", ep.password, "--insecure")
        out = _clean(info, ep.password)
        assert info.returncode == 0 and "documents  12" in out
        assert "verification is OFF" in out and "InsecureRequestWarning" not in out
    finally:
        os_client.indices.delete(index=index, ignore_unavailable=True)


def test_wrong_password_is_one_clear_401_naming_the_url(secure_endpoint: Any, tiny: Path,
                                                         tmp_path: Path) -> None:
    ep = secure_endpoint
    wrong = "Not-the-Pw-77"
    proc = _run("lr_opensearch.cli", "search", "--bundle", str(tiny), "--index", "x",
                "--url", ep.url, "--user", ep.user, "--password", wrong, "--ca-certs",
                str(ep.ca), "anything")
    out = _clean(proc, wrong, ep.password)
    assert proc.returncode == 1
    assert f"the cluster at {ep.url} refused the credentials (HTTP 401)" in out
    assert "Traceback" not in out and len(proc.stderr.strip().splitlines()) == 1
    corpus = write_jsonl(tmp_path / "c.jsonl",
                         read_corpus(data_dir() / "adi" / "corpus.jsonl.gz", limit=3))
    ingest = _run("ingest.bulk", str(corpus), "--bundle", str(tiny), "--index", "x", "--url",
                  ep.url, "--user", ep.user, "--ca-certs", str(ep.ca), "--state-dir",
                  str(tmp_path / "s"), env=_env(LR_OPENSEARCH_PASSWORD=wrong))
    out = _clean(ingest, wrong, ep.password)
    assert ingest.returncode == 1 and "HTTP 401" in out and ep.url in out
    assert "Traceback" not in out
