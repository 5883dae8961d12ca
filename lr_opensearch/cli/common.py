"""What every ``lr`` subcommand shares: connection arguments, the client they make, logging."""

from __future__ import annotations

import argparse
import logging
from typing import Any

DEFAULT_TIMEOUT_S = 120  # seconds per request of the long-running commands (ingest)


def add_connection_args(parser: Any, *, timeout: bool = False) -> None:
    """--url / --engine / --user / --password / --ca-certs / --insecure (alias
    --no-verify-certs) on ``parser`` (a parser or an argument group), with env LR_OPENSEARCH_*
    defaults; ``timeout`` adds --timeout (seconds per request). The one definition for
    ``lr``, ``python -m ingest.bulk`` and ``python -m ingest.ray_ingest``."""
    from lr_opensearch.options import ENGINE_CHOICES

    parser.add_argument("--url", default=None,
                        help="cluster URL (default env LR_OPENSEARCH_URL or http://127.0.0.1:9200)")
    parser.add_argument("--engine", choices=ENGINE_CHOICES, default=ENGINE_CHOICES[0],
                        help="what the URL points at: opensearch or elasticsearch (default "
                        "auto: the cluster is asked)")
    parser.add_argument("--user", default=None, help="basic auth user (env LR_OPENSEARCH_USER)")
    parser.add_argument("--password", default=None,
                        help="basic auth password (env LR_OPENSEARCH_PASSWORD; prefer it: "
                        "arguments show in ps)")
    parser.add_argument("--ca-certs", default=None,
                        help="PEM CA bundle for https (env LR_OPENSEARCH_CA_CERTS)")
    parser.add_argument("--insecure", "--no-verify-certs", dest="insecure", action="store_true",
                        help="do not verify TLS certificates (self-signed test clusters only)")
    if timeout:
        parser.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S,
                            help=f"request timeout in seconds (default {DEFAULT_TIMEOUT_S})")


def positive_seconds(value: str) -> int:
    """``--timeout``: a whole number of seconds, at least 1 (argparse's type)."""
    try:
        seconds = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of seconds") from None
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"{seconds} s: a request timeout must be at least 1 s")
    return seconds


def connection_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The connection arguments as keyword arguments of ``connect`` / ``ConnectionConfig``
    (``timeout`` when the command has it)."""
    out: dict[str, Any] = {"url": args.url, "engine": args.engine, "user": args.user,
                           "password": args.password, "ca_certs": args.ca_certs,
                           "verify_certs": not args.insecure}
    if getattr(args, "timeout", None) is not None and isinstance(args.timeout, int):
        out["timeout"] = args.timeout
    return out


def client_from_args(args: argparse.Namespace) -> Any:
    """The client for ``--url`` & co.: OpenSearch or Elasticsearch, as ``--engine`` says or
    the cluster answers (:func:`lr_opensearch.engine.client.connect`)."""
    from lr_opensearch.engine.client import connect

    kwargs = connection_kwargs(args)
    kwargs.pop("timeout", None)
    return connect(**kwargs)


PRECISION_HELP = (
    "how the document encoder computes: fp32 (default; on a CPU with AVX-512 BF16 or AMX its "
    "sparse projection is screened in bfloat16 and the kept weights recomputed in float32: the "
    "same vectors, faster), mixed (the backbone's matrix products in bfloat16, the rest float32: "
    "faster, the vectors move slightly), bf16 (the whole backbone in bfloat16: about as fast, "
    "the sparse vectors move more; docs/RESULTS.md)")


def add_precision_arg(parser: Any) -> None:
    """``--encode-precision`` (``options.ENCODE_PRECISIONS``) of ingest and ``lr bundle build``."""
    from lr_opensearch.options import DEFAULT_ENCODE_PRECISION, ENCODE_PRECISIONS

    parser.add_argument("--encode-precision", choices=ENCODE_PRECISIONS,
                        default=DEFAULT_ENCODE_PRECISION, help=PRECISION_HELP)


def add_runtime_arg(parser: Any) -> None:
    """``--runtime`` (``options.RUNTIMES``) of ingest and ``lr bundle build``."""
    from lr_opensearch.options import DEFAULT_RUNTIME, RUNTIMES

    parser.add_argument("--runtime", choices=RUNTIMES, default=DEFAULT_RUNTIME,
                        help="where the document encoder's backbone runs: onnx (ONNX Runtime on "
                        "the CPU, no torch), torch (any --device), auto (default: onnx on a CPU "
                        "when onnxruntime is installed and the model is an encoder, else torch)")


BUNDLE_ENV = "LR_BUNDLE"  # the bundle of every command when --bundle is not given


def add_bundle_arg(parser: Any, *, index_known: bool = True) -> None:
    """``--bundle`` of the commands that search an index: optional where the index's
    ``_meta`` names its bundle (``index_known``)."""
    found = (" (default env LR_BUNDLE, else the bundle the index was built with: the path "
             "its _meta records, or the local bundle store)") if index_known else \
        " (default env LR_BUNDLE)"
    parser.add_argument("--bundle", default=None, help="model bundle directory" + found)


def bundle_path(args: argparse.Namespace, client: Any = None) -> str:
    """``--bundle``, else ``$LR_BUNDLE``, else the bundle the index ``args.index`` was built
    with, found on this machine (:func:`lr_opensearch.bundle.store.bundle_of_index`)."""
    import os

    from lr_opensearch.errors import ConfigError

    given = args.bundle or os.environ.get(BUNDLE_ENV)
    if given:
        return str(given)
    if not getattr(args, "index", None):
        raise ConfigError("give --bundle DIR (or --index NAME of an index made by lr-opensearch)")
    from lr_opensearch.bundle.store import bundle_of_index
    from lr_opensearch.engine.factory import make_adapter
    from lr_opensearch.engine.meta import meta_of
    from lr_opensearch.engine.templates import META_KEY

    adapter = make_adapter(client if client is not None else client_from_args(args))
    metas = [meta_of(m, META_KEY) or {} for m in adapter.index_mappings(args.index).values()]
    return str(bundle_of_index(args.index, metas[0] if metas else {}))


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


def add_layout_args(parser: Any, *, default: str | None) -> None:
    """``--sparse-layout`` and ``--seismic`` (the sparse field's layout when an index is
    created; :mod:`lr_opensearch.engine.seismic`)."""
    from lr_opensearch.options import SPARSE_LAYOUTS

    parser.add_argument("--sparse-layout", default=default, choices=SPARSE_LAYOUTS,
                        help="OpenSearch layout of the sparse field: rank_features (default) or "
                        "sparse_vector (neural-search 3.3+, SEISMIC approximate search; bundles "
                        "whose token ids stay below 32,768)")
    parser.add_argument("--seismic", default=None, metavar="NAME=VALUE,...",
                        help="SEISMIC parameters of a sparse_vector field: n_postings, "
                        "cluster_ratio, summary_prune_ratio, approximate_threshold (documents a "
                        "segment needs before SEISMIC searches it, engine default 1000000), "
                        "quantization_ceiling_ingest, quantization_ceiling_search")


def layout_opts(args: argparse.Namespace) -> dict[str, Any]:
    """The index-creation options of :func:`add_layout_args` (only those given)."""
    from lr_opensearch.engine.seismic import SeismicIndexParams

    opts: dict[str, Any] = {}
    if args.sparse_layout is not None:
        opts["sparse_layout"] = args.sparse_layout
    if args.seismic is not None:
        opts["seismic"] = SeismicIndexParams.parse(args.seismic)
    return opts
