#!/usr/bin/env bash
# eagle3 on every train prompt (12,573), one epoch, warm-started from the 3,000 x 2 16,384-token run (s36/s37), then
# its replay on MT-bench limit 2. Resumable: rerunning it goes on from $WORK/eagle3-full16k.partial.pt.
source "$(dirname "$0")/lib.sh"
after "specbench distill"  # the cache being grown beside it
train eagle3 eagle3-full16k --epochs 1 --samples-per-step 4 --lr 1e-3 --dtype bfloat16 --checkpoint-steps 300 \
    --init-from "$work/eagle3-3000x2-v16384"
replay eagle3 eagle3-full16k
