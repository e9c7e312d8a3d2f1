"""How much of the target's greedy output a draft vocabulary can propose: the checkpoint's cut, larger
cuts, and the cut plus the tokens already in the sequence (the ``context_vocab`` option).

A token counts as covered when the drafter could have proposed it at the step that produced it: it is
in the cut, or (with the context) it occurs in the prompt or earlier in the answer.

Usage: SPECBENCH_DATA=../shared/data python scripts/draft_vocab_coverage.py --bench mt_bench --limit 2
       [--checkpoint STEM] [--sizes 4096,8192,16384,32768] [--examples 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from safetensors.torch import load_file

from specbench.drafters.checkpointed import default_checkpoint
from specbench.drafters.draft_vocab import DEFAULT_DRAFT_VOCAB, RANKING_KEY
from specbench.model import cache_root, load_target
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions, resolve_bench, select_questions
from specbench.trajectory_cache import replay_trajectories


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default="mt_bench")
    parser.add_argument("--limit", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--checkpoint", default=None, help="stem whose token ranking to use (default: shipped hydra)")
    parser.add_argument("--sizes", default="4096,8192,16384,32768")
    parser.add_argument("--examples", type=int, default=0, help="print the missed tokens of this many turns")
    args = parser.parse_args()

    target = load_target("default")
    stem = Path(args.checkpoint) if args.checkpoint else default_checkpoint("hydra", target.handle)
    ranking = load_file(f"{stem}.safetensors")[RANKING_KEY].long()  # [V], most frequent first
    position = torch.empty_like(ranking)
    position[ranking] = torch.arange(len(ranking))  # token id -> its rank
    questions = select_questions(load_questions(resolve_bench(args.bench)), None, args.limit)
    recorded, _ = replay_trajectories(target, PromptBuilder(target.tokenizer, None), questions, args.max_new_tokens,
                                      None, cache_root())
    turns = [turn for per_turn in recorded for turn in per_turn]
    answers = torch.cat([turn.continuation for turn in turns])  # [N] every greedy token
    print(f"{args.bench}: {len(turns)} turns, {len(answers)} greedy tokens; ranking from {stem.name}")
    for size in (int(s) for s in args.sizes.split(",")):
        print(f"  cut {size:>6}: coverage {(position[answers] < size).float().mean().item():.4f}")

    cut, covered, extra_rows = DEFAULT_DRAFT_VOCAB, 0, []
    for number, turn in enumerate(turns):
        prompt, answer = turn.prompt.tolist(), turn.continuation.tolist()
        seen = set(prompt)
        missed = []
        for token in answer:
            if position[token] < cut or token in seen:
                covered += 1
            else:
                missed.append(token)
            seen.add(token)
        extra_rows.append(sum(1 for token in seen if position[token] >= cut))
        if number < args.examples and missed:
            print(f"  turn {number}: missed {target.tokenizer.decode(missed)!r}")
    print(f"  cut {cut} + the sequence's own tokens: coverage {covered / len(answers):.4f}, extra rows per turn: "
          f"mean {sum(extra_rows) / len(extra_rows):.1f}, max {max(extra_rows)}")


if __name__ == "__main__":
    main()
