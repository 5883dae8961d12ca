"""The default test run keeps its local node when a Docker engine answers: Docker is opt-in
(``LR_TEST_BACKEND=docker``, or the ``docker``-marked tests)."""

from __future__ import annotations

import os
from pathlib import Path

import conftest
import pytest


@pytest.fixture
def answering_docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `docker` first on PATH whose every command (``docker info`` too) succeeds."""
    fake = tmp_path / "docker"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("LR_TEST_OPENSEARCH_URL", raising=False)
    monkeypatch.delenv("LR_TEST_BACKEND", raising=False)


def test_an_answering_docker_engine_does_not_change_the_backend(answering_docker: None) -> None:
    assert conftest._backend() == "local"


def test_docker_is_chosen_only_explicitly(answering_docker: None,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LR_TEST_BACKEND", "docker")
    assert conftest._backend() == "docker"
    monkeypatch.setenv("LR_TEST_OPENSEARCH_URL", "http://127.0.0.1:9")
    assert conftest._backend() == "external"


def test_an_unknown_backend_fails_with_the_choices(answering_docker: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LR_TEST_BACKEND", "dokcer")
    with pytest.raises(pytest.fail.Exception, match="'local' .* or 'docker'"):
        conftest._backend()
