"""Starting, stopping and inspecting a local OpenSearch (or Elasticsearch) node process.

The node runs in the background in its own session (process group); its pid, engine and
settings are kept in ``<node_dir>/node.json``. Both engines refuse to run as root: when we
are root, the node is started inside a new user namespace (``unshare``, with the engine's
arguments, :attr:`Engine.root_unshare`) where it sees itself as an ordinary user while
keeping access to the (root-owned) files. Elasticsearch's launcher starts the server as a
child JVM, so stopping signals the whole process group.
"""

from __future__ import annotations

import dataclasses
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

from lr_opensearch.errors import ConfigError, NodeError
from lr_opensearch.node.config import NodeConfig, write_node_files
from lr_opensearch.node.install import Installation
from lr_opensearch.node.ml import ML_SETTINGS, stage_ml_cache
from lr_opensearch.node.products import DEFAULT_ENGINE, Engine, get_engine

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
    engine: str = DEFAULT_ENGINE

    def describe(self) -> str:
        """One human-readable line."""
        if not self.running:
            return f"not running (node dir {self.node_dir})"
        plugins = ", ".join(self.plugins) or "none"
        return (f"running: pid {self.pid}, {self.url}, cluster {self.health or 'not answering'}, "
                f"{get_engine(self.engine).display} {self.version or '?'}, plugins: {plugins}, "
                f"node dir {self.node_dir}")


def _get_json(url: str, timeout: float = 5.0) -> dict | list | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (loopback URL)
            return json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # a health wait that timed out answers 408 + health
        try:
            return json.loads(exc.read())
        except (OSError, ValueError):
            return None
    except (urllib.error.URLError, OSError, ValueError):
        return None


def pid_alive(pid: int, engine: str | None = None) -> bool:
    """True if ``pid`` is a live (non-zombie) node process; reaps it if it is our child.

    During startup the pid is still the ``bin/<engine>`` script (it execs the JVM), so
    the check accepts any command line that mentions the engine's name, and an empty one
    (read in the middle of the exec).
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
    if state in ("Z", "X"):
        return False
    # While the launcher script execs the JVM, /proc/<pid>/cmdline reads empty for a moment:
    # that is the same process, alive, not a reused pid.
    return not cmdline or get_engine(engine).name.encode() in cmdline


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
    engine = get_engine(state.get("engine")).name
    if not pid or not pid_alive(int(pid), engine):
        return NodeStatus(node_dir, running=False, state=state, engine=engine)
    url = state["url"]
    health = _get_json(f"{url}/_cluster/health")
    plugins = _get_json(f"{url}/_cat/plugins?format=json") or []
    return NodeStatus(
        node_dir, running=True, pid=int(pid), url=url,
        health=health.get("status") if isinstance(health, dict) else None,
        version=_node_version(url),
        plugins=tuple(sorted({p["component"] for p in plugins if isinstance(p, dict)})),
        state=state, engine=engine)


def _node_version(url: str) -> str | None:
    """The server version: ``GET /``, or the nodes info where ``/`` has no handler (the
    Elasticsearch integ-test-zip answers 405 there)."""
    root = _get_json(url)
    if isinstance(root, dict) and isinstance(root.get("version"), dict):
        return root["version"].get("number")
    nodes = _get_json(f"{url}/_nodes/_local?filter_path=nodes.*.version")
    if isinstance(nodes, dict) and nodes.get("nodes"):
        return next(iter(nodes["nodes"].values())).get("version")
    return None


def _check_port_free(host: str, port: int, what: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise NodeError(f"{what} port {host}:{port} is already in use by another process "
                            f"({exc.strerror}); choose another one (--http-port / "
                            "--transport-port) or stop what listens there") from exc


def _launcher(home: Path, engine: Engine) -> list[str]:
    cmd = [str(home / engine.launcher)]
    if os.geteuid() != 0:
        return cmd
    unshare = shutil.which("unshare")
    args = list(engine.root_unshare)
    if unshare is None or subprocess.run([unshare, *args, "true"],
                                         capture_output=True).returncode != 0:
        raise NodeError(f"{engine.display} refuses to run as root, and `unshare "
                        f"{' '.join(args)}` (used to run it unprivileged) is unavailable here; "
                        "run lr as a normal user")
    return [unshare, *args, *cmd]


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
        config: the node's settings (``config.engine`` must be the installation's).
        installation: the engine's home and the JDK to run.
        wait: block until the cluster reaches ``wait_for`` health.
        timeout: seconds to wait before giving up (a node that never answered is then
            stopped; one that answers is left running, serving what it can).
        wait_for: "green" or "yellow" (green of a lone node whose indices ask for replicas
            it can never hold: yellow, said in a warning).

    Raises:
        ConfigError: the installation is of another engine than ``config.engine``.
        NodeError: a port is taken, the process dies, or the cluster is not healthy in time;
            the message carries the end of the node's log.
    """
    engine = config.kind
    if installation.engine.name != engine.name:
        raise ConfigError(f"node config is for {engine.display} but the installation "
                          f"{installation.home} is {installation.engine.display}; install "
                          f"with engine={engine.name!r}")
    current = node_status(config.node_dir)
    if current.running and current.engine != engine.name:
        raise ConfigError(f"{config.node_dir} runs an {get_engine(current.engine).display} node "
                          f"(pid {current.pid}); stop it or choose another --data-dir")
    if current.running:
        logger.info("node already running from %s (pid %s, %s)", config.node_dir, current.pid,
                    current.url)
        if wait:
            wait_for_health(current.url or config.url, wait_for, timeout, pid=current.pid,
                            config=config)
        return node_status(config.node_dir)
    _check_port_free(config.host, config.http_port, "HTTP")
    _check_port_free(config.host, config.transport, "transport")
    if installation.ml:  # ml-commons: its settings, and libtorch where DJL looks for it
        config = dataclasses.replace(config, settings={**ML_SETTINGS, **config.settings})
        stage_ml_cache(installation.home, config.node_dir / "data")
    write_node_files(config, installation.home)
    env = {k: v for k, v in os.environ.items() if not k.startswith(engine.env_prefix)}
    env.update(engine.launch_env(installation.java.path, config.config_dir,
                                 config.node_dir / "tmp"))
    console = config.log_dir / "console.log"
    with open(console, "ab") as out:
        proc = subprocess.Popen(_launcher(installation.home, engine), cwd=config.node_dir,
                                env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    state = {"pid": proc.pid, "engine": engine.name, "url": config.url,
             "http_port": config.http_port,
             "transport_port": config.transport, "cluster_name": config.cluster_name,
             "node_name": config.name, "heap": config.heap, "home": str(installation.home),
             "java": str(installation.java.path), "version": installation.version,
             "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    config.state_file.write_text(json.dumps(state, indent=2))
    logger.info("starting %s %s (pid %d) on %s, node dir %s, Java %d (%s)", engine.display,
                installation.version, proc.pid, config.url, config.node_dir,
                installation.java.major, installation.java.path)
    if wait:
        try:
            wait_for_health(config.url, wait_for, timeout, pid=proc.pid, config=config)
        except NodeError as exc:
            health = _get_json(f"{config.url}/_cluster/health")
            if isinstance(health, dict) and health.get("status"):  # it serves: keep it
                raise NodeError(f"{exc}\nThe node answers (health {health['status']}), so it "
                                f"is left running; `lr node stop --data-dir {config.node_dir}` "
                                "stops it.") from None
            stop_node(config.node_dir, timeout=30)
            raise
    return node_status(config.node_dir)


def wait_for_health(url: str, status: str, timeout: float, *, pid: int | None = None,
                    config: NodeConfig | None = None, nodes: int | None = None) -> None:
    """Poll ``_cluster/health`` until ``status`` (or better) is reached (and, with
    ``nodes``, that many nodes have joined).

    Raises:
        NodeError: the process exits or ``timeout`` passes; carries the log tail.
    """
    deadline = time.monotonic() + timeout
    query = f"{url}/_cluster/health?wait_for_status={status}&timeout=2s"
    if nodes is not None:
        query += f"&wait_for_nodes={int(nodes)}"
    while True:
        health = _get_json(query, timeout=10)
        if isinstance(health, dict) and not health.get("timed_out", True):
            return
        if (isinstance(health, dict) and nodes is None and not (config and config.seed_ports)
                and _lone_node_yellow(url, status, health)):
            return
        where = config.node_dir if config else url
        engine = config.kind if config else get_engine(None)
        if pid is not None and not pid_alive(pid, engine.name):
            logs = tail(config.log_dir / "console.log") if config else ""
            raise NodeError(f"the {engine.display} process (pid {pid}) of {where} exited "
                            f"during startup. End of its output:\n{logs}")
        if time.monotonic() > deadline:
            got = health.get("status") if isinstance(health, dict) else "no answer"
            logs = tail(server_log(config)) if config else ""
            raise NodeError(f"node {url} ({where}) not {status} after {timeout:.0f} s "
                            f"(health: {got}). End of its log:\n{logs}")
        time.sleep(1.0)


def _lone_node_yellow(url: str, status: str, health: dict) -> bool:
    """Whether green was asked of a lone node that is yellow: every primary is served and
    the missing replicas can never be assigned (a replica never shares its primary's
    node), so it is as ready as it will get; says which indices ask for replicas."""
    if status != "green" or health.get("status") != "yellow" or \
            health.get("number_of_nodes") != 1:
        return False
    rows = _get_json(f"{url}/_cat/indices?health=yellow&h=index,rep&format=json")
    asked = ", ".join(f"{r.get('index')} ({r.get('rep')} replica(s))"
                      for r in (rows if isinstance(rows, list) else [])[:5])
    logger.warning("the node is yellow, not green, and ready: a single node cannot hold the "
                   "replicas that %s ask(s) for; to make it green: PUT <index>/_settings "
                   '{"index": {"number_of_replicas": 0}}', asked or "some index")
    return True


def _group_alive(pgid: int) -> bool:
    """True while a live (non-zombie) process of process group ``pgid`` remains."""
    try:
        os.waitpid(pgid, os.WNOHANG)  # reap the leader if it is our child
    except ChildProcessError:
        pass
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def stop_node(node_dir: Path | str, *, timeout: float = 60.0) -> bool:
    """Stop the node of ``node_dir``: SIGTERM, wait, SIGKILL after ``timeout``.

    The signals go to the node's process group (its session, started by
    :func:`start_node`), so a launcher and the server JVM it spawned (Elasticsearch) stop
    together; it returns once no process of the group is left.

    Returns:
        True if a running node was stopped, False if none was running.
    """
    node_dir = Path(node_dir).expanduser().absolute()
    state = read_state(node_dir)
    pid = int(state["pid"]) if state.get("pid") else None
    engine = get_engine(state.get("engine"))
    if pid is None or not pid_alive(pid, engine.name):
        (node_dir / "node.json").unlink(missing_ok=True)
        return False
    logger.info("stopping %s pid %d (%s)", engine.display, pid, node_dir)
    try:
        group = os.getpgid(pid) == pid
    except ProcessLookupError:
        group = False

    def send(sig: int) -> None:
        try:
            os.killpg(pid, sig) if group else os.kill(pid, sig)
        except ProcessLookupError:
            pass

    def alive() -> bool:
        return _group_alive(pid) if group else pid_alive(pid, engine.name)

    send(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive():
        if time.monotonic() > deadline:
            logger.warning("pid %d still alive after %.0f s; sending SIGKILL", pid, timeout)
            send(signal.SIGKILL)
            deadline = time.monotonic() + 30
            while alive() and time.monotonic() < deadline:
                time.sleep(0.2)
            break
        time.sleep(0.2)
    (node_dir / "node.json").unlink(missing_ok=True)
    return True
