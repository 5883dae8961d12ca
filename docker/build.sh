#!/usr/bin/env bash
# Builds the images that docker/docker-compose.yml runs:
#   localhost/lr-opensearch/opensearch:<lock version>      OpenSearch + k-NN + neural-search
#   localhost/lr-opensearch/elasticsearch:<lock version>   Elasticsearch
#   localhost/lr-opensearch/lr:<package version>           the project (python -m ingest.bulk)
#   localhost/lr-opensearch/lr-search:<package version>    the torch-free search client (lr)
# Usage: bash docker/build.sh [opensearch] [elasticsearch] [project] [search]   (default: all)
# The base image: $LR_DOCKER_BASE, else the local Debian base that scripts/setup.sh builds
# (localhost/lr-debian:13) when the engine has it, else the public debian:13-slim.
# Talks to the engine the `docker` CLI reaches (DOCKER_HOST); when that engine is podman, the
# build runs through `podman build` (the Docker API's build endpoint has no build secrets).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
LOCAL_BASE=localhost/lr-debian:13
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(opensearch elasticsearch project search)

server=$(docker version 2>&1) \
  || { echo "build.sh: no container engine answers (docker version failed; run scripts/setup.sh or set DOCKER_HOST): $server" >&2; exit 1; }
if [[ $server == *"Podman Engine"* ]]; then
  builder=(podman build --pull=never)
else
  builder=(docker build)
fi
if [ -n "${LR_DOCKER_BASE:-}" ]; then
  base=$LR_DOCKER_BASE
elif docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
  base=$LOCAL_BASE
else
  base=debian:13-slim
fi
# A CA bundle for pip behind an HTTPS-intercepting proxy: the host's (never kept in the image).
ca=${LR_DOCKER_CA_BUNDLE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
[ -f "$ca" ] || { ca=$(mktemp); trap 'rm -f "$ca"' EXIT; }

build() {  # build TAG TARGET [BUILD-ARG...]
  local tag=$1 target=$2 start
  shift 2
  start=$(date +%s)
  "${builder[@]}" -q -f docker/Dockerfile --target "$target" --build-arg "BASE=$base" \
    --secret "id=ca_bundle,src=$ca" "$@" -t "$tag" . >/dev/null
  echo "built $tag from $base in $(( $(date +%s) - start )) s"
}

for target in "${targets[@]}"; do
  case $target in
    opensearch|elasticsearch)
      version=$("$PY" docker/stage_artifacts.py "$target")
      build "localhost/lr-opensearch/$target:$version" node --build-arg "ENGINE=$target" ;;
    project)
      version=$("$PY" docker/stage_artifacts.py project)
      build "localhost/lr-opensearch/lr:$version" project ;;
    search)
      version=$("$PY" docker/stage_artifacts.py project)
      build "localhost/lr-opensearch/lr-search:$version" search ;;
    *) echo "build.sh: unknown image '$target' (opensearch, elasticsearch, project, search)" >&2; exit 2 ;;
  esac
done
