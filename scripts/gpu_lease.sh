#!/usr/bin/env bash
# One GPU lease's checks in priority order (the brief's: the compiled regime's figures, then batching, then
# eager beside them), each step with its own timeout, the results tarred into $OUT/lease.tgz after every step
# so a call cut at its limit still returns what finished. Sized for the third call of a lease (about 540 s of
# the 600 a call may run); T_* shorten or lengthen steps, SKIP leaves steps out (e.g. SKIP="eager inductor").
#   1. regimes      benchmarks/regimes.py, --compile-backend cudagraphs: vanilla eager and compiled beside
#                   transformers' generate() eager and static-cache compiled; hydra in both (120 s)
#   2. compiled     every drafter, MT-bench limit 1 x 2 turns, 128 tokens, compiled with cudagraphs (150 s)
#   3. batches      vanilla, hydra, eagle at batch 4 and 16, compiled with cudagraphs, fixed budget 8,
#                   MT-bench limit 2 (16 questions, so batch 16 is full once) (100 s)
#   4. eager        every drafter as in 2, eager: the field's convention beside it (120 s; interleaved per
#                   question, so a cut run holds every drafter on the questions it reached)
#   5. inductor     step 1 with inductor (fused kernels; its warm-up is the long part) (remaining time)
# Afterwards, here: tar xzf lease.tgz; specbench report lease/cudagraphs/run-eager lease/cudagraphs/run-compiled ...
#
# Usage (on the device, after ../shared/gpu/device-setup.sh and `. /tmp/sb/env`): bash scripts/gpu_lease.sh
set -uo pipefail
out=${OUT:?OUT must be set (the device tool sets it)}
work=/tmp/lease; rm -rf "$work"; mkdir -p "$work"
here=$(cd "$(dirname "$0")" && pwd)
skip=" ${SKIP:-} "
pack() { (cd /tmp && tar czf "$out/lease.tgz" lease); }
want() { [[ $skip != *" $1 "* ]]; }
export SPECBENCH_NO_PROGRESS=1
want regimes && { STEPS=regimes T_REGIMES=${T_REGIMES:-120} BACKEND=cudagraphs bash "$here/gpu_regimes.sh" "$work/cudagraphs"; pack; }
want compiled && { STEPS=compiled T_COMPILED=${T_COMPILED:-150} BACKEND=cudagraphs bash "$here/gpu_regimes.sh" "$work/cudagraphs"; pack; }
if want batches; then
    timeout "${T_BATCHES:-100}" specbench run --out "$work/batches" --device cuda --regime compiled \
        --compile-backend cudagraphs --bench mt_bench --limit 2 --max-new-tokens 128 --drafters vanilla,hydra,eagle \
        --tree-budget 8 --batch-size 4,16 > "$work/batches.txt" 2>&1
    echo "batches rc=$?" >> "$work/status.txt"; pack
fi
want eager && { STEPS=eager T_EAGER=${T_EAGER:-120} bash "$here/gpu_regimes.sh" "$work/cudagraphs"; pack; }
want inductor && { STEPS=regimes T_REGIMES=${T_INDUCTOR:-60} BACKEND=inductor bash "$here/gpu_regimes.sh" "$work/inductor"; pack; }
cat "$work"/*/status.txt "$work/status.txt" 2>/dev/null
grep -h "compiled .* in \|tok/s\|ratio" "$work"/*/regimes.txt 2>/dev/null | tail -20
