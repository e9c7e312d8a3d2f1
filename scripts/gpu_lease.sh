#!/usr/bin/env bash
# One GPU lease's checks in priority order (the brief's: the compiled regime's figures, then batching), each step
# with its own timeout, the results tarred into $OUT/lease.tgz after every step so a call cut at its limit still
# returns what finished. Sized for the third call of a lease (about 545 s of the 600 a call may run); T_* shorten
# or lengthen steps, STEPS picks them (default "regimes compiled eager batches"; "graphs" is the fifth).
#   1. regimes      benchmarks/regimes.py with inductor (fused kernels; every fixed-shape step replayed as a CUDA
#                   graph captured by hand): vanilla and hydra eager and compiled beside transformers' generate()
#                   eager and static-cache compiled (190 s: inductor compiles each bucket once, ~30 s on an H100;
#                   regimes.json is saved after every prompt)
#   2. compiled     every drafter, MT-bench limit 1 x 2 turns, 128 tokens, compiled with inductor (130 s; the FX
#                   graph cache from step 1 serves buckets 1 and 16)
#   3. eager        the same run eager, the field's convention, for the report of both regimes (110 s)
#   4. batches      vanilla, hydra, eagle at batch 1, 4 and 16, compiled with inductor, fixed budget 8, MT-bench
#                   limit 2 (16 questions, so batch 16 is full once) (100 s)
#   5. graphs       step 1 with --compile-backend cudagraphs (eager kernels in CUDA graphs) (80 s)
# Runs are interleaved per question, so a run cut by its timeout holds every drafter on the questions it reached.
# Afterwards, here: tar xzf lease.tgz; specbench report lease/inductor/run-eager lease/inductor/run-compiled
# --allow-incomplete; lease/*/regimes/regimes.json
#
# Usage (on the device, after ../shared/gpu/device-setup.sh and `. /tmp/sb/env`): bash scripts/gpu_lease.sh
set -uo pipefail
out=${OUT:?OUT must be set (the device tool sets it)}
work=${LEASE_WORK:-/tmp/lease}; rm -rf "$work"; mkdir -p "$work"  # LEASE_WORK: tests/test_gpu_scripts.py
here=$(cd "$(dirname "$0")" && pwd)
steps=" ${STEPS:-regimes compiled eager batches} "
pack() { (cd "$(dirname "$work")" && tar czf "$out/lease.tgz" "$(basename "$work")"); }
want() { [[ $steps == *" $1 "* ]]; }
export SPECBENCH_NO_PROGRESS=1
want regimes && { STEPS=regimes T_REGIMES=${T_REGIMES:-190} BACKEND=inductor bash "$here/gpu_regimes.sh" "$work/inductor"; pack; }
want compiled && { STEPS=compiled T_COMPILED=${T_COMPILED:-130} BACKEND=inductor bash "$here/gpu_regimes.sh" "$work/inductor"; pack; }
want eager && { STEPS=eager T_EAGER=${T_EAGER:-110} bash "$here/gpu_regimes.sh" "$work/inductor"; pack; }
if want batches; then
    timeout "${T_BATCHES:-100}" specbench run --out "$work/batches" --device cuda --regime compiled \
        --compile-backend inductor --bench mt_bench --limit 2 --max-new-tokens 128 --drafters vanilla,hydra,eagle \
        --tree-budget 8 --batch-size 1,4,16 > "$work/batches.txt" 2>&1
    echo "batches rc=$?" >> "$work/status.txt"; pack
fi
want graphs && { STEPS=regimes T_REGIMES=${T_GRAPHS:-80} BACKEND=cudagraphs bash "$here/gpu_regimes.sh" "$work/cudagraphs"; pack; }
cat "$work"/*/status.txt "$work/status.txt" 2>/dev/null
grep -h "compiled .* in \|tok/s\|ratio" "$work"/*/regimes.txt 2>/dev/null | tail -20
