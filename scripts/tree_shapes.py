"""Is the static tree's shape a lever? Three constructions of a medusa/hydra checkpoint's tree, compared:

- ``accuracies``: per-depth accuracies multiplied as if independent (what the drafters build);
- ``rank-paths``: the most frequent measured rank paths of the held-out positions (the best tree for the
  mean over positions: a node counts exactly when the position's ranks begin with its path);
- ``walk-greedy``: grown one node at a time to maximise `static_tree.decode_walk_tau` (positions weighted
  as decoding visits them) on one half of the held-out samples.

Each is scored by decode-walk tau on both halves of the held-out samples (the fitted half and the other)
and on all of them, beside the mean over positions,
and with ``--bench`` replayed on that benchmark's recorded greedy trajectories (`specbench.replay`), the
tree passed as rank paths (the drafters' ``choices`` option), so the tau equals a timed run's.

    python scripts/tree_shapes.py --cache DIR --checkpoint STEM [--bench mt_bench --limit 2] [--budgets 4,8,16,32]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch

from specbench.drafters.medusa import DEFAULT_MAX_RANK
from specbench.drafters.static_tree import StaticTree, decode_walk_tau, matched_depth
from specbench.drafters.training.heads import heldout_inputs, load_trained_heads, split_samples, true_ranks
from specbench.errors import SpecbenchError
from specbench.model import load_target


def most_frequent_paths(sequences: list[list[list[int]]]) -> list[tuple[int, ...]]:
    """Rank-path prefixes of every position, most frequent first (ties: shorter, then smaller)."""
    counts: dict[tuple[int, ...], int] = {}
    for sequence in sequences:
        for ranks in sequence:
            path: tuple[int, ...] = ()
            for rank in ranks:
                if rank < 0:
                    break
                path += (rank,)
                counts[path] = counts.get(path, 0) + 1
    return [p for p, _ in sorted(counts.items(), key=lambda item: (-item[1], len(item[0]), item[0]))]


def position_mean(paths, sequences: list[list[list[int]]]) -> float:
    """What the tree accepts (drafts + bonus) averaged over every position, as if each were a step: the
    usual offline estimate, which decoding does not see (it skips the positions inside accepted runs)."""
    nodes, total, count = set(paths), 0, 0
    for sequence in sequences:
        for position, ranks in enumerate(sequence):
            total, count = total + min(matched_depth(ranks, nodes) + 1, len(sequence) - position), count + 1
    return total / max(count, 1)


def walk_greedy(sequences: list[list[list[int]]], size: int) -> list[tuple[int, ...]]:
    """Rank paths added one at a time, each the child of a chosen node that most raises the decode-walk tau."""
    seen = set(most_frequent_paths(sequences))
    chosen: list[tuple[int, ...]] = []
    taken = {()}
    while len(chosen) < size - 1:
        candidates = [p for p in seen if p not in taken and p[:-1] in taken]
        if not candidates:
            break
        best = max(candidates, key=lambda p: (decode_walk_tau(taken | {p}, sequences), -len(p), [-r for r in p]))
        chosen.append(best)
        taken.add(best)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="medusa or hydra checkpoint stem")
    parser.add_argument("--cache", required=True, help="distillation cache; its held-out split is used")
    parser.add_argument("--budgets", default="4,8,16,32")
    parser.add_argument("--bench", default=None, help="also replay on this benchmark (e.g. mt_bench)")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--model", default="default")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    budgets = [int(b) for b in args.budgets.split(",")]
    try:
        target = load_target(args.model, "cpu", "float32")
        drafter = load_trained_heads(Path(args.checkpoint), target)
        module, recipe, vocab = drafter.module, drafter.recipe, drafter.vocab
        method, config = recipe["method"], recipe["hyperparameters"]
        hidden, windows = heldout_inputs(module, Path(args.cache), config["num_heads"])
        ranks = true_ranks(module, target, hidden.float(), windows, DEFAULT_MAX_RANK, 512, vocab)  # [N, K]
        sequences = split_samples(ranks, windows)
        fit, check = sequences[::2], sequences[1::2]
        accuracy = [r[:DEFAULT_MAX_RANK] for r in recipe["metrics"]["heldout_topk_accuracy"]]
        largest = max(budgets)
        # every construction's paths are best first, so a budget's tree is the first budget - 1 of them
        trees = {"accuracies": list(StaticTree.from_accuracies(accuracy, largest).paths[1:]),
                 "rank-paths": most_frequent_paths(fit)[: largest - 1],
                 "walk-greedy": walk_greedy(fit, largest)}
        rows = []
        for name, paths in trees.items():
            for budget in budgets:
                nodes = [()] + paths[: budget - 1]
                rows.append({"tree": name, "budget": budget, "walk_tau_fit": decode_walk_tau(nodes, fit),
                             "walk_tau_check": decode_walk_tau(nodes, check),
                             "walk_tau_all": decode_walk_tau(nodes, sequences),
                             "position_mean_all": position_mean(nodes, sequences)})
        if args.bench:
            rows = replay_on_bench(args, target, method, trees, budgets, rows)
        for row in rows:
            print(json.dumps(row))
    except SpecbenchError as error:
        print(f"tree_shapes: error: {error}", file=sys.stderr)
        sys.exit(2)


def replay_on_bench(args, target, method: str, trees: dict, budgets: list[int], rows: list[dict]) -> list[dict]:
    """Add each tree's replayed tau on ``args.bench`` (the trees passed as ``choices`` files)."""
    from specbench.prompts import PromptBuilder
    from specbench.questions import load_questions, resolve_bench, select_questions
    from specbench.registry import create_drafter
    from specbench.replay import question_trajectories, sweep

    prompts = PromptBuilder(target.tokenizer, None)
    questions = select_questions(load_questions(resolve_bench(args.bench)), None, args.limit)
    turns = [(q.category, t) for q in questions for t in question_trajectories(target, prompts, q, args.max_new_tokens)]
    drafters = {}
    with tempfile.TemporaryDirectory() as folder:
        for name, paths in trees.items():
            if name == "accuracies":  # the drafter's own rule, as shipped
                drafters[name] = create_drafter(method, checkpoint=args.checkpoint)
                continue
            choices = Path(folder) / f"{name}.json"
            choices.write_text(json.dumps([list(p) for p in paths]))
            drafters[name] = create_drafter(method, checkpoint=args.checkpoint, choices=str(choices))
        table = sweep(target, drafters, turns, budgets, args.max_new_tokens)
    overall = table[table.category == "overall"].set_index(["drafter", "budget"])["tau"]
    return [row | {f"{args.bench}_tau": float(overall[(row["tree"], row["budget"])])} for row in rows]


if __name__ == "__main__":
    main()
