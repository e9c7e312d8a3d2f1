"""What a tree step costs in the decode loop against plain decoding's step, beside what the profile's bare forward says.

`auto` prices a drafter's verify at v1 * r(n): v1 plain decoding's one-node verify, r(n) the verify-cost profile's
t(n) / t(1), timed by `profile.single_forward` against a fixed 300-token cache. This runs the real loop
(`generate`, stage breakdown on) for plain decoding and each ``--drafters`` entry (``name@budget``) on the first
turns of ``--questions`` demo questions, under each attention kernel (`specbench.attention`), and prints per
(kernel, drafter, tree size) the loop's verify-stage ms per step and its ratio to plain decoding's verify step, beside
the bare forward's ratio at the same size (chains against a ``--prefix``-token cache): where the two part, a tree step
in the loop costs something the profile does not time.

Besides the built-in drafters, two that draft nothing: ``fixed@N`` proposes the root and N - 1 copies of token 0 (no
drafting cost, every draft rejected: a commit that drops slots each step) and ``oracle@N`` the next N - 1 tokens of
plain decoding (every draft accepted: nothing dropped).

Blocks: for each round and prompt, every condition decodes that prompt once (the order rotating), and each ratio is
taken within its block against plain decoding's step in the same block, then the median over blocks: a CPU's pace
drifts by 10% over minutes, and a block keeps the compared decodes seconds apart. A second table gives each
drafter's wall-time speedup over plain decoding under the same kernel (prefill included), also a median of blocks.
Time it alone on the machine.

Run:  python -m benchmarks.tree_step_cost --drafters fixed@2,oracle@2,medusa@2,eagle@2,hydra@4 --questions 3 --rounds 2
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

import torch

from benchmarks.benchlib import first_turn_prompts
from specbench.attention import KERNELS, chosen_attention, use_attention
from specbench.drafter import DraftContext, Drafter
from specbench.drafters.vanilla import VanillaDrafter
from specbench.harness.autobudget.profile import single_forward, tree_of_size
from specbench.harness.loop import generate
from specbench.model import load_target
from specbench.registry import create_drafter
from specbench.tree import DraftTree


class FixedChain(Drafter):
    """The root then ``budget - 1`` copies of token 0: no drafting cost, and (token 0 is never what the default
    model writes here) every draft rejected."""

    def propose(self, ctx: DraftContext) -> DraftTree:
        return DraftTree.chain(ctx.root, [0] * (ctx.budget - 1))


class OracleChain(Drafter):
    """The root then the next ``budget - 1`` tokens of plain decoding of the same prompt (every draft accepted)."""

    def __init__(self, continuations: dict[tuple[int, ...], list[int]]) -> None:
        self.continuations = continuations  # prompt ids -> plain decoding's output ids

    def propose(self, ctx: DraftContext) -> DraftTree:
        for prompt, output in self.continuations.items():
            at = len(ctx.tokens) - len(prompt)  # the root's index in ``output``, plus one
            if 0 < at <= len(output) and ctx.tokens[: len(prompt)].tolist() == list(prompt):
                return DraftTree.chain(ctx.root, output[at : at + ctx.budget - 1])
        raise ValueError("oracle: a prompt it has no plain decoding of")


def verify_by_nodes(result) -> dict[int, list[float]]:
    """Verify-stage ms of each decode step of one `generate` result, by the step's tree size."""
    by_nodes: dict[int, list[float]] = defaultdict(list)
    for step in result.steps:
        by_nodes[step.nodes].append(step.stage_ms["verify"])
    return by_nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drafters", default="fixed@2,oracle@2,medusa@2,eagle@2,hydra@4",
                        help="name@budget, comma-separated (fixed@N and oracle@N: the module docstring's)")
    parser.add_argument("--kernels", default="grouped", help=f"attention kernels, from {', '.join(KERNELS)}")
    parser.add_argument("--questions", type=int, default=3, help="first turns of this many demo questions")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prefix", type=int, default=300, help="the bare forwards' cached prefix (the profile's)")
    parser.add_argument("--bare-repeats", type=int, default=3, help="bare forwards per size, kernel and block")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    target = load_target()
    prompts = first_turn_prompts(target, "demo", args.questions)
    kernels = args.kernels.split(",")
    entries = [("vanilla", 1)] + [(name, int(budget)) for name, budget in
                                  (entry.split("@") for entry in args.drafters.split(",") if entry)]
    plain = {tuple(prompt): generate(target, VanillaDrafter(), prompt, args.max_new_tokens, 1).output_ids
             for prompt in prompts}  # also the warm-up
    made = {"fixed": FixedChain, "oracle": lambda: OracleChain(plain)}
    drafters = {name: made[name]() if name in made else create_drafter(name) for name, _ in entries}
    ratios: dict[tuple, list[float]] = defaultdict(list)  # (kernel, entry, nodes) -> per-block ratio to plain's step
    steps: dict[tuple, list[float]] = defaultdict(list)  # (kernel, entry, nodes) -> every step's verify ms
    speedups: dict[tuple, list[float]] = defaultdict(list)  # (kernel, entry) -> per-block wall speedup over plain's
    bare: dict[tuple, list[float]] = defaultdict(list)  # (kernel, size) -> per-block ratio to one node's forward
    forward = single_forward(target, args.prefix)
    sizes = sorted({1} | {budget for _, budget in entries})
    conditions = [(kernel, name, budget) for kernel in kernels for name, budget in entries]
    block = 0
    with torch.inference_mode():
        for _ in range(args.rounds):
            for prompt in prompts:
                shift = block % len(conditions)
                block += 1
                measured: dict[tuple, dict[int, list[float]]] = {}
                walls: dict[tuple, float] = {}  # condition -> seconds per emitted token of the turn
                for kernel, name, budget in conditions[shift:] + conditions[:shift]:
                    use_attention(target.model, kernel)
                    result = generate(target, drafters[name], prompt, args.max_new_tokens, budget, breakdown=True)
                    measured[kernel, name, budget] = verify_by_nodes(result)
                    walls[kernel, name, budget] = result.wall_s / len(result.output_ids)
                for kernel in kernels:
                    use_attention(target.model, kernel)
                    times = {size: [] for size in sizes}
                    for _ in range(args.bare_repeats):  # the profile's bare forward, sizes interleaved
                        for size in sizes:
                            times[size].append(forward(tree_of_size(size, "chain")))
                    one = statistics.median(times[1])
                    for size in sizes:
                        bare[kernel, size].append(statistics.median(times[size]) / one)
                    step_ms = statistics.fmean(measured[kernel, "vanilla", 1][1])
                    for name, budget in entries:
                        speedups[kernel, f"{name}@{budget}"].append(walls[kernel, "vanilla", 1] / walls[kernel, name, budget])
                        for nodes, values in measured[kernel, name, budget].items():
                            ratios[kernel, f"{name}@{budget}", nodes].append(statistics.fmean(values) / step_ms)
                            steps[kernel, f"{name}@{budget}", nodes].extend(values)
    use_attention(target.model, chosen_attention(target.device))  # the target's own again
    print(f"{block} blocks ({args.rounds} rounds x {len(prompts)} first turns) x {args.max_new_tokens} tokens, "
          f"{args.threads} threads; bare: chains against a {args.prefix}-token cache")
    print("| kernel | drafter | tree nodes | steps | loop verify ms (mean) | loop / plain step (median of blocks) | "
          "bare / one node (median of blocks) |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for (kernel, entry, nodes), values in sorted(ratios.items()):
        bare_cell = f"{statistics.median(bare[kernel, nodes]):.3f}" if (kernel, nodes) in bare else "-"
        print(f"| {kernel} | {entry} | {nodes} | {len(steps[kernel, entry, nodes])} | "
              f"{statistics.fmean(steps[kernel, entry, nodes]):.1f} | {statistics.median(values):.3f} | {bare_cell} |")
    print("\n| kernel | drafter | speedup over plain decoding, same kernel (median of blocks; prefill included) |")
    print("| --- | --- | ---: |")
    for (kernel, entry), values in sorted(speedups.items()):
        print(f"| {kernel} | {entry} | {statistics.median(values):.3f} |")


if __name__ == "__main__":
    main()
