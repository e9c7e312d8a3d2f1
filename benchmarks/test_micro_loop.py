"""The decode loop's own cost per step: everything in a step but the target forward.

Why: the harness must stay cheap next to the model (docs/performance.md: "other" is ~0.1% of decode time,
the bar is 5%), and every drafter's speedup is measured through it. Subtracting a bare forward from a
loop step would leave a difference of two ~35 ms figures that is smaller than their noise; instead the
target is taken out: a real vanilla turn is run once with every target output recorded
(`benchlib.RecordingTarget`), and the benchmark times `generate` itself on a `benchlib.ReplayTarget`
that hands those outputs back without computing anything. What remains is exactly the loop's work:
buffers, contexts, the drafter's propose and accept (vanilla: a root-only tree), tree validation,
`verify_greedy` (argmax over the vocabulary), the KV commit, emitting and bookkeeping, plus the turn's
set-up (cache, prefill's argmax). Per step: the mean divided by ``extra_info["steps"]``; the cost of the
forward it sits next to is ``verify-chain`` at 1 node (test_micro_verify.py).
"""

from __future__ import annotations

from benchmarks.benchlib import ReplayTarget
from specbench.harness.loop import generate
from specbench.registry import create_drafter

ROUNDS = 30


def test_loop_overhead(benchmark, target, transcript) -> None:
    """One vanilla `generate` turn of the transcript's length (96 tokens: prefill + 95 steps) on the
    replayed target; its output must be the recorded one, token for token."""
    replay = ReplayTarget(transcript.tape, target)
    vanilla = create_drafter("vanilla")
    steps = len(transcript.tape.steps)
    benchmark.group = "loop-overhead"
    benchmark.extra_info.update(steps=steps, tokens=transcript.max_new_tokens)

    result = benchmark.pedantic(generate, args=(replay, vanilla, transcript.prompt_ids, transcript.max_new_tokens, 1),
                                rounds=ROUNDS, warmup_rounds=2)
    assert result.output_ids == transcript.output_ids
    assert len(result.steps) == steps
    if benchmark.stats is not None:  # timed (not --benchmark-disable)
        benchmark.extra_info["mean_per_step_us"] = benchmark.stats.stats.mean / steps * 1e6
