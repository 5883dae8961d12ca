"""What every ``lr`` subcommand shares: connection arguments, the client they make, logging."""

from __future__ import annotations

import argparse
import logging
from typing import Any


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    """--url / --engine / --user / --password / --ca-certs / --insecure (env LR_OPENSEARCH_*
    defaults)."""
    from lr_opensearch.options import ENGINE_CHOICES

    parser.add_argument("--url", default=None,
                        help="cluster URL (default env LR_OPENSEARCH_URL or http://127.0.0.1:9200)")
    parser.add_argument("--engine", choices=ENGINE_CHOICES, default="auto",
                        help="what the URL points at: opensearch or elasticsearch (default "
                        "auto: the cluster is asked)")
    parser.add_argument("--user", default=None, help="basic auth user (env LR_OPENSEARCH_USER)")
    parser.add_argument("--password", default=None,
                        help="basic auth password (env LR_OPENSEARCH_PASSWORD)")
    parser.add_argument("--ca-certs", default=None,
                        help="PEM CA bundle for https (env LR_OPENSEARCH_CA_CERTS)")
    parser.add_argument("--insecure", action="store_true",
                        help="do not verify TLS certificates (self-signed test clusters only)")


def client_from_args(args: argparse.Namespace) -> Any:
    """The client for ``--url`` & co.: OpenSearch or Elasticsearch, as ``--engine`` says or
    the cluster answers (:func:`lr_opensearch.search.client.connect`)."""
    from lr_opensearch.search.client import connect

    return connect(args.url, engine=args.engine, user=args.user, password=args.password,
                   ca_certs=args.ca_certs, verify_certs=not args.insecure)


TRANSPORT_LOGGERS = ("opensearch", "elastic_transport", "urllib3")


def quiet_transport(args: argparse.Namespace) -> None:
    """The engine clients log every HTTP request at INFO and every failed attempt at WARNING
    with a stack trace; our errors say what failed and what to do, so keep theirs for
    ``lr -v``."""
    if not getattr(args, "verbose", False):
        for name in TRANSPORT_LOGGERS:
            logging.getLogger(name).setLevel(logging.ERROR)


def configure_logging(verbose: bool = False, quiet: bool = False) -> None:
    """Route logging to stderr; tqdm bars stay intact because they write to stderr too."""
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    if not verbose:  # one line per HTTP request (and a stack trace per failed attempt)
        for noisy in TRANSPORT_LOGGERS:  # drown what the commands say; -v shows them
            logging.getLogger(noisy).setLevel(logging.ERROR)
