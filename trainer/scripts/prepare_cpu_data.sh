#!/usr/bin/env bash
# Build the training data of the CPU configs (trainer/configs/minilm-cpu.yaml and
# smollm2-cpu.yaml): training records from the documents of the collections in the shared
# data folder (title -> body and independent cropping) plus the SciFact TRAIN qrels, each
# with BM25 hard negatives mined on an OpenSearch node. No test query or test judgment of
# any collection is read (trainer.pairs refuses the test split).
#
# Usage: trainer/scripts/prepare_cpu_data.sh [options]
#   --out DIR            where the JSONL files go (env LR_TRAIN_DATA; default
#                        /tmp/train_minilm/data, the folder the CPU configs name)
#   --data DIR           BEIR-format collections (env LR_SHARED_DATA; default
#                        ../shared/data relative to the repository)
#   --url URL            an OpenSearch node to mine on (env LR_NODE_URL); default: start a
#                        throwaway local node and stop it (and delete its folder) at the end
#   --port P             HTTP port of that throwaway node (env LR_NODE_PORT; default 9237;
#                        its transport port is P + 100)
#   --collections "A B"  collections for the title_body and cropping recipes
#                        (default "cranfield cisi adi scifact")
#   --qrels "A B"        collections whose TRAIN qrels become records (default "scifact";
#                        "" for none)
#   --keep N / --skip N  negatives kept per record / best non-positive hits skipped (8 / 1)
# Env PYTHON selects the interpreter (default python). A tiny check of the whole pipeline:
#   trainer/scripts/prepare_cpu_data.sh --out /tmp/prep-check --collections adi --qrels ""
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="${LR_TRAIN_DATA:-/tmp/train_minilm/data}"
data="${LR_SHARED_DATA:-$repo/../shared/data}"
url="${LR_NODE_URL:-}"
port="${LR_NODE_PORT:-9237}"
collections="cranfield cisi adi scifact"
qrels="scifact"
keep=8
skip=1
py="${PYTHON:-python}"

die() { echo "prepare_cpu_data.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --data) data="${2:?--data needs a folder}"; shift 2 ;;
    --url) url="${2:?--url needs a URL}"; shift 2 ;;
    --port) port="${2:?--port needs a number}"; shift 2 ;;
    --collections) collections="${2?--collections needs a list}"; shift 2 ;;
    --qrels) qrels="${2?--qrels needs a list (may be empty)}"; shift 2 ;;
    --keep) keep="${2:?--keep needs a number}"; shift 2 ;;
    --skip) skip="${2:?--skip needs a number}"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

out="$(realpath -m "$out")"
data="$(realpath -m "$data")"
for c in $collections $qrels; do
  [ -d "$data/$c" ] || die "no collection folder $data/$c (set --data or LR_SHARED_DATA)"
done
mkdir -p "$out"
cd "$repo"
export HF_HUB_OFFLINE=1

node_dir=""
stop_node() {
  if [ -n "$node_dir" ]; then
    echo "stopping the throwaway node on port $port" >&2
    "$py" -m lr_opensearch.node stop --http-port "$port" --data-dir "$node_dir" >&2 || true
    rm -rf "$node_dir"
  fi
}
if [ -z "$url" ]; then
  if "$py" - "$port" <<'EOF'
import socket, sys
with socket.socket() as s:
    sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
EOF
  then
    die "port $port is taken; pass --port P for the throwaway node, or --url of a running node"
  fi
  node_dir="$(mktemp -d /tmp/prepare-cpu-node.XXXXXX)"
  trap stop_node EXIT
  echo "starting a throwaway OpenSearch node on port $port ($node_dir)" >&2
  "$py" -m lr_opensearch.node start --http-port "$port" --data-dir "$node_dir"
  url="http://127.0.0.1:$port"
fi

mine() {  # mine RECIPE COLLECTION NAME: $out/NAME.jsonl -> $out/NAME.neg.jsonl
  "$py" -m trainer.mine_negatives --records "$out/$3.jsonl" --collection "$data/$2" \
    --recipe "$1" --out "$out/$3.neg.jsonl" --keep "$keep" --skip "$skip" --url "$url"
}

for c in $collections; do
  for recipe in title_body cropping; do
    echo "== $c $recipe" >&2
    "$py" -m trainer.pairs "$data/$c" --recipe "$recipe" --out "$out/$c.$recipe.jsonl"
    mine "$recipe" "$c" "$c.$recipe"
  done
done
for c in $qrels; do
  echo "== $c qrels (train split)" >&2
  "$py" -m trainer.pairs "$data/$c" --recipe qrels --split train --out "$out/$c.qrels.jsonl"
  mine qrels "$c" "$c.qrels"
done
echo "training data in $out:" >&2
ls -l "$out"/*.neg.jsonl >&2
