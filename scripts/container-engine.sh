#!/usr/bin/env bash
# Makes a container engine available for the Docker tests (`python3 -m pytest -m docker`),
# idempotently; called by scripts/setup.sh. Where a Docker engine answers (`docker info`) it
# is used as it is. Otherwise, as root on Debian:
#   - podman, runc and debootstrap from apt;
#   - /etc/containers/containers.conf: runtime runc (crun fails on hybrid cgroups v1/v2) and
#     default ulimits no higher than this machine's hard limits (podman's defaults are
#     higher, and a root without CAP_SYS_RESOURCE cannot raise them: containers fail to start);
#   - the Docker API on unix:///run/podman/podman.sock (`podman system service`, left
#     running; its pid in /run/podman/lr-service.pid) for the docker CLI, compose and the tests;
#   - the compose v2 CLI plugin, built from its Go module when `docker compose` is missing.
# Then, in either case, the Debian base image localhost/lr-debian:13 (debootstrap + import)
# when the engine lacks it: the images' FROM where no registry is reachable.
set -euo pipefail

SOCK=/run/podman/podman.sock
PIDFILE=/run/podman/lr-service.pid
CONF=/etc/containers/containers.conf
COMPOSE_VERSION=v2.40.3
BASE_IMAGE=localhost/lr-debian:13
MIRROR=${LR_DEBIAN_MIRROR:-http://deb.debian.org/debian}

say() { echo "container engine: $*"; }
die() { echo "container engine: $*" >&2; exit 1; }

podman_engine() {
  local need=()
  command -v podman >/dev/null 2>&1 || need+=(podman)
  command -v runc >/dev/null 2>&1 || need+=(runc)
  command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
  if [ ${#need[@]} -gt 0 ]; then
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 \
      || die "no Docker engine answers and ${need[*]} cannot be installed here (needs root and apt-get); start a Docker engine or set DOCKER_HOST"
    say "installing ${need[*]} (apt)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null; }
  fi
  local nofile nproc
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
  [ "$nofile" = unlimited ] && nofile=1048576
  { [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; } && nproc=32768
  local conf
  conf=$(printf '# written by lr-opensearch scripts/container-engine.sh\n[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nruntime = "runc"\n' \
    "$nofile" "$nofile" "$nproc" "$nproc")
  if [ "$(cat "$CONF" 2>/dev/null)" != "$conf" ]; then
    if [ -s "$CONF" ] && ! grep -q "lr-opensearch" "$CONF"; then
      cp "$CONF" "$CONF.before-lr-opensearch"
      say "kept the previous $CONF as $CONF.before-lr-opensearch"
    fi
    mkdir -p "$(dirname "$CONF")"
    printf '%s\n' "$conf" > "$CONF"
    say "wrote $CONF (runc, ulimits nofile $nofile, nproc $nproc)"
  fi
  if ! DOCKER_HOST=unix://$SOCK docker info >/dev/null 2>&1; then
    mkdir -p "$(dirname "$SOCK")"
    setsid nohup podman system service --time=0 "unix://$SOCK" >/run/podman/lr-service.log 2>&1 &
    echo $! > "$PIDFILE"
    for _ in $(seq 50); do
      DOCKER_HOST=unix://$SOCK docker info >/dev/null 2>&1 && break
      sleep 0.2
    done
    DOCKER_HOST=unix://$SOCK docker info >/dev/null 2>&1 \
      || die "podman system service did not answer on $SOCK (log: /run/podman/lr-service.log)"
    say "podman's Docker API on unix://$SOCK (pid $(cat "$PIDFILE"); stop: kill \$(cat $PIDFILE))"
  fi
  export DOCKER_HOST=unix://$SOCK
}

compose_plugin() {
  docker compose version >/dev/null 2>&1 && return 0
  command -v go >/dev/null 2>&1 \
    || die "docker compose is missing and Go is not installed to build it; install the compose plugin"
  say "building the compose plugin $COMPOSE_VERSION from its Go module (about 2-3 minutes)"
  local dir dest=/usr/local/lib/docker/cli-plugins
  dir=$(go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" \
        | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  mkdir -p "$dest"
  (cd "$dir" && CGO_ENABLED=0 go build -trimpath \
     -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
     -o "$dest/docker-compose" ./cmd)
  docker compose version
}

base_image() {
  docker image inspect "$BASE_IMAGE" >/dev/null 2>&1 && return 0
  if ! command -v debootstrap >/dev/null 2>&1; then
    say "no debootstrap: $BASE_IMAGE not built; docker/build.sh will use debian:13-slim from a registry"
    return 0
  fi
  say "building $BASE_IMAGE: debootstrap --variant=minbase trixie from $MIRROR"
  local root start
  start=$(date +%s)
  root=$(mktemp -d /var/tmp/lr-debian.XXXXXX)
  debootstrap --variant=minbase trixie "$root" "$MIRROR" >"$root.log" 2>&1 \
    || die "debootstrap failed; see $root.log"
  rm -rf "$root"/var/cache/apt/archives/*.deb
  local server
  server=$(docker version 2>/dev/null || true)  # not piped into grep -q: SIGPIPE + pipefail
  if [[ $server == *"Podman Engine"* ]]; then
    tar -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  else
    tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
  fi
  rm -rf "$root" "$root.log"
  say "built $BASE_IMAGE in $(( $(date +%s) - start )) s"
}

command -v docker >/dev/null 2>&1 \
  || die "the docker CLI is missing (the tests drive any engine through it); install docker-ce-cli or docker.io"
if docker info >/dev/null 2>&1; then
  say "using the Docker engine at ${DOCKER_HOST:-the default socket}"
else
  podman_engine
fi
compose_plugin
base_image
if [ "${DOCKER_HOST:-}" = "unix://$SOCK" ]; then
  say "ready; the tests find the socket themselves, other tools need: export DOCKER_HOST=unix://$SOCK"
else
  say "ready"
fi
