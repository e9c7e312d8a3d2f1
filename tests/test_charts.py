"""Chart and table rules of issue 41 item 4: CIs withheld below `MIN_CI_N` with n shown beside every CI,
the breakdown as shares that sum to 1 over the same stages as the absolute bars (accept + KV commit apart),
markers above the ±10% band, 10 distinct drafter colours with a second cue, and the model labelled with the
dtype it ran in. Figures are built from small literal frames, so each assertion reads off known numbers."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb

from specbench.reports import charts
from specbench.reports.tables import MIN_CI_N, STAGE_LABELS, STAGE_ORDER, ci_cell, model_label

TEN = ["vanilla", "ngram", "medusa", "hydra", "ctc", "ctc-ce", "eagle", "eagle3", "sps", "mine-a", "mine-b"]


# ---- confidence intervals ------------------------------------------------------------------------------------
def test_ci_withheld_below_the_minimum_n_and_n_printed_beside_every_ci():
    assert MIN_CI_N == 5
    assert ci_cell(1.17, 1.17, 1.17, 2) == "1.17 (n=2 < 5: no CI)"  # the degenerate 2-question interval
    assert ci_cell(1.17, 1.0, 1.3, 4) == "1.17 (n=4 < 5: no CI)"
    assert ci_cell(1.17, 1.05, 1.31, 5) == "1.17 [1.05, 1.31] n=5"
    assert ci_cell(1.5, 1.2, 1.8, 80) == "1.50 [1.20, 1.80] n=80"
    assert ci_cell(float("nan"), 1.0, 1.0, 8) == "–"


def _summary(n_category: int, n_overall: int) -> pd.DataFrame:
    rows = []
    for drafter, speedup in (("vanilla", 1.0), ("ngram", 1.4), ("medusa", 1.8)):
        for category, n in (("writing", n_category), ("coding", n_category), ("overall", n_overall)):
            rows.append({"drafter": drafter, "category": category, "n_questions": n, "tau": speedup + 0.3,
                         "speedup": speedup, "speedup_ci_low": speedup - 0.1, "speedup_ci_high": speedup + 0.1})
    return pd.DataFrame(rows)


def _whisker_count(fig) -> int:
    """Error bars drawn: one vertical segment per CI."""
    return sum(len(c.lines[2][0].get_segments()) for ax in fig.axes for c in ax.containers
               if type(c).__name__ == "ErrorbarContainer")


def test_speedup_chart_shows_n_per_category_and_withholds_small_n_whiskers():
    colours = charts.drafter_colours(["vanilla", "ngram", "medusa"])
    fig = charts.speedup_by_category(_summary(2, 16), colours)
    ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert ticks == ["writing\nn=2", "coding\nn=2", "overall\nn=16"]
    assert _whisker_count(fig) == 2  # overall of ngram and medusa; none for the 2-question categories
    assert any("none where n<5" in t.get_text() for t in fig.legends[0].get_texts())
    fig = charts.speedup_by_category(_summary(5, 10), colours)
    assert _whisker_count(fig) == 6 and not any("none where" in t.get_text() for t in fig.legends[0].get_texts())


def test_tau_vs_speedup_names_n_and_withholds_the_overall_ci_below_it():
    colours = charts.drafter_colours(["vanilla", "ngram", "medusa"])
    labels = [t.get_text() for t in charts.tau_vs_speedup({"r": _summary(1, 8)}, colours).legends[0].get_texts()]
    assert "overall (95% CI, n=8)" in labels
    fig = charts.tau_vs_speedup({"r": _summary(1, 3)}, colours)
    assert "overall (n=3; no CI where n<5)" in [t.get_text() for t in fig.legends[0].get_texts()]
    assert all(not np.any(seg[0] != seg[1]) for c in fig.axes[0].containers if type(c).__name__ == "ErrorbarContainer"
               for seg in c.lines[2][0].get_segments())  # every whisker has zero length


# ---- breakdown -----------------------------------------------------------------------------------------------
BREAKDOWN = pd.DataFrame([
    {"drafter": "vanilla", "decode_ms_per_token": 40.0, "verify_share": 0.95, "draft_share": 0.0,
     "transform_share": 0.0, "accept_share": 0.04, "other_share": 0.01},
    {"drafter": "medusa", "decode_ms_per_token": 30.0, "verify_share": 0.80, "draft_share": 0.12,
     "transform_share": 0.0, "accept_share": 0.09, "other_share": -0.01},  # timer rounding: other below 0
])
for _stage in STAGE_ORDER:
    BREAKDOWN[f"{_stage}_ms_per_token"] = BREAKDOWN[f"{_stage}_share"] * BREAKDOWN["decode_ms_per_token"]


def test_stage_shares_sum_to_one_and_keep_accept_apart():
    shares = charts.stage_shares(BREAKDOWN)
    assert list(shares.columns) == list(STAGE_ORDER) and "accept" in shares.columns
    assert np.allclose(shares.sum(axis=1), 1.0)
    assert shares.loc["medusa", "other"] == 0.0 and shares.loc["medusa", "accept"] == pytest.approx(0.09 / 1.01)


def test_both_breakdown_charts_use_the_same_stages():
    legends = []
    for fig in (charts.breakdown_shares(BREAKDOWN), charts.breakdown_bars(BREAKDOWN)):
        legends.append([t.get_text() for t in fig.legends[0].get_texts()])
    assert legends[0] == legends[1] == [STAGE_LABELS[s] for s in STAGE_ORDER]
    assert "accept + KV commit" in legends[0]
    assert not hasattr(charts, "breakdown_pies")


# ---- predicted vs measured -----------------------------------------------------------------------------------
def test_predicted_vs_measured_draws_markers_above_the_band_and_names_n():
    budgets = pd.DataFrame([
        {"drafter": "medusa", "budget": 4, "predicted_speedup": 1.2, "predicted_with_run_tau": 1.25,
         "measured_speedup": 1.22, "ci_low": 1.1, "ci_high": 1.3, "n_questions": 16},
        {"drafter": "ngram", "budget": 8, "predicted_speedup": 1.4, "predicted_with_run_tau": 1.38,
         "measured_speedup": 1.36, "ci_low": 1.36, "ci_high": 1.36, "n_questions": 2},
    ])
    fig = charts.predicted_vs_measured(budgets, charts.drafter_colours(["vanilla", "medusa", "ngram"]))
    ax = fig.axes[0]
    band = next(c for c in ax.collections if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection"))
    markers = [c for c in ax.collections if type(c).__name__ == "PathCollection"]  # the open run-τ markers
    markers += [line for line in ax.lines if line.get_marker() not in (None, "None", "", "_")]  # filled
    assert len(markers) >= 4 and all(m.get_zorder() > band.get_zorder() for m in markers)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "medusa (4), n=16" in labels and "ngram (8), n=2, no CI" in labels


# ---- palette -------------------------------------------------------------------------------------------------
def test_ten_drafters_get_ten_distinct_colours_and_markers():
    colours = charts.drafter_colours(TEN)
    others = [colours[d] for d in TEN if d != "vanilla"]
    assert len(set(others)) == 10 and colours["vanilla"] not in others
    rgb = [np.array(to_rgb(c)) for c in others]
    assert min(np.linalg.norm(a - b) for a, b in itertools.combinations(rgb, 2)) > 0.2
    markers = charts.drafter_markers(TEN)
    assert len({markers[d] for d in TEN if d != "vanilla"}) == 10
    hatches = charts.drafter_hatches(TEN)
    assert len({hatches[d] for d in TEN if d != "vanilla"}) == 10


def test_a_drafter_keeps_its_colour_whichever_others_ran():
    assert charts.drafter_colours(["vanilla", "medusa"])["medusa"] == charts.drafter_colours(TEN)["medusa"]
    assert charts.drafter_colours(["ctc-ce"])["ctc-ce"] == charts.drafter_colours(TEN)["ctc-ce"]
    two_budgets = charts.drafter_colours(["vanilla", "medusa@2", "medusa@4"])
    assert two_budgets["medusa@2"] != two_budgets["medusa@4"]
    medusa, ctc_ce = (np.array(to_rgb(charts.drafter_colours(TEN)[d])) for d in ("medusa", "ctc-ce"))
    assert np.linalg.norm(medusa - ctc_ce) > 0.3  # the pair the issue found hard to tell apart


# ---- model label ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model, dtype, label", [
    ({"name": "SmolLM2-135M-Instruct.Q4_1", "path": "/m/SmolLM2-135M-Instruct.Q4_1.gguf"}, "float32",
     "SmolLM2-135M-Instruct (GGUF Q4_1, run in float32)"),
    ({"name": "gemma-3-270m-q4_k_m", "path": "/m/gemma-3-270m-q4_k_m.gguf"}, "float32",
     "gemma-3-270m (GGUF Q4_K_M, run in float32)"),
    ({"name": "tiny", "path": "/m/tiny.gguf"}, "bfloat16", "tiny (GGUF, run in bfloat16)"),
    ({"name": "vicuna-7b-v1.3", "path": "/hub/vicuna-7b-v1.3"}, "float16", "vicuna-7b-v1.3 (run in float16)"),
])
def test_model_is_labelled_with_the_dtype_it_ran_in(model, dtype, label):
    assert model_label(model, dtype) == label
