"""Connecting to a cluster (URL, TLS, basic auth; OpenSearch or Elasticsearch, detected)
and detecting what it can do.

Environment defaults, used when an argument is not given:

- ``LR_OPENSEARCH_URL`` (default ``http://127.0.0.1:9200``); ``user:password@`` in the URL
  is taken as basic auth,
- ``LR_OPENSEARCH_USER`` / ``LR_OPENSEARCH_PASSWORD``: basic auth,
- ``LR_OPENSEARCH_CA_CERTS``: CA bundle (PEM) to verify an ``https`` cluster,
- ``LR_OPENSEARCH_VERIFY_CERTS``: ``0``/``false`` to skip certificate verification
  (self-signed demo clusters only).
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from dataclasses import dataclass, field
from typing import Any

from lr_opensearch.errors import ConfigError, EngineError
from lr_opensearch.options import (
    ENGINE_CHOICES,
    KNN_DEFAULT_EF_SEARCH,
    KNN_EF_SEARCH_DEFAULT_FROM,
    WEIGHTED_RRF_FROM,
    choice,
)

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:9200"
ENGINE_NAMES = {"opensearch": "OpenSearch", "elasticsearch": "Elasticsearch"}
_FALSE = {"0", "false", "no", "off"}


def redact_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` replaced by ``***``: the one form
    in which any message, log line or printed command shows a cluster URL. Works on any text,
    however malformed (everything up to the last ``@`` is taken as user information, so a
    password holding ``/`` or ``@`` is hidden too)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    userinfo, at, host = rest.rpartition("@")
    if not at:
        return url
    user, colon, _password = userinfo.partition(":")
    return f"{scheme}{sep}{user}{':***' if colon else ''}@{host}"


def _split_url(url: str) -> tuple[str, str | None, str | None]:
    """Remove ``user:password@`` from a URL; return (clean URL, user, password).

    Raises:
        ConfigError: not http(s)://host[:port] (a bad port, an unclosed IPv6 bracket), in
            one line that shows the URL without its password.
    """
    shown = redact_url(url)
    form = "it must look like http(s)://host:port"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:  # a port that is no number or out of range, "http://[::1"
        raise ConfigError(f"cluster URL {shown!r} is malformed ({exc}); {form}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"cluster URL {shown!r}: {form}")
    if port == 0:
        raise ConfigError(f"cluster URL {shown!r}: port 0 is no TCP port (1-65535); {form}")
    if parts.username is None:
        return url, None, None
    netloc = parts.hostname if port is None else f"{parts.hostname}:{port}"
    if ":" in parts.hostname:  # IPv6
        netloc = f"[{parts.hostname}]" if port is None else f"[{parts.hostname}]:{port}"
    clean = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return clean, user, password


@dataclass(frozen=True)
class Connection:
    """Resolved connection settings (arguments first, then the LR_OPENSEARCH_* environment).

    The password is kept out of ``repr`` so a logged or printed Connection never shows it.
    """

    url: str
    user: str | None
    password: str | None = field(repr=False)
    ca_certs: str | None
    verify_certs: bool
    timeout: float


def resolve_connection(url: str | None = None, *, user: str | None = None,
                       password: str | None = None, ca_certs: str | None = None,
                       verify_certs: bool | None = True, timeout: float = 30) -> Connection:
    """The one reading of connection arguments and their environment defaults.

    Raises:
        ConfigError: malformed URL, or a password without a user.
    """
    url = url or os.environ.get("LR_OPENSEARCH_URL") or DEFAULT_URL
    url, url_user, url_password = _split_url(url)
    user = user or url_user or os.environ.get("LR_OPENSEARCH_USER") or None
    password = password or url_password or os.environ.get("LR_OPENSEARCH_PASSWORD") or None
    ca_certs = ca_certs or os.environ.get("LR_OPENSEARCH_CA_CERTS") or None
    env_verify = os.environ.get("LR_OPENSEARCH_VERIFY_CERTS")
    if verify_certs is None or (verify_certs and env_verify is not None):
        verify_certs = (env_verify or "true").strip().lower() not in _FALSE
    if password and not user:
        raise ConfigError("a cluster password was given without a user "
                          "(set LR_OPENSEARCH_USER or pass --user)")
    if url.startswith("https://") and not verify_certs:
        logger.warning("TLS certificate verification is OFF for %s", url)
    return Connection(url, user, password, ca_certs, bool(verify_certs), float(timeout))


def make_client(url: str | None = None, *, user: str | None = None,
                password: str | None = None, ca_certs: str | None = None,
                verify_certs: bool | None = True, timeout: float = 30) -> Any:
    """An ``opensearchpy.OpenSearch`` client for one cluster (no request is sent).

    Args:
        url: cluster URL (default env LR_OPENSEARCH_URL, else http://127.0.0.1:9200).
        user, password: basic auth (default env LR_OPENSEARCH_USER / _PASSWORD).
        ca_certs: PEM CA bundle for https (default env LR_OPENSEARCH_CA_CERTS).
        verify_certs: verify TLS certificates; None reads env LR_OPENSEARCH_VERIFY_CERTS.
        timeout: request timeout in seconds.

    Raises:
        ConfigError: malformed URL, or a password without a user.
    """
    c = resolve_connection(url, user=user, password=password, ca_certs=ca_certs,
                           verify_certs=verify_certs, timeout=timeout)
    return _opensearch_client(c)


def _opensearch_client(c: Connection) -> Any:
    from opensearchpy import OpenSearch

    kwargs: dict[str, Any] = {"hosts": [c.url], "timeout": c.timeout, "http_compress": False}
    if c.user:
        kwargs["http_auth"] = (c.user, c.password or "")
    if c.url.startswith("https://"):
        kwargs.update(use_ssl=True, verify_certs=c.verify_certs, ssl_show_warn=c.verify_certs)
        if c.ca_certs:
            kwargs["ca_certs"] = c.ca_certs
    return OpenSearch(**kwargs)


def make_es_client(url: str | None = None, *, user: str | None = None,
                   password: str | None = None, ca_certs: str | None = None,
                   verify_certs: bool | None = True, timeout: float = 30) -> Any:
    """An ``elasticsearch.Elasticsearch`` client (needs ``.[es]``); arguments and
    environment defaults as :func:`make_client`. No request is sent."""
    c = resolve_connection(url, user=user, password=password, ca_certs=ca_certs,
                           verify_certs=verify_certs, timeout=timeout)
    return _elasticsearch_client(c)


def _elasticsearch_client(c: Connection) -> Any:
    try:
        from elasticsearch import Elasticsearch
    except ImportError as exc:
        raise ConfigError("the Elasticsearch client is not installed: pip install "
                          "'lr-opensearch[es]'") from exc

    kwargs: dict[str, Any] = {"request_timeout": c.timeout}
    if c.user:
        kwargs["basic_auth"] = (c.user, c.password or "")
    if c.url.startswith("https://"):
        kwargs["verify_certs"] = c.verify_certs
        if not c.verify_certs:
            kwargs["ssl_show_warn"] = False
        if c.ca_certs:
            kwargs["ca_certs"] = c.ca_certs
    return Elasticsearch(c.url, **kwargs)


def _detect(client: Any, url: str) -> tuple[str, str]:
    try:
        # raw REST: which engine answers is what this call finds out, and the two clients
        # spell nodes.info differently; both transports take the same request
        resp = client.transport.perform_request(
            "GET", "/_nodes/_local",
            params={"filter_path": "nodes.*.version,nodes.*.build_flavor"})
    except Exception as exc:  # noqa: BLE001 - any transport failure: name the cluster
        raise connection_error(exc, url) from exc
    nodes = list((resp or {}).get("nodes", {}).values())
    if not nodes:
        raise EngineError(f"the cluster at {url} answered _nodes/_local without a node; is "
                          "it an OpenSearch or Elasticsearch cluster?")
    node = nodes[0]
    engine = "elasticsearch" if "build_flavor" in node else "opensearch"
    return engine, str(node.get("version", "?"))


def connection_error(exc: BaseException, url: str) -> EngineError:
    """A clear error for a failed first request to ``url``: refused credentials, TLS
    verification, no answer (the password is never part of it: the URL carries none)."""
    from opensearchpy.exceptions import (
        AuthenticationException,
        AuthorizationException,
        SSLError,
    )

    if isinstance(exc, AuthenticationException):
        return EngineError(f"the cluster at {url} refused the credentials (HTTP 401): check "
                           "--user / --password (LR_OPENSEARCH_USER / LR_OPENSEARCH_PASSWORD)")
    if isinstance(exc, AuthorizationException):
        return EngineError(f"the cluster at {url} answered HTTP 403 (forbidden): the user "
                           "lacks the permission to read _nodes; ask for cluster monitor "
                           "rights, or pass --engine to skip the detection")
    if isinstance(exc, SSLError) and _plain_http(exc):
        plain = "http://" + url.split("://", 1)[-1]
        return EngineError(f"the server at {url} speaks plain HTTP, not TLS: use {plain} (or "
                           "switch TLS on at the server)")
    if isinstance(exc, SSLError):
        return EngineError(f"TLS verification of {url} failed ({_ssl_reason(exc)}): pass "
                           "--ca-certs with the CA that signed the cluster's certificate "
                           "(LR_OPENSEARCH_CA_CERTS), or --insecure for a throwaway test "
                           "cluster")
    return EngineError(f"the cluster at {url} did not answer: {_short(exc)}")


def _plain_http(exc: BaseException) -> bool:
    """Whether a TLS handshake failed because the server answered in plain HTTP (OpenSSL
    reads the HTTP reply as a record of an unknown TLS version)."""
    text = str(exc).lower()
    return any(m in text for m in ("wrong_version_number", "wrong version number",
                                   "http_request", "record layer failure"))


def _ssl_reason(exc: BaseException) -> str:
    text = str(exc)
    for marker in ("CERTIFICATE_VERIFY_FAILED", "certificate verify failed", "WRONG_VERSION",
                   "hostname mismatch"):
        if marker.lower() in text.lower():
            start = text.lower().index(marker.lower())
            return text[start : start + 120].split(")")[0]
    return _short(exc)


def _short(exc: BaseException) -> str:
    text = str(exc)
    return text if len(text) <= 300 else text[:300] + "..."


def connect(url: str | None = None, *, engine: str = "auto", user: str | None = None,
            password: str | None = None, ca_certs: str | None = None,
            verify_certs: bool | None = True, timeout: float = 30) -> Any:
    """A client of the right kind for the cluster at ``url``: the entry point of every
    command that talks to a cluster.

    Args:
        engine: ``auto`` (ask the cluster: one ``_nodes/_local`` request), ``opensearch``
            or ``elasticsearch``. A named engine is checked against the cluster's answer.
        other arguments: as :func:`make_client` (same environment defaults).

    Returns:
        ``opensearchpy.OpenSearch`` or ``elasticsearch.Elasticsearch``.

    Raises:
        ConfigError: bad arguments, or ``engine`` names what the cluster is not.
        EngineError: the cluster does not answer.
    """
    choice("engine", engine, ENGINE_CHOICES)
    c = resolve_connection(url, user=user, password=password, ca_certs=ca_certs,
                           verify_certs=verify_certs, timeout=timeout)
    probe = _opensearch_client(c)
    found, version = _detect(probe, c.url)
    if engine != "auto" and engine != found:
        raise ConfigError(f"--engine {engine} was given, but the cluster at {c.url} is "
                          f"{ENGINE_NAMES[found]} {version}; pass --engine {found} or "
                          "--engine auto")
    logger.debug("%s is %s %s", c.url, found, version)
    if found == "opensearch":
        return probe
    probe.close()
    return _elasticsearch_client(c)


@dataclass(frozen=True)
class Capabilities:
    """What a cluster offers to lr-opensearch.

    Attributes:
        version: server version string, e.g. "3.6.0".
        distribution: "opensearch" (or "elasticsearch" if pointed at one).
        knn: the k-NN plugin is on every node (``knn_vector`` fields, ``knn`` query).
        neural_search: the neural-search plugin is on every node (``hybrid`` query,
            ``normalization-processor`` search pipelines).
        plugins: plugin names present on every node.
        nodes: number of nodes that answered ``_cat/plugins`` / ``_cat/nodes``.
    """

    version: str
    distribution: str
    knn: bool
    neural_search: bool
    plugins: tuple[str, ...]
    nodes: int

    @property
    def server_hybrid(self) -> bool:
        """Server-side hybrid search (hybrid query + normalization pipeline) is possible."""
        return self.neural_search

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    @property
    def release(self) -> tuple[int, ...]:
        """The version as numbers, e.g. (3, 6, 0); unreadable parts stop it."""
        out = []
        for part in self.version.split("-")[0].split("."):
            if not part.isdigit():
                break
            out.append(int(part))
        return tuple(out)

    @property
    def knn_ef_search(self) -> int | None:
        """The ``ef_search`` a ``knn`` query must carry when its caller names none: None
        where the cluster applies k-NN's default itself (OpenSearch 3.5+),
        ``KNN_DEFAULT_EF_SEARCH`` before (lucene searched only ``k`` candidates)."""
        if self.distribution != "opensearch" or self.release >= KNN_EF_SEARCH_DEFAULT_FROM:
            return None
        return KNN_DEFAULT_EF_SEARCH

    @property
    def weighted_rrf(self) -> bool:
        """The ``score-ranker-processor`` (server-side RRF) takes per-sub-query weights
        (OpenSearch 3.1+; 2.19's takes only ``rank_constant``)."""
        return self.distribution == "opensearch" and self.release >= WEIGHTED_RRF_FROM


def cluster_capabilities(client: Any) -> Capabilities:
    """Ask the cluster for its version and plugins.

    A plugin counts only if every node has it (a query would fail on the others).

    Raises:
        EngineError: the cluster does not answer.
    """
    try:
        info = client.info()
        rows = client.cat.plugins(format="json")
        nodes = client.cat.nodes(format="json", h="name")
    except Exception as exc:  # noqa: BLE001 - any transport failure: say which cluster
        raise EngineError(f"cannot read version / plugins from the cluster: {exc}") from exc
    version = info.get("version", {})
    node_names = {n["name"] for n in nodes}
    per_plugin: dict[str, set[str]] = {}
    for row in rows:
        per_plugin.setdefault(row["component"], set()).add(row["name"])
    everywhere = tuple(sorted(p for p, on in per_plugin.items() if on >= node_names))
    return Capabilities(
        version=str(version.get("number", "?")),
        distribution=str(version.get("distribution", "elasticsearch")),
        knn="opensearch-knn" in everywhere,
        neural_search="opensearch-neural-search" in everywhere,
        plugins=everywhere,
        nodes=len(node_names),
    )
