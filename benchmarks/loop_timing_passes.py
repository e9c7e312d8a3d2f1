"""How much the loop's one-node verify time (`auto`'s v1) moves from one timed pass to the next.

`auto` weighs replayed draft milliseconds against v1, timed by plain decoding of the calibration set's first
prompt. One main job's v1 came out 1.41x its run's own verify step, which made every drafter's drafting look that
much cheaper; `choose.measure_loop_timing` therefore keeps the fastest of ``TIMING_PASSES`` timed passes. This
prints, for a few rounds, each pass's median verify ms and the one kept, on the default model (fp32, 2 threads).
Time it alone on the machine.

Run:  python -m benchmarks.loop_timing_passes [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

import torch

from specbench.harness.autobudget import choose
from specbench.harness.autobudget.calibration import default_calibration_file
from specbench.model import load_target
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target()
    question = load_questions(default_calibration_file())[0]
    prompt = PromptBuilder(target.tokenizer).build(question.turns[:1], [])
    print("| round | v1 per timed pass (ms) | kept | seconds |\n| ---: | --- | ---: | ---: |")
    for round_ in range(args.rounds):
        start = time.perf_counter()
        passes = choose.loop_timing_passes(target, prompt)
        kept = min(timing.verify1_ms for timing in passes)
        shown = " / ".join(f"{timing.verify1_ms:.1f}" for timing in passes)
        print(f"| {round_ + 1} | {shown} | {kept:.1f} | {time.perf_counter() - start:.1f} |", flush=True)


if __name__ == "__main__":
    main()
