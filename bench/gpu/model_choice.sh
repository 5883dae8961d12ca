#!/bin/bash
# The GPU part of bench/model_choice.py (issue 38) on a machine without network: the weights
# arrive as the parts of one tar (checked by sha256), the code, wheels and data as small.tgz.
# Writes $OUT/legs/{legs.npz,legs.json} and, for the local bundle store, MiniLM's CISI and
# Cranfield bundles without the doc encoder's weights (the packaged MiniLM's, same file as
# every MiniLM bundle's) as $OUT/bundles/b<N> parts of one tar.gz.
set -euo pipefail
R=$(pwd)
S=${STAGE:-/root/stage}
: "${OUT:?}"
MODELS=${MODELS:-minilm bge-small e5-small}
COLLS=${COLLS:-adi cisi cranfield scifact}
t0=$(date +%s)
mkdir -p "$S/x"
cp "$R/.devx/part5" "$S/"
(cd "$S" && sha256sum -c "$R/.devx/parts.sha256")
cat "$S"/part0 "$S"/part1 "$S"/part2 "$S"/part3 "$S"/part4 "$S"/part5 | tar -x -C "$S/x"
tar -xzf "$R/.devx/small.tgz" -C "$S/x"
[ -d /work/shared/data ] || { mkdir -p /work/shared && cp -r "$S/x/data" /work/shared/data; }
export LR_CACHE_DIR=$S/x/cache LR_BUNDLE_STORE=$S/store LR_OFFLINE=1 PYTHONPATH=$S/x/repo:$S/x/site
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONUNBUFFERED=1
nvidia-smi -L || true
python3 -c "import torch, transformers, scipy, numpy; print('torch', torch.__version__, 'transformers', transformers.__version__, 'scipy', scipy.__version__, 'numpy', numpy.__version__, 'cuda', torch.cuda.is_available())"
echo "staged in $(( $(date +%s) - t0 )) s"
cd "$S/x/repo"
# shellcheck disable=SC2086
timeout "${LEGS_TIMEOUT:-500}" python3 bench/model_choice.py legs --out "$OUT/legs" --models $MODELS \
  --collections $COLLS || echo "legs step ended with rc=$?"
echo "legs done at $(( $(date +%s) - t0 )) s"
mkdir -p "$OUT/bundles"
STAGE_DIR=$S python3 - <<'PY'
import hashlib, json, os
from pathlib import Path
from lr_opensearch.bundle.store import store_dir
from lr_opensearch.fit.fitted import fitted_name
names = []
for c in ("cisi", "cranfield"):
    corpus = Path("/work/shared/data") / c / "corpus.jsonl.gz"
    b = store_dir() / fitted_name(corpus)  # the zero-config name (model: the default)
    if not (b / "lightretriever.json").is_file():
        print("missing", b); continue
    m = json.loads((b / "lightretriever.json").read_text())
    w = b / "doc_encoder" / "model.safetensors"
    print(c, b.name, "bundle id", m.get("bundle_id"), "doc_encoder/model.safetensors sha256",
          hashlib.sha256(w.read_bytes()).hexdigest())
    names.append(b.name)
Path(os.environ["STAGE_DIR"], "names.txt").write_text("\n".join(names) + "\n")
PY
if [ -s "$S/names.txt" ] && [ "$(head -c1 "$S/names.txt")" != $'\n' ]; then
  (cd "$LR_BUNDLE_STORE" && tar -czf - --exclude='*/doc_encoder/model.safetensors' $(cat "$S/names.txt")) \
    | split -b 16000000 -d -a 1 - "$OUT/bundles/b"
fi
ls -la "$OUT" "$OUT/legs" "$OUT/bundles"
echo "done in $(( $(date +%s) - t0 )) s"
