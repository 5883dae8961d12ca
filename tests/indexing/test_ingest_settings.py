"""The index settings around bulk loads, against a real node: whatever runs overlap, fail,
are interrupted or killed, the settings found before the first load come back; and bad
options fail before anything changes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from ingest_support import (
    REPO,
    build_tiny_bundle,
    data_dir,
    index_ids,
    ingest_cli,
    ingest_config,
    read_corpus,
    wait_for_checkpoint,
    write_jsonl,
)

from lr_opensearch.bundle import load_bundle
from lr_opensearch.engine.opensearch import OpenSearchAdapter
from lr_opensearch.indexing.run import run

pytestmark = pytest.mark.node

USER_SETTINGS = {"refresh_interval": "7s", "number_of_replicas": "1"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_bundle(tmp_path_factory.mktemp("settings_bundle"))


def encoder_of(tiny: Path) -> Any:
    from lr_opensearch.model import DocEncoder

    return DocEncoder.from_bundle(load_bundle(tiny), device="cpu", batch_size=16)


def user_index(os_client: Any, index: str, tiny: Path) -> None:
    """The index as a user left it: created for the bundle, with their own settings."""
    OpenSearchAdapter(os_client).create_index(index, load_bundle(tiny))
    os_client.indices.put_settings(index=index, body={"index": USER_SETTINGS})


def settings_of(os_client: Any, index: str) -> dict[str, Any]:
    s = os_client.indices.get_settings(index=index)[index]["settings"]["index"]
    return {k: s.get(k) for k in USER_SETTINGS}


def meta_of(os_client: Any, index: str) -> dict[str, Any]:
    return dict(os_client.indices.get_mapping(index=index)[index]["mappings"].get("_meta", {}))


def corpora(tmp_path: Path) -> tuple[Path, Path, set[str]]:
    docs = read_corpus(data_dir() / "adi" / "corpus.jsonl.gz")
    a = write_jsonl(tmp_path / "a.jsonl", docs[:40])
    b = write_jsonl(tmp_path / "b.jsonl", docs[40:])
    return a, b, {d["_id"] for d in docs}


class GatedClient:
    """The real client; ``bulk`` waits for ``gate`` and says when it got there."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.reached = threading.Event()
        self.gate = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def bulk(self, *args: Any, **kwargs: Any) -> Any:
        self.reached.set()
        assert self.gate.wait(120), "the test never opened the gate"
        return self._real.bulk(*args, **kwargs)


def test_overlapping_runs_through_two_files_restore_the_original_settings(
        tiny: Path, os_client: Any, opensearch_url: str, index_name: str, tmp_path: Path) -> None:
    user_index(os_client, index_name, tiny)
    a, b, ids = corpora(tmp_path)
    clients = {"a": GatedClient(os_client), "b": GatedClient(os_client)}
    errors: list[BaseException] = []

    def ingest(name: str, corpus: Path) -> None:
        try:
            run(ingest_config(corpus, tiny, index_name, opensearch_url, tmp_path / "state"),
                client=clients[name], encoder=encoder_of(tiny))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = {n: threading.Thread(target=ingest, args=(n, c)) for n, c in (("a", a), ("b", b))}
    threads["a"].start()
    assert clients["a"].reached.wait(120)  # a is loading: refresh off
    threads["b"].start()
    assert clients["b"].reached.wait(120)  # b started while a was loading
    clients["a"].gate.set()
    threads["a"].join(120)
    assert not errors, errors
    clients["b"].gate.set()
    threads["b"].join(120)
    assert not errors, errors
    assert settings_of(os_client, index_name) == USER_SETTINGS
    assert "lightretriever_load" not in meta_of(os_client, index_name)
    assert "lightretriever" in meta_of(os_client, index_name)  # the bundle check still works
    found = index_ids(os_client, index_name)
    assert len(found) == len(set(found)) and set(found) == ids


class FailingEncoder:
    """A real encoder that raises on its third batch (a crash in the middle of a load)."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def encode(self, texts: Any) -> Any:
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("injected crash in the encoder")
        return self._real.encode(texts)


def test_a_run_that_dies_on_an_exception_gives_the_settings_back(
        tiny: Path, os_client: Any, opensearch_url: str, index_name: str, tmp_path: Path) -> None:
    user_index(os_client, index_name, tiny)
    a, _, _ = corpora(tmp_path)
    config = ingest_config(a, tiny, index_name, opensearch_url, tmp_path / "state", chunk_size=8,
                           batch_size=8, sort_window=8)
    with pytest.raises(Exception, match="injected crash"):
        run(config, encoder=FailingEncoder(encoder_of(tiny)))
    assert settings_of(os_client, index_name) == USER_SETTINGS
    summary = run(config)  # the rerun resumes and completes
    assert summary.complete and summary.counts.indexed == 40
    assert settings_of(os_client, index_name) == USER_SETTINGS


def _start_cli(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "ingest.bulk", *args], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})


def _cli_args(corpus: Path, tiny: Path, index: str, url: str, state: Path) -> list[str]:
    return [str(corpus), "--bundle", str(tiny), "--index", index, "--url", url, "--state-dir",
            str(state), "--chunk-size", "4", "--batch-size", "4", "--sort-window", "4",
            "--no-progress"]


def test_sigterm_gives_the_settings_back_and_the_rerun_completes(
        tiny: Path, os_client: Any, opensearch_url: str, index_name: str, tmp_path: Path) -> None:
    user_index(os_client, index_name, tiny)
    a, _, _ = corpora(tmp_path)
    args = _cli_args(a, tiny, index_name, opensearch_url, tmp_path / "state")
    proc = _start_cli(args)
    wait_for_checkpoint(proc, tmp_path / "state", 4)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err.decode()
    assert b"Traceback" not in err and b"SIGTERM" in err and b"rerun" in err
    assert settings_of(os_client, index_name) == USER_SETTINGS
    again = ingest_cli(args)
    assert again.returncode == 0, again.stderr.decode()
    assert len(index_ids(os_client, index_name)) == 40
    assert settings_of(os_client, index_name) == USER_SETTINGS


def test_a_killed_run_does_not_turn_load_settings_into_the_original(
        tiny: Path, os_client: Any, opensearch_url: str, index_name: str, tmp_path: Path) -> None:
    user_index(os_client, index_name, tiny)
    a, b, ids = corpora(tmp_path)
    args = _cli_args(a, tiny, index_name, opensearch_url, tmp_path / "state")
    proc = _start_cli(args)
    wait_for_checkpoint(proc, tmp_path / "state", 4)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert settings_of(os_client, index_name)["refresh_interval"] == "-1"  # left mid-load
    # another corpus into the same index, after the kill: it must not take -1 for the original
    run(ingest_config(b, tiny, index_name, opensearch_url, tmp_path / "state"))
    assert settings_of(os_client, index_name) == USER_SETTINGS
    again = ingest_cli(args)  # the killed run's rerun resumes and ends with the same settings
    assert again.returncode == 0, again.stderr.decode()
    assert settings_of(os_client, index_name) == USER_SETTINGS
    found = index_ids(os_client, index_name)
    assert len(found) == len(set(found)) and set(found) == ids


@pytest.mark.parametrize(("option", "says"), [
    (["--refresh-interval", "banana"], b"banana"),
    (["--replicas", "-1"], b"--replicas"),
    (["--device", "cuda:99"], b"cuda:99"),  # a GPU that no machine here has
])
def test_bad_options_fail_before_anything_changes(
        tiny: Path, os_client: Any, opensearch_url: str, index_name: str, tmp_path: Path,
        option: list[str], says: bytes) -> None:
    user_index(os_client, index_name, tiny)
    a, _, _ = corpora(tmp_path)
    proc = ingest_cli([*_cli_args(a, tiny, index_name, opensearch_url, tmp_path / "state"),
                       *option])
    assert proc.returncode == 1, proc.stderr.decode()
    assert b"Traceback" not in proc.stderr and says in proc.stderr
    assert len(proc.stderr.decode().strip().splitlines()) == 1, proc.stderr.decode()
    os_client.indices.refresh(index=index_name)
    assert os_client.count(index=index_name)["count"] == 0
    assert settings_of(os_client, index_name) == USER_SETTINGS
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").glob("*.json"))
