#!/usr/bin/env bash
# eagle3 on every train prompt (12,573), one epoch, warm-started from the 3,000 x 2 16,384-token run (s36/s37), then
# its replay on MT-bench limit 2. Resumable: rerunning it goes on from $WORK/eagle3-full16k.partial.pt.
# WORK (default /work/e3) holds the auxiliary cache (cache3k, grown to every prompt) and the warm-start stem.
set -uo pipefail
cd "$(dirname "$0")/../../.."
work=${WORK:-/work/e3}
export SPECBENCH_NO_PROGRESS=1 SPECBENCH_DATA=${SPECBENCH_DATA:-/work/shared/data}
while pgrep -f "specbench distill" > /dev/null; do sleep 20; done  # the cache being grown beside it
echo "$(date +%T) train"
/usr/bin/time -f "train %e s" .venv/bin/specbench train eagle3 --model default --cache "$work/cache3k" --epochs 1 \
    --samples-per-step 4 --lr 1e-3 --dtype bfloat16 --checkpoint-steps 300 --threads 2 --no-progress \
    --init-from "$work/eagle3-3000x2-v16384" --out-checkpoint "$work/eagle3-full16k"
echo "$(date +%T) replay"
/usr/bin/time -f "replay %e s" .venv/bin/specbench replay --model default --drafters eagle3 \
  --drafter-option "eagle3.checkpoint=$work/eagle3-full16k" --bench mt_bench --limit 2 --max-new-tokens 128 \
  --budgets 4,8,16,32 --threads 2 --out-csv "$work/mtbench-limit2-eagle3-full16k.csv"
echo "$(date +%T) done"
