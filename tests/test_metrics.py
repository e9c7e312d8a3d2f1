"""`specbench.metrics` on hand-computed numbers: tau, both speedup conventions, the paired bootstrap CI,
acceptance per depth (unconditional and conditional), the accept-length histogram, and tau's sampling noise
over questions with the miss of a prediction in standard errors."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from specbench import metrics


# ---- tau ------------------------------------------------------------------------------------------------
def test_tau_is_the_mean_accepted_length():
    assert metrics.tau([1, 2, 3, 3, 1]) == pytest.approx(10 / 5)
    assert metrics.tau([4, 1, 2]) == pytest.approx(7 / 3)


def test_tau_of_vanilla_is_exactly_one():
    assert metrics.tau([1] * 17) == 1.0


def test_tau_of_no_steps_is_nan():
    assert math.isnan(metrics.tau([]))


# ---- speedups ---------------------------------------------------------------------------------------------
def test_decode_walk_steps_over_accepted_runs_and_visits_nothing_inside_them():
    emitted = [3, 9, 9, 1, 2, 9, 1]  # steps at 0 (3 tokens), 3, 4 (2 tokens), 6; 1, 2 and 5 are skipped
    visited: list[int] = []
    assert metrics.decode_walk(len(emitted), lambda i: visited.append(i) or emitted[i]) == (7, 4)
    assert visited == [0, 3, 4, 6]
    assert metrics.decode_walk(0, lambda i: 1) == (0, 0)


def test_totals_speedup_single_pair():
    # vanilla: 10 s for 100 tokens = 0.1 s/token; method: 4 s for 80 tokens = 0.05 s/token -> 2.0
    assert metrics.totals_speedup([10.0], [100], [4.0], [80]) == pytest.approx(2.0)


def test_totals_speedup_is_a_ratio_of_totals_not_a_mean_of_ratios():
    # question 1: base 1 s / 10 tok, method 0.5 s / 10 tok (ratio 2)
    # question 2: base 9 s / 90 tok, method 3.0 s / 60 tok (ratio 0.1 / 0.05 = 2)
    # question 3: base 2 s / 20 tok, method 4.0 s / 20 tok (ratio 0.5)
    # totals: base 12 s / 120 tok = 0.1; method 7.5 s / 90 tok = 1/12 -> 1.2
    base_t, base_n = [1.0, 9.0, 2.0], [10, 90, 20]
    meth_t, meth_n = [0.5, 3.0, 4.0], [10, 60, 20]
    assert metrics.totals_speedup(base_t, base_n, meth_t, meth_n) == pytest.approx(1.2)
    # the per-question mean of ratios would be 1.5: make sure that is not what is returned
    assert metrics.totals_speedup(base_t, base_n, meth_t, meth_n) != pytest.approx(1.5)


def test_totals_speedup_accepts_pandas_series():
    args = [pd.Series(v) for v in ([10.0, 5.0], [100, 50], [4.0, 2.0], [80, 40])]
    # base 15 s / 150 tok = 0.1; method 6 s / 120 tok = 0.05
    assert metrics.totals_speedup(*args) == pytest.approx(2.0)


def test_mean_throughput_speedup_hand_computed():
    # base throughputs: 100/10 = 10, 50/2 = 25 -> mean 17.5
    # method throughputs: 80/4 = 20, 60/2 = 30 -> mean 25
    # Spec-Bench ratio: 25 / 17.5 = 10/7
    value = metrics.mean_throughput_speedup([10.0, 2.0], [100, 50], [4.0, 2.0], [80, 60])
    assert value == pytest.approx(25 / 17.5)
    # the totals ratio of the same numbers differs: base 12/150 = 0.08, method 6/140 -> 0.08 * 140 / 6
    assert metrics.totals_speedup([10.0, 2.0], [100, 50], [4.0, 2.0], [80, 60]) == pytest.approx(0.08 * 140 / 6)


def test_mean_throughput_speedup_equal_runs_is_one():
    times, tokens = [1.5, 2.0, 0.25], [30, 12, 7]
    assert metrics.mean_throughput_speedup(times, tokens, times, tokens) == pytest.approx(1.0)


# ---- bootstrap CI --------------------------------------------------------------------------------------
# Question 1: base 0.1 s/token, method 0.05 s/token (ratio 2); question 2: base 0.1, method 0.08 (1.25);
# question 3: base 0.1, method 0.1 (1.0). The base time per token is the same everywhere, so every resample's
# totals ratio lies between the smallest and largest per-question ratio.
CI_ARGS = ([2.0, 1.0, 3.0], [20, 10, 30], [1.0, 0.8, 3.0], [20, 10, 30])


def test_bootstrap_ci_contains_the_point_estimate():
    point = metrics.totals_speedup(*CI_ARGS)  # 0.1 / (4.8 / 60) = 1.25
    assert point == pytest.approx(1.25)
    low, high = metrics.bootstrap_speedup_ci(*CI_ARGS)
    assert low <= point <= high
    assert 1.0 <= low < high <= 2.0


def test_bootstrap_ci_with_two_questions_spans_the_two_ratios():
    # n = 2: a quarter of the resamples are (q1, q1) and a quarter (q2, q2), so the 2.5% and 97.5%
    # quantiles are exactly the two per-question ratios.
    low, high = metrics.bootstrap_speedup_ci([1.0, 1.0], [10, 10], [0.5, 0.8], [10, 10])
    assert low == pytest.approx(1.25)
    assert high == pytest.approx(2.0)


def test_bootstrap_ci_is_degenerate_when_every_question_has_the_same_ratio():
    # base 0.5 s/token and method 0.25 s/token in every question (exact binary fractions): every resample's
    # ratio is exactly 2.0
    tokens = [8, 12, 20, 4]
    base = [0.5 * n for n in tokens]
    method = [0.25 * n for n in tokens]
    low, high = metrics.bootstrap_speedup_ci(base, tokens, method, tokens)
    assert low == high == pytest.approx(2.0)


def test_bootstrap_ci_of_identical_runs_is_one_one():
    times, tokens = [0.7, 1.3, 2.9], [11, 17, 40]
    assert metrics.bootstrap_speedup_ci(times, tokens, times, tokens) == pytest.approx((1.0, 1.0))


@pytest.mark.parametrize("n", [0, 1])
def test_bootstrap_ci_of_fewer_than_two_questions_is_nan(n):
    args = ([10.0] * n, [100] * n, [4.0] * n, [80] * n)
    low, high = metrics.bootstrap_speedup_ci(*args)
    assert math.isnan(low) and math.isnan(high)


def test_bootstrap_ci_is_deterministic_for_a_fixed_seed():
    first = metrics.bootstrap_speedup_ci(*CI_ARGS, seed=7)
    again = metrics.bootstrap_speedup_ci(*CI_ARGS, seed=7)
    assert first == again
    assert metrics.bootstrap_speedup_ci(*CI_ARGS) == metrics.bootstrap_speedup_ci(*CI_ARGS, seed=0)


def test_bootstrap_ci_narrows_with_a_lower_level():
    wide = metrics.bootstrap_speedup_ci(*CI_ARGS, level=0.95)
    narrow = metrics.bootstrap_speedup_ci(*CI_ARGS, level=0.5)
    assert wide[0] <= narrow[0] <= narrow[1] <= wide[1]


def test_bootstrap_ci_matches_a_hand_written_resampling():
    # the same resampling written out directly: indices from default_rng(seed).integers(0, n, (B, n))
    resamples, seed = 500, 3
    b_t, b_n, m_t, m_n = (np.asarray(a, float) for a in CI_ARGS)
    idx = np.random.default_rng(seed).integers(0, 3, size=(resamples, 3))
    ratios = [(b_t[i].sum() / b_n[i].sum()) / (m_t[i].sum() / m_n[i].sum()) for i in idx]
    expected = tuple(np.quantile(ratios, [0.025, 0.975]))
    assert metrics.bootstrap_speedup_ci(*CI_ARGS, resamples=resamples, seed=seed) == pytest.approx(expected)


# ---- acceptance per depth ---------------------------------------------------------------------------------
def test_acceptance_by_depth_literal_case():
    # accepted lengths [1, 2, 3, 3, 1] -> accepted drafts [0, 1, 2, 2, 0]
    # depth 1: 3 of 5 steps reached it (unconditional 3/5); of the 5 steps that reached depth 0, 3 (3/5)
    # depth 2: 2 of 5 steps (2/5); of the 3 steps that reached depth 1, 2 (2/3)
    unconditional, conditional = metrics.acceptance_by_depth([1, 2, 3, 3, 1])
    assert unconditional == pytest.approx([3 / 5, 2 / 5])
    assert conditional == pytest.approx([3 / 5, 2 / 3])


def test_acceptance_by_depth_with_max_depth_beyond_the_data():
    # depth 3: nobody reached it (0/5); of the 2 steps at depth 2, none went further (0/2)
    # depth 4: 0/5 unconditional; conditional 0/0 is undefined (NaN)
    unconditional, conditional = metrics.acceptance_by_depth([1, 2, 3, 3, 1], max_depth=4)
    assert unconditional == pytest.approx([3 / 5, 2 / 5, 0.0, 0.0])
    assert conditional[:3] == pytest.approx([3 / 5, 2 / 3, 0.0])
    assert math.isnan(conditional[3])


def test_acceptance_by_depth_truncated_by_max_depth():
    unconditional, conditional = metrics.acceptance_by_depth([1, 2, 3, 3, 1], max_depth=1)
    assert unconditional == pytest.approx([3 / 5])
    assert conditional == pytest.approx([3 / 5])


def test_acceptance_by_depth_conditional_is_ratio_of_unconditionals():
    lengths = [4, 1, 2, 5, 3, 1, 1, 2, 4]
    unconditional, conditional = metrics.acceptance_by_depth(lengths)
    assert len(unconditional) == len(conditional) == max(lengths) - 1
    previous = 1.0
    for u, c in zip(unconditional, conditional):
        assert c == pytest.approx(u / previous)
        previous = u
    # unconditional rates never grow with depth
    assert all(a >= b for a, b in zip(unconditional, unconditional[1:]))


def test_acceptance_by_depth_of_vanilla_has_no_depths():
    assert metrics.acceptance_by_depth([1, 1, 1]) == ([], [])
    assert metrics.acceptance_by_depth([1, 1, 1], max_depth=1) == ([0.0], [0.0])


def test_acceptance_by_depth_of_no_steps():
    assert metrics.acceptance_by_depth([]) == ([], [])
    unconditional, conditional = metrics.acceptance_by_depth([], max_depth=2)
    assert all(math.isnan(v) for v in unconditional + conditional)
    assert len(unconditional) == len(conditional) == 2


# ---- histogram --------------------------------------------------------------------------------------------
def test_accept_length_histogram_literal():
    histogram = metrics.accept_length_histogram([1, 2, 3, 3, 1, 5, 1])
    assert histogram == {1: 3, 2: 1, 3: 2, 5: 1}
    assert list(histogram) == [1, 2, 3, 5]  # sorted by length
    assert all(type(k) is int and type(v) is int for k, v in histogram.items())  # plain ints (JSON-safe)


def test_accept_length_histogram_counts_sum_to_steps():
    lengths = [2, 2, 2, 7]
    histogram = metrics.accept_length_histogram(lengths)
    assert histogram == {2: 3, 7: 1}
    assert sum(histogram.values()) == len(lengths)
    assert sum(k * v for k, v in histogram.items()) == sum(lengths)


def test_accept_length_histogram_of_no_steps_is_empty():
    assert metrics.accept_length_histogram([]) == {}


# ---- tau's sampling noise over questions ------------------------------------------------------------------
def test_ratio_standard_error_hand_computed():
    """Three questions of (tokens, steps) (10, 5), (30, 10), (20, 10): R = 60 / 25 = 2.4, residuals x - R y = -2,
    6, -4, so SE = sqrt(3 / 2 * 56) / 25."""
    assert metrics.ratio_standard_error([10, 30, 20], [5, 10, 10]) == pytest.approx(math.sqrt(1.5 * 56) / 25)


def test_ratio_standard_error_is_zero_when_every_question_has_the_same_ratio_and_nan_below_two():
    assert metrics.ratio_standard_error([4, 8, 2], [2, 4, 1]) == 0.0
    assert math.isnan(metrics.ratio_standard_error([4], [2]))
    assert math.isnan(metrics.ratio_standard_error([], []))


def test_ratio_standard_error_matches_the_spread_of_resampled_ratios():
    """On 400 questions the linearised SE is the standard deviation of the ratio over bootstrap resamples (within
    5%), and it shrinks as 1 / sqrt(n) (a quarter of the questions: twice the SE, within 15%)."""
    rng = np.random.default_rng(7)
    steps = rng.integers(20, 120, size=400).astype(float)  # [n]
    tokens = steps * rng.gamma(9.0, 0.2, size=400)  # [n] per-question tau around 1.8, spread like ngram's
    idx = rng.integers(0, 400, size=(4000, 400))  # [B, n]
    resampled = tokens[idx].sum(axis=1) / steps[idx].sum(axis=1)  # [B]
    se = metrics.ratio_standard_error(tokens, steps)
    assert se == pytest.approx(resampled.std(), rel=0.05)
    assert metrics.ratio_standard_error(tokens[:100], steps[:100]) == pytest.approx(2 * se, rel=0.15)


def test_a_miss_is_counted_in_the_combined_standard_errors_on_the_log_scale():
    """Predicted 1.5 with 5% relative noise; measured 1.2 with a 95% CI [1.0, 1.44] (relative SE ln(1.44) / 3.92):
    ln(1.2 / 1.5) / hypot(0.05, ln(1.44) / 3.92) SEs, negative (under the prediction)."""
    s_m = math.log(1.44) / (2 * metrics.Z95)
    expected = math.log(1.2 / 1.5) / math.hypot(0.05, s_m)
    assert metrics.miss_in_standard_errors(1.5, 0.05, 1.2, 1.0, 1.44) == pytest.approx(expected)
    assert expected < -metrics.Z95  # beyond the noise
    assert abs(metrics.miss_in_standard_errors(1.5, 0.10, 1.4, 1.2, 1.6)) < metrics.Z95  # within it
    assert math.isnan(metrics.miss_in_standard_errors(1.5, float("nan"), 1.2, 1.0, 1.44))  # noise not recorded
    assert math.isnan(metrics.miss_in_standard_errors(1.5, 0.05, 1.2, float("nan"), float("nan")))  # no CI (n < 5)
