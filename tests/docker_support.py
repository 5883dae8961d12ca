"""The container engine, images and compose calls of the Docker tests (``pytest -m docker``).

Import from tests as ``from docker_support import ...`` (pytest puts tests/ on sys.path).
The engine is the one the ``docker`` CLI reaches; where none answers but scripts/setup.sh
left podman's Docker API running (``/run/podman/podman.sock``), that one. No engine, no
compose or a failed image build is a test failure with the reason, never a skip.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

logger = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker" / "docker-compose.yml"
PODMAN_SOCKET = Path("/run/podman/podman.sock")
SETUP_HINT = "run `bash scripts/setup.sh` (it makes a container engine available)"


def _answers(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def use_engine() -> str:
    """Point this process's ``docker`` calls at a running engine (sets DOCKER_HOST for
    podman's socket when needed); returns the server version. Fails the test otherwise."""
    if shutil.which("docker") is None:
        pytest.fail(f"the Docker tests need the docker CLI; {SETUP_HINT}", pytrace=False)
    first = _answers(dict(os.environ))
    if first.returncode == 0:
        return first.stdout.strip()
    if "DOCKER_HOST" not in os.environ and PODMAN_SOCKET.is_socket():
        env = {**os.environ, "DOCKER_HOST": f"unix://{PODMAN_SOCKET}"}
        second = _answers(env)
        if second.returncode == 0:
            os.environ["DOCKER_HOST"] = env["DOCKER_HOST"]
            return second.stdout.strip()
    pytest.fail(f"no container engine answers `docker info` "
                f"(DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unset')}, {PODMAN_SOCKET} "
                f"{'present' if PODMAN_SOCKET.exists() else 'absent'}): "
                f"{first.stderr.strip()[-400:]}\n{SETUP_HINT}", pytrace=False)


@functools.cache
def ensure_images() -> None:
    """Engine, compose plugin and the three images (docker/build.sh: a cached rebuild takes
    seconds and picks up source edits); once per session once it has succeeded."""
    version = use_engine()
    compose = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True,
                             check=False, timeout=60)
    if compose.returncode != 0:
        pytest.fail(f"`docker compose` is missing ({compose.stderr.strip()[-300:]}); "
                    f"{SETUP_HINT}", pytrace=False)
    started = time.monotonic()
    build = subprocess.run(["bash", str(REPO / "docker" / "build.sh")], cwd=REPO,
                           capture_output=True, text=True, check=False, timeout=3600)
    if build.returncode != 0:
        pytest.fail(f"docker/build.sh failed (exit {build.returncode}):\n"
                    f"{(build.stdout + build.stderr)[-3000:]}", pytrace=False)
    logger.info("engine %s; images ready in %.0f s:\n%s", version, time.monotonic() - started,
                build.stdout.strip())


def compose(project: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``docker compose -f docker/docker-compose.yml -p PROJECT ARGS`` (not checked)."""
    return subprocess.run(["docker", "compose", "-f", str(COMPOSE_FILE), "-p", project, *args],
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, check=False)


def leftovers(project: str) -> dict[str, list[str]]:
    """Containers, volumes and networks that still carry PROJECT's compose label."""
    label = f"label=com.docker.compose.project={project}"
    found = {}
    for kind, cmd in (("containers", ["ps", "-a", "-q"]), ("volumes", ["volume", "ls", "-q"]),
                      ("networks", ["network", "ls", "-q"])):
        out = subprocess.run(["docker", *cmd, "--filter", label], capture_output=True,
                             text=True, timeout=60, check=True)
        found[kind] = out.stdout.split()
    return found
