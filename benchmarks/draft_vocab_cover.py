"""What a reduced draft vocabulary costs, from a stored run's answers: how many of the target's tokens an eagle3
checkpoint can draft at all, and how much tau a drafter that scores the whole vocabulary would lose if capped to it.

EAGLE-3 scores only its own draft vocabulary (d2t: the most frequent response tokens of its training data). A
token outside it can never be drafted, so a step whose next token lies outside ends at the bonus token. For each
checkpoint this reads its d2t and, from a run directory's answers: the share of vanilla's output tokens inside
that vocabulary, and for each whole-vocabulary drafter in the run (eagle, hydra, ...) the tau it loses when each
of its steps keeps only the accepted tokens before the first one outside (an upper bound on what the cap costs a
drafter as good as it). It reads only stored files; nothing is timed.

Run:  python -m benchmarks.draft_vocab_cover docs/runs/main-job-5628b80 \
          drafters/checkpoints/eagle3-SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from safetensors import safe_open

from specbench.drafters.eagle3 import token_ids_of_rows
from specbench.results import Answer, load_run

BASELINE = "vanilla"


def draft_vocabulary(stem: Path) -> set[int]:
    """The token ids an eagle3 checkpoint drafts (what `Eagle3Module.token_ids` gives a loaded module; read here
    from the file's d2t, without building one)."""
    with safe_open(f"{stem}.safetensors", "pt") as weights:
        offsets = weights.get_tensor("d2t")  # [V']
    return set(token_ids_of_rows(offsets).tolist())


def capped_tau_loss(answers: list[Answer], vocabulary: set[int]) -> tuple[float, float]:
    """(tau lost per step, share of steps that lose any) when every step's accepted drafts stop at the first token
    outside ``vocabulary``."""
    steps = lost = hit = 0
    for answer in answers:
        for ids, turn in zip(answer.output_ids, answer.steps):
            position = 1  # a turn's first token comes from the prefill; each step emits its drafts, then the bonus
            for length in (step.accepted for step in turn):
                drafts = ids[position:position + length - 1]
                outside = next((k for k, token in enumerate(drafts) if token not in vocabulary), None)
                if outside is not None:
                    lost, hit = lost + len(drafts) - outside, hit + 1
                steps, position = steps + 1, position + length
    return lost / steps, hit / steps


def coverage(answers: list[Answer], vocabulary: set[int], context: bool = False) -> float:
    """The share of the answers' output tokens inside ``vocabulary``; with ``context`` also those earlier in the
    same question's answers (what ``eagle3.context_vocab`` adds as the target's rows; the prompt's own tokens,
    which it adds too, are not stored in answers, so that share is a lower bound)."""
    inside = total = 0
    for answer in answers:
        seen: set[int] = set()
        for ids in answer.output_ids:
            for token in ids:
                inside, total = inside + (token in vocabulary or token in seen), total + 1
                if context:
                    seen.add(token)
    return inside / total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a run directory with its answers (vanilla's among them)")
    parser.add_argument("checkpoints", type=Path, nargs="+", help="eagle3 checkpoint stems (no suffix)")
    args = parser.parse_args(argv)
    runs = load_run(args.run)
    uncapped = [name for name in sorted(runs) if name not in (BASELINE, "eagle3")]
    print("| checkpoint | draft vocabulary | vanilla's tokens inside | inside or earlier in the answer | " +
          " | ".join(f"{name}: tau lost (steps hit)" for name in uncapped) + " |")
    print("| --- | ---: | ---: | ---: |" + " ---: |" * len(uncapped))
    for stem in args.checkpoints:
        vocabulary = draft_vocabulary(stem)
        cells = [f"{loss:.3f} ({share:.3f})" for loss, share in
                 (capped_tau_loss(runs[name], vocabulary) for name in uncapped)]
        print(f"| {stem.name} | {len(vocabulary)} | {coverage(runs[BASELINE], vocabulary):.3f} | "
              f"{coverage(runs[BASELINE], vocabulary, context=True):.3f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
