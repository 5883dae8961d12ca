"""``lr inspect``: the relevance inspector in the browser (thin CLI over lr_opensearch.inspect).

    lr inspect --bundle B --index I [--url URL] [--host 127.0.0.1] [--port 8765]
"""

from __future__ import annotations

import argparse
from typing import Any

from lr_opensearch import legs
from lr_opensearch.cli.common import (
    add_bundle_arg,
    add_connection_args,
    bundle_path,
    client_from_args,
    quiet_transport,
)
from lr_opensearch.errors import ConfigError
from lr_opensearch.options import DEFAULT_CANDIDATES


def _cmd_inspect(args: argparse.Namespace) -> int:
    quiet_transport(args)
    try:
        from lr_opensearch.inspect import create_app
    except ImportError as exc:
        raise ConfigError("the inspector needs Flask: pip install 'lr-opensearch[inspect]'") from exc
    if not 1 <= args.port <= 65535:
        raise ConfigError(f"--port {args.port} is not a TCP port (1-65535)")
    _check_free(args.host, args.port)
    from lr_opensearch.search import SearchOptions

    client = client_from_args(args)
    options = SearchOptions(k=args.k, candidates=args.candidates)
    app = create_app(bundle_path(args, client), args.index, options=options, client=client,
                     slider=args.slider)
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(f"WARNING: serving on {args.host}: anyone who reaches it can search the index")
    print(f"lr inspect: http://{args.host}:{args.port}/  (index {args.index}; Ctrl-C stops)",
          flush=True)
    app.run(host=args.host, port=args.port, debug=False, use_reloader=False)
    return 0


def _check_free(host: str, port: int) -> None:
    """Refuse a port this process cannot bind, before announcing it."""
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        with socket.socket(infos[0][0], socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(infos[0][4])
    except OSError as exc:
        raise ConfigError(f"cannot serve on {host}:{port}: {exc.strerror or exc}; pick another "
                          "--port or --host") from None


def register(subparsers: Any) -> None:
    """Add ``lr inspect`` to the ``lr`` dispatcher."""
    shown = ", ".join(legs.get(name).label for name in legs.names())
    p = subparsers.add_parser("inspect", help=f"look at the hybrid and its legs ({shown}) side "
                              "by side in the browser", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    add_bundle_arg(p)
    p.add_argument("--index", required=True, help="index name")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default %(default)s)")
    p.add_argument("--port", type=int, default=8765, help="port (default %(default)s)")
    p.add_argument("--k", type=int, default=10, help="hits per list (default %(default)s)")
    p.add_argument("--candidates", type=int, default=DEFAULT_CANDIDATES,
                   help="hits per leg for fusion (default %(default)s)")
    p.add_argument("--slider", default=None, choices=legs.names(), metavar="LEG",
                   help="the leg whose weight the page's slider moves, the other legs sharing "
                   f"the rest (one of {', '.join(legs.names())}; default the bundle's first "
                   "weighted leg)")
    add_connection_args(p)
    p.set_defaults(func=_cmd_inspect)
