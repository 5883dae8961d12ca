"""Starting, stopping and inspecting a local OpenSearch node process.

The node runs in the background in its own session; its pid and settings are kept in
``<node_dir>/node.json``. OpenSearch refuses to run as root: when we are root, the node
is started inside a new user namespace (``unshare --user``) where it sees itself as
``nobody`` while keeping access to the (root-owned) files.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from lr_opensearch.errors import NodeError
from lr_opensearch.node.config import NodeConfig, write_node_files
from lr_opensearch.node.install import Installation

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class NodeStatus:
    """What is known about a node directory's process and cluster."""

    node_dir: Path
    running: bool
    pid: int | None = None
    url: str | None = None
    health: str | None = None  # green / yellow / red, None if the REST port does not answer
    version: str | None = None
    plugins: tuple[str, ...] = ()
    state: dict = field(default_factory=dict)

    def describe(self) -> str:
        """One human-readable line."""
        if not self.running:
            return f"not running (node dir {self.node_dir})"
        plugins = ", ".join(self.plugins) or "none"
        return (f"running: pid {self.pid}, {self.url}, cluster {self.health or 'not answering'}, "
                f"OpenSearch {self.version or '?'}, plugins: {plugins}, node dir {self.node_dir}")


def _get_json(url: str, timeout: float = 5.0) -> dict | list | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback URL)
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def pid_alive(pid: int) -> bool:
    """True if ``pid`` is a live (non-zombie) OpenSearch process; reaps it if it is our child.

    During startup the pid is still the ``bin/opensearch`` script (it execs the JVM), so
    the check accepts any command line that mentions opensearch.
    """
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X") and b"opensearch" in cmdline


def read_state(node_dir: Path) -> dict:
    path = node_dir / "node.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except ValueError as exc:
        raise NodeError(f"{path} is not valid JSON ({exc}); delete it if no node runs there") from exc


def node_status(node_dir: Path | str) -> NodeStatus:
    """Report on the node started from ``node_dir`` (process, health, version, plugins)."""
    node_dir = Path(node_dir).expanduser().absolute()
    state = read_state(node_dir)
    pid = state.get("pid")
    if not pid or not pid_alive(int(pid)):
        return NodeStatus(node_dir, running=False, state=state)
    url = state["url"]
    health = _get_json(f"{url}/_cluster/health")
    root = _get_json(url)
    plugins = _get_json(f"{url}/_cat/plugins?format=json") or []
    return NodeStatus(
        node_dir, running=True, pid=int(pid), url=url,
        health=health.get("status") if isinstance(health, dict) else None,
        version=root["version"]["number"] if isinstance(root, dict) else None,
        plugins=tuple(sorted({p["component"] for p in plugins if isinstance(p, dict)})),
        state=state)


def _check_port_free(host: str, port: int, what: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise NodeError(f"{what} port {host}:{port} is already in use by another process "
                            f"({exc.strerror}); choose another one (--http-port / "
                            "--transport-port) or stop what listens there") from exc


def _launcher(home: Path) -> list[str]:
    cmd = [str(home / "bin" / "opensearch")]
    if os.geteuid() != 0:
        return cmd
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "--user", "true"],
                                         capture_output=True).returncode != 0:
        raise NodeError("OpenSearch refuses to run as root, and `unshare --user` (used to run "
                        "it unprivileged) is unavailable here; run lr as a normal user")
    return [unshare, "--user", *cmd]


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 200_000))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def server_log(config_or_dir: NodeConfig | Path) -> Path:
    """Path of the node's main server log."""
    if isinstance(config_or_dir, NodeConfig):
        return config_or_dir.log_dir / f"{config_or_dir.cluster_name}.log"
    state = read_state(config_or_dir)
    return Path(config_or_dir) / "logs" / f"{state.get('cluster_name', 'lr-opensearch')}.log"


def start_node(config: NodeConfig, installation: Installation, *, wait: bool = True,
               timeout: float = 180.0, wait_for: str = "green") -> NodeStatus:
    """Start a node in the background (or report the one already running from ``node_dir``).

    Args:
        config: the node's settings.
        installation: the OpenSearch home and JDK to run.
        wait: block until the cluster reaches ``wait_for`` health.
        timeout: seconds to wait before giving up (the node is then stopped).
        wait_for: "green" or "yellow".

    Raises:
        NodeError: a port is taken, the process dies, or the cluster is not healthy in time;
            the message carries the end of the node's log.
    """
    current = node_status(config.node_dir)
    if current.running:
        logger.info("node already running from %s (pid %s, %s)", config.node_dir, current.pid,
                    current.url)
        if wait:
            wait_for_health(current.url or config.url, wait_for, timeout, pid=current.pid,
                            config=config)
        return node_status(config.node_dir)
    _check_port_free(config.host, config.http_port, "HTTP")
    _check_port_free(config.host, config.transport, "transport")
    write_node_files(config, installation.home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENSEARCH_")}
    env.update(OPENSEARCH_JAVA_HOME=str(installation.java.path),
               OPENSEARCH_PATH_CONF=str(config.config_dir),
               OPENSEARCH_TMPDIR=str(config.node_dir / "tmp"))
    console = config.log_dir / "console.log"
    with open(console, "ab") as out:
        proc = subprocess.Popen(_launcher(installation.home), cwd=config.node_dir, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    state = {"pid": proc.pid, "url": config.url, "http_port": config.http_port,
             "transport_port": config.transport, "cluster_name": config.cluster_name,
             "node_name": config.name, "heap": config.heap, "home": str(installation.home),
             "java": str(installation.java.path), "version": installation.version,
             "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    config.state_file.write_text(json.dumps(state, indent=2))
    logger.info("starting OpenSearch %s (pid %d) on %s, node dir %s, Java %d (%s)",
                installation.version, proc.pid, config.url, config.node_dir,
                installation.java.major, installation.java.path)
    if wait:
        try:
            wait_for_health(config.url, wait_for, timeout, pid=proc.pid, config=config)
        except NodeError:
            stop_node(config.node_dir, timeout=30)
            raise
    return node_status(config.node_dir)


def wait_for_health(url: str, status: str, timeout: float, *, pid: int | None = None,
                    config: NodeConfig | None = None) -> None:
    """Poll ``_cluster/health`` until ``status`` (or better) is reached.

    Raises:
        NodeError: the process exits or ``timeout`` passes; carries the log tail.
    """
    deadline = time.monotonic() + timeout
    query = f"{url}/_cluster/health?wait_for_status={status}&timeout=2s"
    while True:
        health = _get_json(query, timeout=10)
        if isinstance(health, dict) and not health.get("timed_out", True):
            return
        where = config.node_dir if config else url
        if pid is not None and not pid_alive(pid):
            logs = tail(config.log_dir / "console.log") if config else ""
            raise NodeError(f"the OpenSearch process (pid {pid}) of {where} exited during "
                            f"startup. End of its output:\n{logs}")
        if time.monotonic() > deadline:
            got = health.get("status") if isinstance(health, dict) else "no answer"
            logs = tail(server_log(config)) if config else ""
            raise NodeError(f"node {url} ({where}) not {status} after {timeout:.0f} s "
                            f"(health: {got}). End of its log:\n{logs}")
        time.sleep(1.0)


def stop_node(node_dir: Path | str, *, timeout: float = 60.0) -> bool:
    """Stop the node of ``node_dir``: SIGTERM, wait, SIGKILL after ``timeout``.

    Returns:
        True if a running node was stopped, False if none was running.
    """
    node_dir = Path(node_dir).expanduser().absolute()
    state = read_state(node_dir)
    pid = int(state["pid"]) if state.get("pid") else None
    if pid is None or not pid_alive(pid):
        (node_dir / "node.json").unlink(missing_ok=True)
        return False
    logger.info("stopping OpenSearch pid %d (%s)", pid, node_dir)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            logger.warning("pid %d still alive after %.0f s; sending SIGKILL", pid, timeout)
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 30
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            break
        time.sleep(0.2)
    (node_dir / "node.json").unlink(missing_ok=True)
    return True
