"""What a drafter's propose does to the verify after it: one verification forward timed after each condition.

`auto` prices a step's verify from the verify-cost profile, which times verify after verify; in a run every
verify follows the drafter's propose. On the README's main job of 5628b80 hydra's, medusa's and ctc's 12-node
verify steps ran 1.29x, 1.23x and 1.19x vanilla's one-node verify where the profile gave 1.15, eagle's 1.14x.
This asks whether the propose is why, by timing the same verify forward (a ``--nodes``-node bushy tree against a
``--prefix``-token cache, its slots dropped after) right after each of:

- ``verify``: another verify forward (the profile's condition);
- ``sweep-N``: a read of N MiB of memory that no model uses (``tensor.sum()``), which replaces that much of the
  CPU's caches: if the verify's cost rises with N, the caches are what a propose can take from it;
- each ``--drafters`` name: one real propose of that drafter at ``--budget``, from its state after a few decode
  steps of a real sequence (`benchlib.record_decode_state`; the drafter's state is restored before each);
- ``tree-N`` for each of ``--after-trees``: a verify forward of an N-node bushy tree, as the profile's rotating
  rounds put one size after another. With ``--nodes 1`` this asks whether the profile's one-node time (after
  other sizes) is the one-node time of plain decoding (after one node, back to back), the scale every tree's
  ratio is taken against.

Conditions are timed in rounds, the order rotating, and the median per condition printed with its ratio to
``verify``'s. Time it alone on the machine. On 2026-12-01 (40 rounds) every drafter's propose and both memory reads
came out within 0.98-1.03 of verify-after-verify, so `auto` keeps no verify factor (docs/decisions.md, "No verify
ratio"; the sittings in docs/journal/verify-after-propose-2026-12-01.txt).

Run:  python -m benchmarks.verify_after_propose --drafters hydra,medusa,ctc,eagle --sweeps 64,128,256,512
      python -m benchmarks.verify_after_propose --nodes 1 --drafters "" --sweeps "" --after-trees 2,12,64
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import torch

from benchmarks.benchlib import first_turn_prompts, record_decode_state, rotating_medians, tree_of_size
from specbench.harness.autobudget.profile import single_forward
from specbench.model import load_target
from specbench.registry import create_drafter

DECODE_STEPS = 6  # real decode steps before the proposes timed against (the drafter's state mid-sequence)


def time_verify_after(target, before: dict[str, Callable[[], object] | None], nodes: int, prefix: int,
                      rounds: int, forward: Callable | None = None) -> dict[str, float]:
    """Median ms of one ``nodes``-node bushy verify (against a ``prefix``-token cache, its slots dropped after) right
    after each of ``before``'s actions, over ``rounds`` rotating rounds after an untimed one. The clock starts
    after the action: only the verify is timed, by the profile's own timed forward (`profile.single_forward`).
    ``before`` may name "verify" with None: the verify itself. ``forward``: the timed forward (tree -> ms) when the
    caller's actions share its cache, as the profile's sizes do (default: `profile.single_forward`'s own)."""
    forward = forward or single_forward(target, prefix)  # tree -> ms, its slots dropped after
    tree = tree_of_size(nodes, "bushy")
    actions = {name: (lambda: forward(tree)) if action is None else action for name, action in before.items()}

    def after(action: Callable[[], object]) -> Callable[[], float]:
        return lambda: (action(), forward(tree))[1]  # only the verify after the action is timed

    return rotating_medians({name: after(action) for name, action in actions.items()}, rounds)


def drafter_propose(target, name: str, prompt: list[int], budget: int) -> Callable[[], object]:
    """One real propose of drafter ``name`` at ``budget`` from its state after `DECODE_STEPS` decode steps of
    ``prompt`` (restored before each call, so every call proposes from the same state)."""
    drafter = create_drafter(name)
    state = record_decode_state(target, drafter, prompt, DECODE_STEPS, budget)

    def propose() -> object:
        state.restore(drafter)
        return drafter.propose(state.next_context)

    return propose


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="default")
    parser.add_argument("--drafters", default="hydra,medusa,ctc,eagle")
    parser.add_argument("--sweeps", default="64,128,256,512", help="MiB read before a verify, comma-separated")
    parser.add_argument("--nodes", type=int, default=12, help="the timed verify's tree size")
    parser.add_argument("--after-trees", default="", help="tree sizes whose verify comes before the timed one")
    parser.add_argument("--budget", type=int, default=12, help="the drafters' tree budget")
    parser.add_argument("--prefix", type=int, default=300, help="the timed verify's cached prefix")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    target = load_target(args.model, "cpu")
    prompt = first_turn_prompts(target, "demo", 1)[0]
    sweeps = [int(mib) for mib in args.sweeps.split(",") if mib]
    buffer = torch.ones(max(sweeps, default=0) * 2**18)  # float32: 2**18 per MiB
    before: dict[str, Callable[[], object] | None] = {"verify": None}
    for mib in sweeps:
        before[f"sweep-{mib}"] = (lambda n: lambda: buffer[:n].sum())(mib * 2**18)
    for name in (n for n in args.drafters.split(",") if n):
        before[name] = drafter_propose(target, name, prompt, args.budget)
    forward = single_forward(target, args.prefix)  # one cache for the timed verify and the trees before it
    for size in (int(n) for n in args.after_trees.split(",") if n):
        before[f"tree-{size}"] = (lambda tree: lambda: forward(tree))(tree_of_size(size, "bushy"))
    medians = time_verify_after(target, before, args.nodes, args.prefix, args.rounds, forward)
    print(f"{args.nodes}-node verify against a {args.prefix}-token cache, median of {args.rounds} rounds, "
          f"{args.threads} threads")
    print(f"{'after':>12}  {'verify ms':>9}  {'/ after verify':>14}")
    for name, median in medians.items():
        print(f"{name:>12}  {median:9.2f}  {median / medians['verify']:14.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
