"""Is the harness cheap? Two measurements, in one process, side by side.

1. Vanilla path vs transformers' ``generate()``: the same prompts and model (fp32), greedy, both stopping
   at EOS or ``--max-new-tokens``. The two are interleaved per prompt (order alternating) and repeated;
   the figure is the ratio of total throughputs, loop / generate (>= 0.95 is the bar), and every
   prompt's ids must be identical. ``--generate-kernel torch`` runs ``generate()`` on torch's own linear
   kernel (the model as transformers gives it) while the loop keeps the target's (`specbench.linear`):
   how much faster specbench's baseline is than transformers out of the box.
2. The loop's own overhead with ``--breakdown``: ``other_share`` (decode time outside draft, transform,
   verify and accept) for the given drafters, from the same summary code ``specbench run`` uses.

Run:  python benchmarks/harness_overhead.py --bench mt_bench --prompts 8 --max-new-tokens 128
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchlib import first_turn_prompts
from specbench.harness.loop import generate
from specbench.harness.runner import Run, RunConfig
from specbench.linear import KERNELS, use_kernel
from specbench.model import load_target
from specbench.registry import create_drafter
from specbench.reports.summary import write_summary


def time_generate(model, prompt_ids: list[int], max_new_tokens: int, kernel: str,
                  target_kernel: str) -> tuple[float, list[int]]:
    """generate() on ``kernel``'s linear layers (the target's own, ``target_kernel``, restored after)."""
    inputs = torch.tensor([prompt_ids], device=model.device)
    use_kernel(model, kernel)
    try:
        start = time.perf_counter()
        out = model.generate(inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=max_new_tokens,
                             do_sample=False, temperature=None, top_p=None, top_k=None)
        seconds = time.perf_counter() - start
    finally:
        use_kernel(model, target_kernel)
    return seconds, out[0, len(prompt_ids):].tolist()


def compare_with_generate(target, prompts: list[list[int]], max_new_tokens: int, repeats: int,
                          generate_kernel: str | None = None) -> dict:
    kernels = (generate_kernel or target.linear_kernel, target.linear_kernel)
    vanilla = create_drafter("vanilla")
    totals = {"loop_s": 0.0, "generate_s": 0.0, "tokens": 0}
    mismatches = []
    generate(target, vanilla, prompts[0], 16, 1)  # warm-up
    time_generate(target.model, prompts[0], 16, *kernels)
    for r in range(repeats):
        for i, ids in enumerate(prompts):
            order = ("loop", "generate") if (i + r) % 2 == 0 else ("generate", "loop")
            for which in order:
                if which == "loop":
                    result = generate(target, vanilla, ids, max_new_tokens, 1)
                    totals["loop_s"] += result.wall_s
                    loop_ids = result.output_ids
                else:
                    seconds, gen_ids = time_generate(target.model, ids, max_new_tokens, *kernels)
                    totals["generate_s"] += seconds
            totals["tokens"] += len(loop_ids)
            if loop_ids != gen_ids:
                mismatches.append(i)
    totals["loop_tok_s"] = totals["tokens"] / totals["loop_s"]
    totals["generate_tok_s"] = totals["tokens"] / totals["generate_s"]
    totals["throughput_ratio"] = totals["loop_tok_s"] / totals["generate_tok_s"]
    totals["ids_identical"] = not mismatches
    totals["mismatched_prompts"] = mismatches
    totals["kernels"] = {"loop": target.linear_kernel, "generate": kernels[0]}
    return totals


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--bench", default="demo")
    parser.add_argument("--prompts", type=int, default=8, help="first turns of the first N questions")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--drafters", default="vanilla,ngram", help="drafters for the --breakdown part")
    parser.add_argument("--limit", type=int, default=1, help="questions per category for the --breakdown part")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=None, help="write the figures as JSON here")
    parser.add_argument("--generate-kernel", choices=KERNELS, default=None,
                        help="linear kernel for generate() (default: the target's own, specbench.linear)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    target = load_target(args.model)
    prompts = first_turn_prompts(target, args.bench, args.prompts)
    result = {"model": target.name, "threads": torch.get_num_threads(), "max_new_tokens": args.max_new_tokens}
    result["vs_generate"] = compare_with_generate(target, prompts, args.max_new_tokens, args.repeats,
                                                  args.generate_kernel)
    g = result["vs_generate"]
    print(f"vanilla loop ({g['kernels']['loop']}) {g['loop_tok_s']:.2f} tok/s vs generate() "
          f"({g['kernels']['generate']}) {g['generate_tok_s']:.2f} tok/s: "
          f"ratio {g['throughput_ratio']:.3f} over {g['tokens']} tokens; ids identical: {g['ids_identical']}")

    with tempfile.TemporaryDirectory() as folder:
        config = RunConfig(out=folder, model=args.model, drafters=args.drafters.split(","), bench=args.bench,
                           limit=args.limit, max_new_tokens=args.max_new_tokens, breakdown=True, threads=args.threads)
        Run(config, progress=False, target=target).execute()
        summary = write_summary(Path(folder))
    overall = summary[summary["category"] == "overall"].set_index("drafter")
    shares = ["draft_share", "transform_share", "verify_share", "accept_share", "other_share"]
    result["breakdown"] = overall[["tau", "speedup", *shares]].to_dict(orient="index")
    print(overall[["n_questions", "tau", "speedup", *shares]].to_string(float_format=lambda v: f"{v:.4f}"))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
