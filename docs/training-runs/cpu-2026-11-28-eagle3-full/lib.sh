# Sourced by this run's scripts: the work area, the environment, and the one train and replay command each uses.
# WORK (default /work/e3) holds the checkpoints and the auxiliary cache (CACHE, default WORK/cache3k);
# SPECBENCH_DATA the question files.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
work=${WORK:-/work/e3}
cache=${CACHE:-$work/cache3k}  # the auxiliary cache the scripts train on
export SPECBENCH_NO_PROGRESS=1 SPECBENCH_DATA=${SPECBENCH_DATA:-/work/shared/data}

after() {  # wait while a process matching $1 (the run before this one) is alive
    while pgrep -f "$1" > /dev/null; do sleep 20; done
}

train() {  # train METHOD OUT_STEM [specbench train options...]: on every cached prompt unless limited
    local method=$1 out=$2
    shift 2
    echo "$(date +%T) train $method -> $out"
    /usr/bin/time -f "train %e s" .venv/bin/specbench train "$method" --model default --cache "$cache" \
        --threads 2 --no-progress --out-checkpoint "$work/$out" "$@"
}

first_of_two_epochs() {  # first_of_two_epochs METHOD OUT_STEM [options...]: epoch 1 of a 2-epoch schedule (its
    # warm-up + cosine), stopped once epoch 1 is written, then that epoch's checkpoint written (a rerun resumes)
    local method=$1 stem=$2
    shift 2
    if [ -e "$work/$stem.safetensors" ]; then return 0; fi
    if [ ! -e "$work/$stem.epoch1.pt" ]; then
        train "$method" "$stem" --epochs 2 "$@" &
        while [ ! -e "$work/$stem.epoch1.pt" ] && kill -0 $! 2>/dev/null; do sleep 10; done
        sleep 5; pkill -f "out-checkpoint $work/$stem" ; wait
    fi
    train "$method" "$stem" --epochs 1 "$@"  # resumes from epoch 1 and writes the checkpoint
}

replay() {  # replay METHOD STEM [LIMIT [TAG DRAFTER_OPTION...]]: MT-bench LIMIT (default 2) questions per category, 128
    # new tokens, budgets 4, 8, 16, 32, each DRAFTER_OPTION (key=value) given -> $work/mtbench-limitLIMIT-STEMTAG.csv
    # (kept: a rerun skips a replay whose rows exist)
    local method=$1 stem=$2 limit=${3:-2} tag=${4:-}
    local out="$work/mtbench-limit$limit-$stem$tag.csv" options=()
    if [ -e "$out" ]; then echo "have $out"; return 0; fi
    for option in "${@:5}"; do options+=(--drafter-option "$method.$option"); done
    echo "$(date +%T) replay $stem$tag"
    /usr/bin/time -f "replay %e s" .venv/bin/specbench replay --model default --drafters "$method" \
        --drafter-option "$method.checkpoint=$work/$stem" "${options[@]}" --bench mt_bench --limit "$limit" \
        --max-new-tokens 128 --budgets 4,8,16,32 --threads 2 --out-csv "$out"
    echo "$(date +%T) done"
}
