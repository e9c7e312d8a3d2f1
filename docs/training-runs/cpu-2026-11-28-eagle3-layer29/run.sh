#!/usr/bin/env bash
# Is eagle3's first draft held back by its top feature layer? The states entering layers 2, 15 and 29 (not 27) of
# the first 3,000 train prompts (the committed token files, as cpu-2026-11-27-eagle3's cache), then eagle3 3,000 x 2
# with a 16,384-token draft vocabulary exactly as that run's eagle3-3000x2-v16384, whose learning curve is the
# baseline at every 250 steps; then the replay. Resumable (the distill keeps finished shards, the training its
# partial checkpoint). WORK as in cpu-2026-11-28-eagle3-full.
export CACHE=${WORK:-/work/e3}/cache3k-l29
source "$(dirname "$0")/../cpu-2026-11-28-eagle3-full/lib.sh"
echo "$(date +%T) distill -> $cache"
/usr/bin/time -f "distill %e s" .venv/bin/specbench distill --model default --tokens-from data/distill-tokens/SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f \
    --train 3000 --heldout 64 --aux-layers 2,15,29 --threads 2 --no-progress --out "$cache" || exit 1
train eagle3 eagle3-3000x2-v16384-l29 --epochs 2 --samples-per-step 4 --lr 1e-3 --draft-vocab 16384 --dtype bfloat16 \
    --checkpoint-steps 250
replay eagle3 eagle3-3000x2-v16384-l29
