#!/bin/sh
# wait-for-cluster CMD...: wait (up to LR_WAIT_SECONDS, default 300) until the cluster at
# LR_OPENSEARCH_URL answers, then exec CMD. The one-shot services need it because not every
# engine runs compose healthchecks (podman without systemd leaves them "starting").
set -eu
url=${LR_OPENSEARCH_URL:?set LR_OPENSEARCH_URL to the cluster the job talks to}
limit=${LR_WAIT_SECONDS:-300}
start=$(date +%s)
until python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1] + "/_cluster/health", timeout=5)' "$url" 2>/dev/null; do
  if [ $(( $(date +%s) - start )) -ge "$limit" ]; then
    echo "wait-for-cluster: $url did not answer in $limit s; is its service up (docker compose ps)?" >&2
    exit 1
  fi
  sleep 2
done
exec "$@"
