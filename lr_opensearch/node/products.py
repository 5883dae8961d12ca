"""The search engines the local node manager runs: OpenSearch (default) and Elasticsearch.

Both are started, configured, waited for and stopped by the same code
(:mod:`lr_opensearch.node.process`, :mod:`lr_opensearch.node.config`); an :class:`Engine`
holds only what differs between them: the lock files, the launcher and environment variable
names, the config file name, the multi-node bootstrap setting, a few defaults and how the
node is run unprivileged when ``lr`` runs as root.

An engine may come in several packaged versions, one lock file each
(:attr:`Engine.lock_files`): OpenSearch 3.6.0 (the default) and 2.19.1 (``lr node start
--version 2.19.1``). What differs between the versions of one engine (artifacts, modules
to assemble, the Java range) lives in its lock file and nowhere else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from lr_opensearch.errors import ConfigError

DEFAULT_ENGINE = "opensearch"


@dataclass(frozen=True)
class Engine:
    """What differs between the engines the node manager can run.

    Attributes:
        name: ``opensearch`` or ``elasticsearch`` (also the launcher ``bin/<name>``, the
            installation's directory prefix and the word looked for in the process's
            command line).
        display: the product name in messages.
        lock_files: packaged version -> its lock file's name (next to this module); the
            first is the default version.
        env_prefix: prefix of the launcher's environment variables (``<prefix>JAVA_HOME``,
            ``<prefix>PATH_CONF``, ``<prefix>TMPDIR``, ``<prefix>JAVA_OPTS``).
        config_file: the main settings file written into the node's ``config/``.
        config_files: files copied from the installation's ``config/`` at every start.
        initial_managers_setting: the multi-node bootstrap setting.
        default_http_port: REST port when none is given.
        default_heap: JVM heap when none is given.
        root_unshare: ``unshare`` arguments that run the node unprivileged when we are root.
        settings: engine-specific settings always written (before the user's own).
    """

    name: str
    display: str
    lock_files: Mapping[str, str]
    env_prefix: str
    config_file: str
    config_files: tuple[str, ...]
    initial_managers_setting: str
    default_http_port: int
    default_heap: str
    root_unshare: tuple[str, ...]
    settings: Mapping[str, object] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def default_version(self) -> str:
        """The version installed when none is asked for."""
        return next(iter(self.lock_files))

    @property
    def versions(self) -> tuple[str, ...]:
        """The packaged versions, the default first."""
        return tuple(self.lock_files)

    def version(self, asked: str | None) -> str:
        """The packaged version ``asked`` names: exact (``2.19.1``) or a unique prefix
        (``2.19``); None is the default version.

        Raises:
            ConfigError: no packaged version, or several, match.
        """
        if asked is None or not str(asked).strip():
            return self.default_version
        asked = str(asked).strip()
        if asked in self.lock_files:
            return asked
        found = [v for v in self.lock_files if v.startswith(asked + ".")]
        if len(found) != 1:
            raise ConfigError(f"{self.display} {asked} is not packaged; valid versions: "
                              f"{', '.join(self.versions)}")
        return found[0]

    def lock_path_for(self, version: str | None = None) -> Path:
        """The packaged lock file of ``version`` (None: the default version)."""
        return Path(__file__).with_name(self.lock_files[self.version(version)])

    def node_dir_prefix(self, version: str | None = None) -> str:
        """Prefix of this engine version's default node dirs under ``<cache>/nodes/``:
        none for OpenSearch's default version, ``<engine>-`` for another engine's default
        version, ``<engine>-<version>-`` for any other version (their data differ)."""
        version = self.version(version)
        if version != self.default_version:
            return f"{self.name}-{version}-"
        return "" if self.name == DEFAULT_ENGINE else f"{self.name}-"

    @property
    def lock_path(self) -> Path:
        """The packaged lock file of the default version."""
        return self.lock_path_for(None)

    @property
    def launcher(self) -> str:
        """The start script, relative to the installation's home."""
        return f"bin/{self.name}"

    @property
    def plugin_tool(self) -> str:
        """The plugin installer, relative to the installation's home."""
        return f"bin/{self.name}-plugin"

    def launch_env(self, java_home: Path, conf_dir: Path, tmp_dir: Path) -> dict[str, str]:
        """The launcher's environment variables naming the JDK, config and temp dirs."""
        return {f"{self.env_prefix}JAVA_HOME": str(java_home),
                f"{self.env_prefix}PATH_CONF": str(conf_dir),
                f"{self.env_prefix}TMPDIR": str(tmp_dir)}


OPENSEARCH = Engine(
    name="opensearch", display="OpenSearch",
    lock_files=MappingProxyType({"3.6.0": "opensearch.lock.json",
                                 "2.19.1": "opensearch-2.19.lock.json"}),
    env_prefix="OPENSEARCH_", config_file="opensearch.yml",
    config_files=("jvm.options", "log4j2.properties"),
    initial_managers_setting="cluster.initial_cluster_manager_nodes",
    default_http_port=9200, default_heap="1g",
    # OpenSearch only refuses uid 0: in a new user namespace it runs as `nobody`.
    root_unshare=("--user",),
)

ELASTICSEARCH = Engine(
    name="elasticsearch", display="Elasticsearch",
    lock_files=MappingProxyType({"9.1.0": "elasticsearch.lock.json"}),
    env_prefix="ES_", config_file="elasticsearch.yml",
    # The security module reads its files even when disabled; they are empty/default here.
    config_files=("jvm.options", "log4j2.properties", "roles.yml", "role_mapping.yml",
                  "users", "users_roles"),
    initial_managers_setting="cluster.initial_master_nodes",
    default_http_port=9250, default_heap="512m",
    # Elasticsearch 9's entitlement agent cannot attach when running as the overflow uid
    # (`nobody`) of a plain `unshare --user`; mapping root to an ordinary uid works.
    root_unshare=("--map-user=1000", "--map-group=1000"),
    # The integ-test-zip carries x-pack-security: plain http without auth (loopback only).
    settings=MappingProxyType({"xpack.security.enabled": False}),
)

ENGINES: Mapping[str, Engine] = MappingProxyType(
    {e.name: e for e in (OPENSEARCH, ELASTICSEARCH)})


def get_engine(name: str | Engine | None) -> Engine:
    """The :class:`Engine` called ``name`` (None means the default, OpenSearch).

    Raises:
        ConfigError: an unknown engine name.
    """
    if isinstance(name, Engine):
        return name
    key = (name or DEFAULT_ENGINE).strip().lower()
    if key not in ENGINES:
        raise ConfigError(f"unknown engine {name!r}; valid options: {', '.join(ENGINES)}")
    return ENGINES[key]
