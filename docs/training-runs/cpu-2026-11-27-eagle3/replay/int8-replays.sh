#!/usr/bin/env bash
# What storing the shipped medusa and eagle3 as int8 rows (and medusa's 7,168-row cut) changes in replayed tau:
# MT-bench limit 2, 128 tokens, budgets 4/8/12/16/32 (the CSVs beside this file). Run from the repository root;
# the float16 medusa is 9a7c4db's shipped one; the float16 eagle3 (eagle3-3000x2-v16384, 29 MB) was not kept,
# its replay is mtbench-limit2-eagle3-3000x2-v16384.csv (budgets 4/8/16/32).
set -euo pipefail
W=${W:-$(mktemp -d)}
S=SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f
mkdir -p "$W/fp16"
for ext in safetensors json; do git show "9a7c4db:drafters/checkpoints/medusa-$S.$ext" > "$W/fp16/medusa-$S.$ext"; done
specbench convert "$W/fp16/medusa-$S" --to int8 --out "$W/int8-8192"
specbench convert "$W/fp16/medusa-$S" --to int8 --own-vocab 7168 --out "$W/int8-7168"   # = the shipped medusa
for spec in "medusa:$W/fp16/medusa-$S:medusa-fp16-8192" "medusa:$W/int8-8192/medusa-$S:medusa-int8-8192" \
            "medusa:$W/int8-7168/medusa-$S:medusa-int8-7168" "eagle3:drafters/checkpoints/eagle3-$S:eagle3-v16384-int8"; do
  IFS=: read -r drafter checkpoint name <<<"$spec"
  specbench replay --model default --drafters "$drafter" --drafter-option "$drafter.checkpoint=$checkpoint" \
    --bench mt_bench --limit 2 --max-new-tokens 128 --budgets 4,8,12,16,32 --threads 2 \
    --out-csv "$W/mtbench-limit2-$name.csv"
done
