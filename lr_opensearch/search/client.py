"""Making an OpenSearch client (URL, TLS, basic auth) and detecting what the cluster can do.

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
from dataclasses import dataclass
from typing import Any

from lr_opensearch.errors import ConfigError, EngineError

logger = logging.getLogger(__name__)

DEFAULT_URL = "http://127.0.0.1:9200"
_FALSE = {"0", "false", "no", "off"}


def _split_url(url: str) -> tuple[str, str | None, str | None]:
    """Remove ``user:password@`` from a URL; return (clean URL, user, password)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"OpenSearch URL {url!r} must look like http(s)://host:port")
    if parts.username is None:
        return url, None, None
    netloc = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
    clean = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return clean, user, password


def make_client(url: str | None = None, *, user: str | None = None,
                password: str | None = None, ca_certs: str | None = None,
                verify_certs: bool | None = True, timeout: float = 30) -> Any:
    """An ``opensearchpy.OpenSearch`` client for one cluster.

    Args:
        url: cluster URL (default env LR_OPENSEARCH_URL, else http://127.0.0.1:9200).
        user, password: basic auth (default env LR_OPENSEARCH_USER / _PASSWORD).
        ca_certs: PEM CA bundle for https (default env LR_OPENSEARCH_CA_CERTS).
        verify_certs: verify TLS certificates; None reads env LR_OPENSEARCH_VERIFY_CERTS.
        timeout: request timeout in seconds.

    Raises:
        ConfigError: malformed URL, or a password without a user.
    """
    from opensearchpy import OpenSearch

    url = url or os.environ.get("LR_OPENSEARCH_URL") or DEFAULT_URL
    url, url_user, url_password = _split_url(url)
    user = user or url_user or os.environ.get("LR_OPENSEARCH_USER") or None
    password = password or url_password or os.environ.get("LR_OPENSEARCH_PASSWORD") or None
    ca_certs = ca_certs or os.environ.get("LR_OPENSEARCH_CA_CERTS") or None
    env_verify = os.environ.get("LR_OPENSEARCH_VERIFY_CERTS")
    if verify_certs is None or (verify_certs and env_verify is not None):
        verify_certs = (env_verify or "true").strip().lower() not in _FALSE
    if password and not user:
        raise ConfigError("an OpenSearch password was given without a user "
                          "(set LR_OPENSEARCH_USER or pass user=)")
    kwargs: dict[str, Any] = {"hosts": [url], "timeout": timeout, "http_compress": False}
    if user:
        kwargs["http_auth"] = (user, password or "")
    if url.startswith("https://"):
        kwargs.update(use_ssl=True, verify_certs=bool(verify_certs),
                      ssl_show_warn=bool(verify_certs))
        if ca_certs:
            kwargs["ca_certs"] = ca_certs
        if not verify_certs:
            logger.warning("TLS certificate verification is OFF for %s", url)
    return OpenSearch(**kwargs)


def make_es_client(url: str | None = None, *, user: str | None = None,
                   password: str | None = None, ca_certs: str | None = None,
                   verify_certs: bool = True, timeout: float = 30) -> Any:
    """An ``elasticsearch.Elasticsearch`` client (needs ``.[es]``); arguments as
    :func:`make_client`, with the same environment defaults."""
    try:
        from elasticsearch import Elasticsearch
    except ImportError as exc:
        raise ConfigError("the Elasticsearch client is not installed: pip install "
                          "'lr-opensearch[es]'") from exc

    url = url or os.environ.get("LR_OPENSEARCH_URL") or DEFAULT_URL
    url, url_user, url_password = _split_url(url)
    user = user or url_user or os.environ.get("LR_OPENSEARCH_USER") or None
    password = password or url_password or os.environ.get("LR_OPENSEARCH_PASSWORD") or None
    kwargs: dict[str, Any] = {"request_timeout": timeout}
    if user:
        kwargs["basic_auth"] = (user, password or "")
    if url.startswith("https://"):
        kwargs["verify_certs"] = verify_certs
        ca_certs = ca_certs or os.environ.get("LR_OPENSEARCH_CA_CERTS") or None
        if ca_certs:
            kwargs["ca_certs"] = ca_certs
    return Elasticsearch(url, **kwargs)


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
