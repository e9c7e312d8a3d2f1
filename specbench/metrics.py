"""Metric formulas (docs/decisions.md, "Counting" and "Timing"), as pure functions of recorded numbers.

- tau: mean accepted length per verification step (accepted drafts + bonus; vanilla = 1.0).
- speedup (headline): (sum vanilla time / sum vanilla tokens) / (sum method time / sum method tokens)
  over the same questions; the 95% CI comes from a paired bootstrap over questions.
- speedup (Spec-Bench's convention): mean per-question method throughput / mean vanilla throughput.
- acceptance per depth: unconditional P(accepted drafts >= d) per step, and conditional
  P(>= d | >= d - 1); optionally counting at depth d only the steps that proposed a node there.
- decode walk (offline, for training's estimates): tau of decoding a known response when each position
  would emit a known number of tokens.
- wall speedup: the wall-time speedup of turns whose decode steps speed up by S when a turn's prefill costs p of
  plain decoding's decode time of it, (1 + p) / (p + 1 / S) (what `auto` predicts; the prefill is the same for
  every drafter).
- sampling noise of tau over questions: the standard error of a ratio of sums (tokens over steps) with the
  questions as units, and how far a prediction misses a measurement in the two's combined standard errors
  (`auto`'s prediction against a run's speedup; docs/decisions.md, "How far off is a prediction?").
- batches: throughput over batch passes (tokens over the passes' measured wall time, each pass once) and
  per-sequence latency percentiles (ms per token).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def tau(accept_lengths: Sequence[int]) -> float:
    return float(np.mean(accept_lengths)) if len(accept_lengths) else float("nan")


def decode_walk(length: int, emitted: Callable[[int], int]) -> tuple[int, int]:
    """(tokens, steps) of greedy decoding through a known response of ``length`` positions, where a step
    rooted at position i emits ``emitted(i)`` >= 1 tokens (its accepted drafts and the bonus) and the next
    step is rooted that many positions on. Positions inside an accepted run are never visited (nor
    computed), so tokens / steps weights hard positions as decoding does, which a mean over positions
    would not."""
    tokens = steps = position = 0
    while position < length:
        count = emitted(position)
        tokens, steps, position = tokens + count, steps + 1, position + count
    return tokens, steps


def totals_speedup(base_time, base_tokens, method_time, method_tokens) -> float:
    """Ratio of time per token, vanilla over method, from totals over paired questions."""
    base = np.sum(base_time) / np.sum(base_tokens)
    method = np.sum(method_time) / np.sum(method_tokens)
    return float(base / method)


def mean_throughput_speedup(base_time, base_tokens, method_time, method_tokens) -> float:
    """Spec-Bench's ratio of mean per-question throughputs."""
    base = np.mean(np.asarray(base_tokens, float) / np.asarray(base_time, float))
    method = np.mean(np.asarray(method_tokens, float) / np.asarray(method_time, float))
    return float(method / base)


def bootstrap_speedup_ci(
    base_time, base_tokens, method_time, method_tokens, resamples: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Paired bootstrap over questions of `totals_speedup`: resample question indices with replacement."""
    arrays = [np.asarray(a, dtype=float) for a in (base_time, base_tokens, method_time, method_tokens)]
    n = len(arrays[0])
    if n < 2:
        return float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))  # [B, n]
    bt, bn, mt, mn = (a[idx].sum(axis=1) for a in arrays)  # each [B]
    ratios = (bt / bn) / (mt / mn)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def ratio_standard_error(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """Standard error of R = sum(numerators) / sum(denominators) when the units (questions) are a sample: the
    linearised (delta-method) estimate sqrt(n / (n - 1) * sum (x_i - R y_i)^2) / sum(y), deterministic where a
    bootstrap would draw. tau over questions is such a ratio (tokens over steps); NaN for fewer than 2 units."""
    x, y = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)  # [n] each
    n = len(x)
    if n < 2 or y.sum() <= 0:
        return float("nan")
    ratio = x.sum() / y.sum()
    return float(np.sqrt(n / (n - 1) * np.sum((x - ratio * y) ** 2)) / y.sum())


#: two-sided 95% point of the standard normal (a CI's half-width in standard errors)
Z95 = 1.959964


def miss_in_standard_errors(predicted: float, predicted_relative_se: float, measured: float, ci_low: float,
                            ci_high: float) -> float:
    """How many combined standard errors a measured speedup lies from a prediction, on the log scale:
    ln(measured / predicted) / sqrt(s_p^2 + s_m^2), s_p the prediction's relative standard error (its tau's
    sampling noise over the calibration questions) and s_m the measurement's, read off its 95% CI as
    ln(high / low) / (2 Z95). Beyond +-Z95 the miss is larger than which questions each set happened to hold
    explains; within it, it is not. NaN when either noise is unknown."""
    values = (predicted, predicted_relative_se, measured, ci_low, ci_high)
    if not all(np.isfinite(values)) or min(predicted, measured, ci_low, ci_high) <= 0:
        return float("nan")
    measured_relative_se = np.log(ci_high / ci_low) / (2 * Z95)
    combined = float(np.hypot(predicted_relative_se, measured_relative_se))
    return float(np.log(measured / predicted) / combined) if combined > 0 else float("nan")


def acceptance_by_depth(
    accept_lengths: Sequence[int], max_depth: int | None = None, proposed_depths: Sequence[int] | None = None
) -> tuple[list[float], list[float]]:
    """(unconditional, conditional) acceptance rate for draft depths 1..max_depth.

    A step with accepted length L accepted L - 1 drafts, i.e. depths 1..L-1.
    Without ``proposed_depths`` every step counts at every depth: unconditional = P(drafts >= d),
    conditional = P(drafts >= d | drafts >= d - 1).
    With ``proposed_depths`` (per step, the deepest proposed node; 0 = proposed nothing) a step counts at
    depth d only if it proposed a node there: unconditional = P(drafts >= d | proposed >= d), conditional =
    P(drafts >= d | drafts >= d - 1 and proposed >= d), so a step that proposed nothing, or proposed
    fewer than d levels, is no rejection at d. ``max_depth`` then defaults to the deepest proposal.
    """
    drafts = np.asarray(accept_lengths, dtype=int) - 1  # [steps]
    proposed = None if proposed_depths is None else np.asarray(proposed_depths, dtype=int)  # [steps]
    if proposed is not None and proposed.shape != drafts.shape:
        raise ValueError(f"proposed_depths has {proposed.size} steps, accept_lengths {drafts.size}")
    if max_depth is None:
        deepest = drafts if proposed is None else proposed
        max_depth = int(deepest.max()) if deepest.size else 0
    unconditional, conditional = [], []
    for depth in range(1, max_depth + 1):
        offered = np.full(drafts.shape, True) if proposed is None else proposed >= depth  # [steps]
        reached = np.count_nonzero(offered & (drafts >= depth))
        steps = np.count_nonzero(offered)
        previous = np.count_nonzero(offered & (drafts >= depth - 1))
        unconditional.append(reached / steps if steps else float("nan"))
        conditional.append(reached / previous if previous else float("nan"))
    return unconditional, conditional


def accept_length_histogram(accept_lengths: Sequence[int]) -> dict[int, int]:
    values, counts = np.unique(np.asarray(accept_lengths, dtype=int), return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts)}


def pass_throughput(passes: Sequence[dict]) -> float:
    """Generated tokens per second over batch passes (each ``{"id", "new_tokens", "wall_s", ...}``, as the
    runner records one per turn at batch size B > 1): sum of tokens over sum of measured wall time, each
    pass counted once however many records name it; NaN for none."""
    unique = {entry["id"]: entry for entry in passes}
    wall = sum(float(entry["wall_s"]) for entry in unique.values())
    if not unique or wall <= 0:
        return float("nan")
    return sum(int(entry["new_tokens"]) for entry in unique.values()) / wall


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (numpy's linear interpolation), NaN for no values (per-sequence ms/token)."""
    return float(np.percentile(values, q)) if len(values) else float("nan")


def wall_speedup(step_speedup: float, prefill_share: float) -> float:
    """The wall-time speedup of turns whose decode steps speed up by ``step_speedup``, when a turn's prefill
    costs ``prefill_share`` of plain decoding's decode time of it: (1 + p) / (p + 1 / S). Monotone in S, and
    between S and 1."""
    return (1 + prefill_share) / (prefill_share + 1 / step_speedup)
