#!/bin/bash
# bench/instruct_queries.py on a GPU machine without network, for every document of the four
# shared collections and both prompts. The packaged GGUF (98 MB) travels in two parts, one per
# call, because one call carries at most 64 MiB:
#   call 1: bench/gpu/instruct_queries.sh stage     (carries .devx/part0)
#   call 2: bench/gpu/instruct_queries.sh           (carries .devx/part1, .devx/*.sha256,
#                                                    .devx/data.tgz and .whl: gguf, opensearch-py, events)
# The GGUF is converted there by the library's convert_gguf, and the converted weights' digest
# is printed to compare with the local conversion's. Writes $OUT/instruct.tgz and $OUT/log.
set -euo pipefail
R=$(pwd)
S=${STAGE:-/root/stage}
: "${OUT:?}"
mkdir -p "$S"
if [ "${1:-}" = stage ]; then
  cp "$R/.devx/part0" "$S/"
  ls -la "$S"
  nvidia-smi -L || true
  exit 0
fi
t0=$(date +%s)
cp "$R/.devx/part1" "$S/"
(cd "$S" && sha256sum -c "$R/.devx/parts.sha256" && cat part0 part1 > model.gguf && sha256sum -c "$R/.devx/gguf.sha256")
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$R"/.whl/*.whl
export PYTHONPATH=$R:/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
tar -xzf "$R/.devx/data.tgz" -C "$S"
python3 - "$S" <<'PY'
import hashlib, sys, torch, transformers
from pathlib import Path
from lr_opensearch.packaged.gguf import convert_gguf
s = Path(sys.argv[1])
out = convert_gguf(s / "model.gguf", s / "smollm2", dtype=torch.float32)
from safetensors.torch import load_file
sd = load_file(str(out / "model.safetensors"))
h = hashlib.sha256()
for k in sorted(sd):
    h.update(k.encode()); h.update(sd[k].contiguous().numpy().tobytes())
print("torch", torch.__version__, "transformers", transformers.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")
print("converted weights digest", h.hexdigest())
PY
echo "staged and converted in $(( $(date +%s) - t0 )) s"
mkdir -p "$S/gen"
for prompt in ${PROMPTS:-oneshot fewshot}; do
  for c in ${COLLS:-adi cisi cranfield scifact}; do
    timeout "${STEP_TIMEOUT:-200}" python3 bench/instruct_queries.py --dataset "$S/data/$c" \
      --out "$S/gen/$c-$prompt.jsonl" --model "$S/smollm2" --limit 0 --batch "${BATCH:-128}" \
      --device "${DEVICE:-cuda}" --prompt "$prompt" --show 3 || echo "$c $prompt ended with rc=$?"
  done
done
(cd "$S/gen" && wc -l ./*.jsonl && tar -czf "$OUT/instruct.tgz" ./*.jsonl)
echo "done in $(( $(date +%s) - t0 )) s"
