"""``specbench report``: tables, charts, run context and errors, on a synthetic MT-bench run written here.

The fixture (`write_mt_run`) follows the record format of `harness.runner.Run._run_question` key for key:
all 8 MT-bench categories x 2 questions x 2 turns, drafters vanilla, ngram and chain, with per-step
``depth`` (ngram often proposes nothing: depth 0), stage times (``breakdown=True``) and a manifest like
`harness.runner.build_manifest` writes. Chain's turn 2 of question 112 diverges from vanilla at index 3.
Expected numbers are recomputed here from the raw JSON lines with plain Python (`expected_*`), not with
`reports.summary` or `specbench.metrics`.
"""

from __future__ import annotations

import json
import math
import re
import statistics
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specbench import metrics
from specbench.harness.cli import main
from specbench.reports import charts
from specbench.reports.render import tex_escape
from specbench.reports.report import build_report, write_report
from specbench.reports.runs import load_runs
from specbench.reports.summary import summarize
from specbench.reports.tables import category_summary, category_table
from specbench.results import SUMMARY

CATEGORIES = ["writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"]
QUESTIONS = [(81 + 10 * i + j, category) for i, category in enumerate(CATEGORIES) for j in range(2)]
DRAFTERS = ("vanilla", "ngram", "chain")
STAGES = {  # ms per step: draft, transform, verify (+ per node), accept; "other" ms added to wall time
    "vanilla": dict(draft=0.05, verify=40.0, per_node=0.0, accept=2.0, other=0.5),
    "ngram": dict(draft=0.3, verify=42.0, per_node=0.5, accept=2.5, other=0.6),
    "chain": dict(draft=6.0, transform=1.5, verify=44.0, per_node=0.8, accept=3.0, other=0.7),
}
MAX_DEPTH = {"ngram": 5, "chain": 4}
DIVERGING = (112, 1, 3)  # question, turn index, first differing index (chain only)
MANIFEST_COMMAND = ["/x/.venv/bin/specbench", "run", "--bench", "mt_bench", "--limit", "2", "--breakdown"]


def _steps(drafter: str, qid: int, turn: int, decode_tokens: int, breakdown: bool) -> list[dict]:
    """Step records emitting exactly ``decode_tokens`` tokens; deterministic per (drafter, question, turn)."""
    rng = np.random.default_rng([DRAFTERS.index(drafter), qid, turn])
    cost = STAGES[drafter]
    steps, left = [], decode_tokens
    while left > 0:
        if drafter == "vanilla":
            depth, accepted = 0, 1
        else:
            depth = 0 if (drafter == "ngram" and rng.random() < 0.4) else int(rng.integers(1, MAX_DEPTH[drafter] + 1))
            skill = 0.35 + 0.05 * (qid % 10) + (0.3 if qid >= 121 else 0.0)  # coding and later: easier
            accepted = 1
            while accepted - 1 < depth and rng.random() < skill:
                accepted += 1
            accepted = min(accepted, left)
        nodes = 1 + depth * (2 if drafter == "ngram" else 1)
        stage = {"draft": cost["draft"], "verify": cost["verify"] + cost["per_node"] * nodes, "accept": cost["accept"]}
        if "transform" in cost:
            stage["transform"] = cost["transform"]
        steps.append({"nodes": nodes, "depth": depth, "accepted": accepted, "stage_ms": stage if breakdown else None})
        left -= accepted
    return steps


def make_record(drafter: str, qid: int, category: str, breakdown: bool = True) -> dict:
    turns = 2
    output_ids, steps, walls, prefills, divergence = [], [], [], [], []
    for t in range(turns):
        n = 20 + (qid * 7 + t * 5) % 23  # new tokens of this turn (the same for every drafter: lossless)
        ids = [(qid * 31 + t * 17 + i * 7) % 101 for i in range(n)]
        if drafter == "chain" and (qid, t) == DIVERGING[:2]:
            ids = ids[: DIVERGING[2]] + [(x + 1) % 101 for x in ids[DIVERGING[2]:]]
            divergence.append(DIVERGING[2])
        else:
            divergence.append(None)
        output_ids.append(ids)
        turn_steps = _steps(drafter, qid, t, n - 1, breakdown)
        steps.append(turn_steps)
        prefill = 30.0 + t * 10.0
        cost = STAGES[drafter]
        decode = sum(cost["draft"] + cost.get("transform", 0.0) + cost["verify"] + cost["per_node"] * s["nodes"]
                     + cost["accept"] for s in turn_steps)
        walls.append((prefill + decode + cost["other"] * len(turn_steps)) / 1000.0)
        prefills.append(prefill if breakdown else None)
    return {
        "question_id": qid, "category": category, "answer_id": f"{drafter}-{qid}", "model_id": "tiny-llama",
        "tstamp": 1700000000.0 + qid, "drafter": drafter,
        "choices": [{
            "index": 0, "turns": [f"answer {qid}.{t}" for t in range(turns)],
            "new_tokens": [len(ids) for ids in output_ids], "wall_time": walls,
            "decoding_steps": [len(s) for s in steps],
            "accept_lengths": [s["accepted"] for turn in steps for s in turn],
            "output_ids": output_ids, "steps": steps, "prefill_ms": prefills, "wall_time_repeats": [[w] for w in walls],
        }],
        "equal_to_vanilla": all(d is None for d in divergence),
        "first_divergence": [None] * turns if drafter == "vanilla" else divergence,
        "tree_budget": 1 if drafter == "vanilla" else BUDGETS.get(drafter, 16),
    }


BUDGETS = {"ngram": 6, "chain": 16}  # what each synthetic drafter "ran at"


def manifest(model: str = "tiny-llama", device: str = "cpu", breakdown: bool = True, drafters=DRAFTERS) -> dict:
    return {
        "specbench_version": "0.1.0", "git_sha": "0123456789abcdef0123", "command": MANIFEST_COMMAND,
        "started": "2025-01-02T03:04:05+0000",
        "config": {"out": "runs/x", "model": "default", "drafters": list(drafters), "bench": "mt_bench",
                   "categories": None, "limit": 2, "max_new_tokens": 128, "tree_budget": 16, "repeats": 1,
                   "breakdown": breakdown, "device": device, "dtype": "float32", "template": None, "seed": 0,
                   "threads": None, "warmup": True, "resume": False, "drafter_options": {}},
        "model": {"name": model, "path": "/x/model.gguf", "sha256": "feedface" * 8, "architecture": "LlamaForCausalLM",
                  "parameters": 134515008},
        "data": {"path": "/x/mt_bench/question.jsonl", "sha256": "abad1dea" * 8,
                 "questions": [q for q, _ in QUESTIONS]},
        "environment": {"python": "3.11.2", "torch": "2.13.0", "transformers": "5.1.0", "platform": "Linux",
                        "processor": "x86_64", "cpu_count": 2, "torch_threads": 2,
                        "cuda_device": "NVIDIA H100" if device == "cuda" else None},
    }


def write_mt_run(folder: Path, breakdown: bool = True, model: str = "tiny-llama", device: str = "cpu",
                 drafters=DRAFTERS) -> Path:
    (folder / "answers").mkdir(parents=True)
    for drafter in drafters:
        lines = [json.dumps(make_record(drafter, qid, category, breakdown)) for qid, category in QUESTIONS]
        (folder / "answers" / f"{drafter}.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "manifest.json").write_text(json.dumps(manifest(model, device, breakdown, drafters), indent=2))
    return folder


# ---- plain-Python expectations from the raw lines -----------------------------------------------------------
def raw(folder: Path) -> dict[str, list[dict]]:
    files = (folder / "answers").glob("*.jsonl")
    return {p.stem: [json.loads(line) for line in p.read_text().splitlines()] for p in files}


def _select(records: list[dict], category: str) -> list[tuple[dict, list[int]]]:
    """(record, turn indices) for a category, 'overall' or 'turn N'."""
    if category.startswith("turn "):
        return [(r, [int(category[5:]) - 1]) for r in records]
    return [(r, [0, 1]) for r in records if category in ("overall", r["category"])]


def expected(folder: Path, drafter: str, category: str) -> dict:
    records = raw(folder)
    mine, base = _select(records[drafter], category), {r["question_id"]: r for r in records["vanilla"]}
    tokens = sum(r["choices"][0]["new_tokens"][t] for r, ts in mine for t in ts)
    wall = sum(r["choices"][0]["wall_time"][t] for r, ts in mine for t in ts)
    base_tokens = sum(base[r["question_id"]]["choices"][0]["new_tokens"][t] for r, ts in mine for t in ts)
    base_wall = sum(base[r["question_id"]]["choices"][0]["wall_time"][t] for r, ts in mine for t in ts)
    steps = [s for r, ts in mine for t in ts for s in r["choices"][0]["steps"][t]]
    equal = [r["first_divergence"][t] is None for r, ts in mine for t in ts]
    accept = {}
    for d in range(1, 6):
        offered = [s for s in steps if s["depth"] >= d]
        accept[d] = sum(s["accepted"] - 1 >= d for s in offered) / len(offered) if offered else math.nan
    return {"n_questions": len(mine), "new_tokens": tokens, "tokens_per_s": tokens / wall,
            "tau": statistics.mean(s["accepted"] for s in steps),
            "speedup": (base_wall / base_tokens) / (wall / tokens),
            "equal_to_vanilla": sum(equal) / len(equal), "accept": accept,
            "proposed_share": sum(s["depth"] > 0 for s in steps) / len(steps)}


# ---- fixtures ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mt_run(tmp_path_factory) -> Path:
    return write_mt_run(tmp_path_factory.mktemp("mt") / "run")


@pytest.fixture(scope="module")
def rendered(mt_run, tmp_path_factory) -> tuple[Path, list[Path]]:
    """The full report of the synthetic run, every format, charts as PNG + SVG + PDF."""
    out = tmp_path_factory.mktemp("report")
    report = build_report(load_runs([mt_run]))
    return out, write_report(report, out, ["md", "html", "tex", "csv"], ["png", "svg", "pdf"], dpi=80)


@pytest.fixture(scope="module")
def by_category(rendered) -> pd.DataFrame:
    return pd.read_csv(rendered[0] / "csv" / "by_category.csv")


def csv_row(table: pd.DataFrame, drafter: str, category: str) -> pd.Series:
    rows = table[(table["drafter"] == drafter) & (table["category"] == category)]
    assert len(rows) == 1, (drafter, category)
    return rows.iloc[0]


def close(value: float, expected_value: float) -> bool:
    if math.isnan(expected_value):
        return math.isnan(value)
    return value == pytest.approx(expected_value, rel=1e-5, abs=1e-9)


# ---- metrics: acceptance conditioned on the proposed depth --------------------------------------------------
def test_acceptance_by_depth_with_proposed_depths_literal():
    # 5 steps: accepted lengths [1, 2, 3, 1, 2], proposed depths [0, 2, 3, 2, 1]
    # drafts accepted: [0, 1, 2, 0, 1]
    # depth 1: proposing steps 2..5 (4); reached 3 -> 3/4; conditional: same 3/4 (all reached depth 0)
    # depth 2: proposing steps 2, 3, 4 (3); reached: step 3 only -> 1/3; of those that also accepted depth 1
    #          (steps 2, 3) -> 1/2
    # depth 3: proposing step 3 (1); reached: none -> 0/1; conditional: step 3 accepted depth 2 -> 0/1
    unconditional, conditional = metrics.acceptance_by_depth([1, 2, 3, 1, 2], proposed_depths=[0, 2, 3, 2, 1])
    assert unconditional == pytest.approx([3 / 4, 1 / 3, 0.0])
    assert conditional == pytest.approx([3 / 4, 1 / 2, 0.0])
    # without depths the step that proposed nothing is a rejection at depth 1: 3/5
    assert metrics.acceptance_by_depth([1, 2, 3, 1, 2])[0][0] == pytest.approx(3 / 5)


def test_acceptance_by_depth_with_proposed_depths_edge_cases():
    # nothing proposed anywhere: no depths; with max_depth the rates are undefined
    assert metrics.acceptance_by_depth([1, 1], proposed_depths=[0, 0]) == ([], [])
    unconditional, conditional = metrics.acceptance_by_depth([1, 1], max_depth=1, proposed_depths=[0, 0])
    assert math.isnan(unconditional[0]) and math.isnan(conditional[0])
    with pytest.raises(ValueError):
        metrics.acceptance_by_depth([1, 2], proposed_depths=[1])


# ---- tables hold the right numbers --------------------------------------------------------------------------
def test_every_category_overall_and_turn_row_is_present(by_category):
    for drafter in DRAFTERS:
        rows = by_category[by_category["drafter"] == drafter]["category"].tolist()
        assert rows == [*CATEGORIES, "overall", "turn 1", "turn 2"]
    assert by_category["drafter"].drop_duplicates().tolist() == list(DRAFTERS)  # the run's own order


@pytest.mark.parametrize("drafter", ["ngram", "chain"])
@pytest.mark.parametrize("category", [*CATEGORIES, "overall", "turn 1", "turn 2"])
def test_category_numbers_equal_a_recomputation_from_the_answer_files(mt_run, by_category, drafter, category):
    want = expected(mt_run, drafter, category)
    got = csv_row(by_category, drafter, category)
    for key in ("n_questions", "new_tokens", "tokens_per_s", "tau", "speedup", "equal_to_vanilla", "proposed_share"):
        assert close(got[key], want[key]), key
    for d, value in want["accept"].items():
        column = f"accept_{d}"
        assert close(got[column], value) if column in got else math.isnan(value), column
    assert got["speedup_ci_low"] <= got["speedup"] <= got["speedup_ci_high"]


def test_vanilla_rows_are_the_reference(by_category):
    rows = by_category[by_category["drafter"] == "vanilla"]
    assert (rows["tau"] == 1.0).all() and np.allclose(rows["speedup"], 1.0) and (rows["equal_to_vanilla"] == 1.0).all()
    assert (rows["proposed_share"] == 0.0).all()


def test_the_diverging_turn_shows_in_math_and_turn_2(by_category):
    assert close(csv_row(by_category, "chain", "math")["equal_to_vanilla"], 3 / 4)
    assert close(csv_row(by_category, "chain", "turn 2")["equal_to_vanilla"], 15 / 16)
    assert close(csv_row(by_category, "chain", "turn 1")["equal_to_vanilla"], 1.0)
    assert close(csv_row(by_category, "ngram", "overall")["equal_to_vanilla"], 1.0)


def test_markdown_shows_the_csv_numbers(rendered, by_category):
    text = (rendered[0] / "report.md").read_text()
    for drafter in ("ngram", "chain"):
        for category in ("math", "overall", "turn 2"):
            r = csv_row(by_category, drafter, category)
            n = r["n_questions"]  # 2 per category: too few for a CI; 16 overall and per turn
            speedup = (f"{r['speedup']:.2f} [{r['speedup_ci_low']:.2f}, {r['speedup_ci_high']:.2f}] n={n}" if n >= 5
                       else f"{r['speedup']:.2f} (n={n} < 5: no CI)")
            assert (n >= 5) == (category != "math")
            cells = (f"| {drafter} | {category} | {BUDGETS[drafter]} | {n} | {r['tokens_per_s']:.1f} | "
                     f"{r['tau']:.2f} | {speedup} | "
                     f"{100 * r['equal_to_vanilla']:.0f}% | {100 * r['proposed_share']:.0f}% | "
                     f"{100 * r['accept_cond_1']:.0f}% |")
            assert cells in text


def test_paper_table_speedup_over_tau(mt_run, rendered):
    paper = pd.read_csv(rendered[0] / "csv" / "paper.csv")
    assert paper["drafter"].tolist() == list(DRAFTERS)
    text = (rendered[0] / "report.md").read_text()
    header = "| Drafter | tiny-llama |"
    assert header in text
    for drafter in ("ngram", "chain"):
        want = expected(mt_run, drafter, "overall")
        assert f"| {drafter} | {want['speedup']:.2f}× / {want['tau']:.2f} (b{BUDGETS[drafter]}) |" in text  # budgets differ
    assert "| vanilla | 1.00× / 1.00 |" in text
    assert paper["tiny-llama tree_budget"].tolist()[1:] == [BUDGETS[d] for d in DRAFTERS[1:]]


def test_paper_table_names_the_budget_once_when_all_drafters_share_it(tmp_path):
    run = write_mt_run(tmp_path / "run")
    _rewrite(run / "answers" / "ngram.jsonl", lambda rs: [r.update(tree_budget=16) for r in rs])
    write_report(build_report(load_runs([run])), tmp_path / "out", ["md"], [], dpi=60)
    paper = (tmp_path / "out" / "report.md").read_text().split("### Speedup / τ")[1].split("\n\n*")[0]
    assert "(b" not in paper.split("*")[0]
    assert "Every drafter ran at tree budget 16." in (tmp_path / "out" / "report.md").read_text()


def test_category_paper_table_has_all_categories(rendered, mt_run):
    text = (rendered[0] / "report.md").read_text()
    assert "| Drafter | " + " | ".join(CATEGORIES) + " | overall |" in text
    want = expected(mt_run, "chain", "coding")
    assert f"{want['speedup']:.2f}× / {want['tau']:.2f}" in text


def test_acceptance_table_counts_only_proposing_steps(rendered, mt_run):
    table = pd.read_csv(rendered[0] / "csv" / "acceptance_by_depth.csv")
    steps = [s for r in raw(mt_run)["ngram"] for turn in r["choices"][0]["steps"] for s in turn]
    ngram = table[table["drafter"] == "ngram"].set_index("depth")
    assert ngram.index.tolist() == [1, 2, 3, 4, 5]
    for d in range(1, 6):
        offered = [s for s in steps if s["depth"] >= d]
        assert ngram.loc[d, "steps_proposing"] == len(offered)
        assert close(ngram.loc[d, "accepted"], sum(s["accepted"] > d for s in offered) / len(offered))
        previous = [s for s in offered if s["accepted"] >= d]
        assert close(ngram.loc[d, "accepted_given_previous"], sum(s["accepted"] > d for s in previous) / len(previous))
    assert "vanilla" not in set(table["drafter"])


def test_histogram_table_counts_steps(rendered, mt_run):
    table = pd.read_csv(rendered[0] / "csv" / "accept_lengths.csv")
    lengths = [a for r in raw(mt_run)["chain"] for a in r["choices"][0]["accept_lengths"]]
    chain = table[table["drafter"] == "chain"].set_index("accepted_length")
    for length in set(lengths):
        assert chain.loc[length, "steps"] == lengths.count(length)
    assert chain["steps"].sum() == len(lengths) and close(chain["share"].sum(), 1.0)


def test_breakdown_table_shares_and_ms_per_token(rendered, mt_run):
    table = pd.read_csv(rendered[0] / "csv" / "latency_breakdown.csv").set_index("drafter")
    records = raw(mt_run)["chain"]
    steps = [s for r in records for turn in r["choices"][0]["steps"] for s in turn]
    decode_ms = sum(sum(r["choices"][0]["wall_time"]) * 1000 - sum(r["choices"][0]["prefill_ms"]) for r in records)
    decoded = sum(s["accepted"] for s in steps)
    assert close(table.loc["chain", "decode_ms_per_token"], decode_ms / decoded)
    for stage in ("draft", "transform", "verify", "accept"):
        assert close(table.loc["chain", f"{stage}_share"], sum(s["stage_ms"][stage] for s in steps) / decode_ms)
    assert close(table.loc["chain", "other_share"], 0.7 * len(steps) / decode_ms)  # the fixture's "other" cost
    shares = table[[f"{s}_share" for s in ("verify", "draft", "transform", "accept", "other")]].sum(axis=1)
    assert np.allclose(shares, 1.0)


# ---- formats --------------------------------------------------------------------------------------------
def test_every_format_is_written(rendered):
    out, written = rendered
    names = {p.relative_to(out).as_posix() for p in written}
    assert {"report.md", "report.html", "report.tex"} <= names
    assert {f"csv/{n}.csv" for n in ("context", "paper", "by_category", "speedup_tau_by_category",
                                       "acceptance_by_depth", "accept_lengths", "latency_breakdown")} <= names


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def test_html_is_self_contained(rendered):
    text = (rendered[0] / "report.html").read_text()
    parser = _Collector()
    parser.feed(text)
    images = [attrs["src"] for tag, attrs in parser.tags if tag == "img"]
    assert len(images) == 7 and all(src.startswith("data:image/png;base64,") for src in images)
    assert not [tag for tag, attrs in parser.tags if tag in ("script", "link")]
    assert not re.search(r"(src|href)=\"?(https?:)?//", text)
    assert "<table>" in text and "tiny-llama" in text


def test_latex_uses_booktabs_and_escapes(rendered):
    text = (rendered[0] / "report.tex").read_text()
    assert text.count(r"\begin{table}") == text.count(r"\end{table}") >= 7
    assert text.count(r"\toprule") == text.count(r"\bottomrule") == text.count(r"\begin{tabular}")
    assert r"$\tau$" in text and r"$\times$" in text and "Speedup [95\\% CI]" in text
    assert "tiny-llama" in text and r"\includegraphics[width=1.00\linewidth]{charts/tau_by_category}" in text
    body = re.sub(r"\\[{}%&_#$]", "", text)
    assert body.count("{") == body.count("}")
    assert "τ" not in text and "×" not in text  # every non-ASCII symbol is translated
    assert not re.search(r"(?<!\\)_", re.sub(r"\\(label|includegraphics)(\[[^]]*\])?\{[^}]*\}", "", text))


def test_run_context_in_every_format(rendered):
    out = rendered[0]
    for name in ("report.md", "report.html", "report.tex"):
        text = (out / name).read_text()
        for needle in ("tiny-llama", "LlamaForCausalLM", "float32", "x86_64", "torch 2.13.0", "transformers 5.1.0",
                       "2025-01-02T03:04:05", "specbench run --bench mt", "Tree budget", "Command line"):
            assert (tex_escape(needle) if name.endswith(".tex") else needle) in text, (name, needle)
    context = pd.read_csv(out / "csv" / "context.csv").set_index("Field")["tiny-llama"]
    assert context["Tree budget"] == "16" or context["Tree budget"] == 16
    assert context["Command line"] == "specbench run --bench mt_bench --limit 2 --breakdown"
    assert context["dtype"] == "float32" and context["Device"] == "cpu (x86_64)"


# ---- charts ------------------------------------------------------------------------------------------------
CHARTS = ("tau_by_category", "speedup_by_category", "breakdown_shares", "breakdown_bars", "acceptance_by_depth",
          "accept_length_hist", "tau_vs_speedup")


@pytest.mark.parametrize("name", CHARTS)
def test_every_chart_renders_in_every_format(rendered, name):
    folder = rendered[0] / "charts"
    png = (folder / f"{name}.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert (folder / f"{name}.pdf").read_bytes()[:5] == b"%PDF-"
    svg = (folder / f"{name}.svg").read_text()
    assert "<svg" in svg and "<text" in svg  # text stays text (svg.fonttype none)


def _boxes(fig, texts):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [t.get_window_extent(renderer) for t in texts if t.get_text()]


def _overlaps(boxes) -> list[tuple[int, int]]:
    return [(i, j) for i in range(len(boxes)) for j in range(i + 1, len(boxes)) if boxes[i].overlaps(boxes[j])]


def test_category_chart_labels_do_not_overlap(mt_run):
    summary = category_summary(load_runs([mt_run])[0].answers)
    colours = charts.drafter_colours(list(summary["drafter"]))
    for fig in (charts.tau_by_category(summary, colours), charts.speedup_by_category(summary, colours)):
        ax = fig.axes[0]
        ticks = _boxes(fig, ax.get_xticklabels())
        assert len(ticks) == 9 and not _overlaps(ticks)
        legend = fig.legends[0].get_window_extent(fig.canvas.get_renderer())
        assert not legend.overlaps(ax.get_window_extent(fig.canvas.get_renderer()))  # the legend sits above


@pytest.mark.parametrize("drafters", [("vanilla", "ngram"), DRAFTERS])
def test_breakdown_share_bars_sum_to_100_and_keep_the_legend_clear(tmp_path, drafters):
    report = build_report(load_runs([write_mt_run(tmp_path / "run", drafters=drafters)]))
    fig = next(c for c in report.sections[1].charts if c.name == "breakdown_shares").figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    per_bar: dict[float, float] = {}
    for bar in ax.patches:
        per_bar[round(bar.get_y(), 6)] = per_bar.get(round(bar.get_y(), 6), 0.0) + bar.get_width()
    assert len(per_bar) == len(drafters) and all(abs(total - 100) < 1e-6 for total in per_bar.values())
    legend = fig.legends[0].get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer))
    assert fig.bbox.x0 <= legend.x0 and legend.x1 <= fig.bbox.x1  # nothing cut off


def test_runs_without_breakdown_skip_breakdown_charts_with_a_note(tmp_path):
    run = write_mt_run(tmp_path / "run", breakdown=False)
    out = tmp_path / "report"
    report = build_report(load_runs([run]))
    written = write_report(report, out, ["md", "csv"], ["png"], dpi=60)
    names = {p.name for p in written}
    assert "tau_by_category.png" in names and "acceptance_by_depth.png" in names
    assert "breakdown_shares.png" not in names and "breakdown_bars.png" not in names
    assert not (out / "csv" / "latency_breakdown.csv").exists()
    assert "charts breakdown_shares, breakdown_bars skipped: no stage times (the run was recorded with --no-breakdown)" \
        in report.notes
    assert "with --no-breakdown" in (out / "report.md").read_text()


def test_a_run_of_vanilla_alone_skips_the_comparison_charts(tmp_path):
    run = write_mt_run(tmp_path / "run", drafters=("vanilla",))
    report = build_report(load_runs([run]))
    names = {c.name for s in report.sections for c in s.charts}
    assert names == {"tau_vs_speedup", "breakdown_shares", "breakdown_bars"}
    write_report(report, tmp_path / "out", ["md", "html", "tex", "csv"], ["png"], dpi=60)


def test_a_run_without_vanilla_has_tau_but_no_speedup(tmp_path):
    run = write_mt_run(tmp_path / "run", drafters=("ngram", "chain"))
    report = build_report(load_runs([run]))
    write_report(report, tmp_path / "out", ["md"], ["png"], dpi=60)
    text = (tmp_path / "out" / "report.md").read_text()
    paper = text.split("### Speedup / τ")[1].split("*")[0]
    assert "| chain | – / " in paper and "vanilla" not in paper
    names = {c.name for s in report.sections for c in s.charts}
    assert "tau_by_category" in names and "speedup_by_category" not in names and "tau_vs_speedup" not in names
    assert any("speedup_by_category" in note for note in report.notes)


def test_records_without_step_depth_fall_back_to_plain_acceptance(tmp_path):
    run = write_mt_run(tmp_path / "run", drafters=("vanilla", "ngram"))
    path = run / "answers" / "ngram.jsonl"
    _rewrite(path, lambda rs: [s.pop("depth") for r in rs for turn in r["choices"][0]["steps"] for s in turn])
    table = category_summary(load_runs([run])[0].answers)
    overall = table[(table["drafter"] == "ngram") & (table["category"] == "overall")].iloc[0]
    lengths = [a for r in raw(run)["ngram"] for a in r["choices"][0]["accept_lengths"]]
    assert close(overall["accept_1"], sum(a >= 2 for a in lengths) / len(lengths))  # every step counts
    assert math.isnan(overall["proposed_share"])


def test_charts_are_reproducible(mt_run, tmp_path):
    summary = category_summary(load_runs([mt_run])[0].answers)
    colours = charts.drafter_colours(list(summary["drafter"]))
    first = charts.save(charts.tau_by_category(summary, colours), tmp_path / "a", ["png", "pdf", "svg"], 60)
    again = charts.save(charts.tau_by_category(summary, colours), tmp_path / "b", ["png", "pdf", "svg"], 60)
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in again]


# ---- several runs -------------------------------------------------------------------------------------------
def test_two_runs_merge_into_one_paper_table(tmp_path, capsys):
    small = write_mt_run(tmp_path / "small", model="tiny-llama")
    other = write_mt_run(tmp_path / "other", model="tiny-qwen", device="cuda")
    out = tmp_path / "merged"
    assert main(["report", str(small), str(other), "--out", str(out), "--charts", "png", "--dpi", "60"]) == 0
    text = (out / "report.md").read_text()
    assert "| Drafter | tiny-llama | tiny-qwen |" in text
    assert "## tiny-llama" in text and "## tiny-qwen" in text
    assert (out / "charts" / "tiny-llama-tau_by_category.png").exists()
    assert (out / "charts" / "tiny-qwen-breakdown_shares.png").exists()
    table = pd.read_csv(out / "csv" / "by_category.csv")
    assert table["run"].drop_duplicates().tolist() == ["tiny-llama", "tiny-qwen"]
    assert "cuda (NVIDIA H100)" in text
    assert not (small / SUMMARY).exists() and not (other / SUMMARY).exists()  # the runs are only read
    assert (out / "summary-tiny-llama.csv").exists() and (out / "summary-tiny-qwen.csv").exists()


def test_runs_of_the_same_model_are_told_apart(tmp_path):
    runs = load_runs([write_mt_run(tmp_path / "a"), write_mt_run(tmp_path / "b", device="cuda")])
    assert [r.label for r in runs] == ["tiny-llama (cpu, float32)", "tiny-llama (NVIDIA H100, float32)"]
    labelled = load_runs([tmp_path / "a", tmp_path / "b"], labels=["CPU", "GPU"])
    assert [r.label for r in labelled] == ["CPU", "GPU"]


def test_identical_labels_are_an_error(tmp_path, capsys):
    run = write_mt_run(tmp_path / "a")
    assert main(["report", str(run), str(run), "--out", str(tmp_path / "o")]) == 2
    assert "labels are not unique" in capsys.readouterr().err


# ---- the command ------------------------------------------------------------------------------------------
def test_report_command_defaults(tmp_path, capsys):
    run = write_mt_run(tmp_path / "run")
    assert main(["report", str(run), "--charts", "png", "--dpi", "60"]) == 0
    out = capsys.readouterr().out
    assert (run / "report" / SUMMARY).exists() and not (run / SUMMARY).exists() and "overall" in out
    assert (run / "report" / "report.md").exists() and (run / "report" / "report.html").exists()
    assert (run / "report" / "charts" / "tau_vs_speedup.png").exists()
    assert "report: " in out and "report.md" in out


def test_report_command_formats_subset(tmp_path):
    run = write_mt_run(tmp_path / "run")
    out = tmp_path / "out"
    assert main(["report", str(run), "--out", str(out), "--formats", "md,csv", "--charts", "none"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["csv", "report.md", "summary.csv"]  # csv: the run's summary too
    assert "![" not in (out / "report.md").read_text()
    assert main(["report", str(run), "--out", str(tmp_path / "md"), "--formats", "md", "--charts", "none"]) == 0
    assert sorted(p.name for p in (tmp_path / "md").iterdir()) == ["report.md"]


@pytest.mark.parametrize("argv, message", [
    (["--formats", "md,docx"], "--formats: unknown format docx"),
    (["--charts", "png,jpg"], "--charts: unknown format jpg"),
    (["--dpi", "10"], "--dpi must be at least 50"),
    (["--labels", "a,b"], "--labels gives 2 names for 1 runs"),
])
def test_report_command_bad_options_exit_2(tmp_path, capsys, argv, message):
    run = write_mt_run(tmp_path / "run")
    assert main(["report", str(run), *argv]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and message in err[0]


def test_several_runs_need_out(tmp_path, capsys):
    run = write_mt_run(tmp_path / "run")
    assert main(["report", str(run), str(run)]) == 2
    assert "needs --out" in capsys.readouterr().err


# ---- malformed or incomplete result files ------------------------------------------------------------------
def _error(tmp_path, capsys, run: Path) -> str:
    assert main(["report", str(run), "--out", str(tmp_path / "out")]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("specbench: error: ")
    assert not (tmp_path / "out").exists()
    return err[0]


def _rewrite(path: Path, change) -> None:
    records = [json.loads(line) for line in path.read_text().splitlines()]
    change(records)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_truncated_line_names_file_and_line(tmp_path, capsys):
    run = write_mt_run(tmp_path / "run")
    path = run / "answers" / "chain.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:5]) + "\n" + lines[5][:50] + "\n")
    assert f"{path}:6: malformed answer record" in _error(tmp_path, capsys, run)


def test_missing_questions_are_an_incomplete_run(tmp_path, capsys):
    run = write_mt_run(tmp_path / "run")
    path = run / "answers" / "ngram.jsonl"
    path.write_text("".join(line + "\n" for line in path.read_text().splitlines()[:13]))
    message = _error(tmp_path, capsys, run)
    assert "is incomplete" in message and "ngram lacks 3 (142, 151, 152)" in message and "--resume" in message
    assert main(["report", str(run), "--out", str(tmp_path / "out"), "--allow-incomplete", "--charts", "none"]) == 0
    text = (tmp_path / "out" / "report.md").read_text()
    assert "incomplete run" in text and "ngram lacks 3 question(s)" in text


def test_a_drafter_file_missing_is_an_incomplete_run(tmp_path, capsys):
    run = write_mt_run(tmp_path / "run")
    (run / "answers" / "chain.jsonl").unlink()
    assert "chain lacks 16" in _error(tmp_path, capsys, run)


@pytest.mark.parametrize("change, message", [
    (lambda rs: rs[2]["choices"][0]["wall_time"].pop(), "question 91: wall_time has 1 entries for 2 turns"),
    (lambda rs: rs[0]["choices"][0]["steps"][1].pop(), "question 81: turn 2 has"),
    (lambda rs: rs[4]["choices"][0]["accept_lengths"].append(3), "question 101: accept_lengths disagree"),
    (lambda rs: rs.append(rs[0]), "question 81 appears twice"),
    (lambda rs: rs[1]["choices"][0].update(wall_time=[0.0, 1.0]),
     "question 82: wall_time and new_tokens must be positive"),
])
def test_inconsistent_records_are_malformed(tmp_path, capsys, change, message):
    run = write_mt_run(tmp_path / "run")
    path = run / "answers" / "ngram.jsonl"
    _rewrite(path, change)
    error = _error(tmp_path, capsys, run)
    assert str(path) in error and message in error


def test_invalid_manifest_is_an_error(tmp_path, capsys):
    run = write_mt_run(tmp_path / "run")
    (run / "manifest.json").write_text("{not json")
    assert "manifest.json: not valid JSON" in _error(tmp_path, capsys, run)


def test_a_run_without_manifest_still_reports(tmp_path):
    run = write_mt_run(tmp_path / "run")
    (run / "manifest.json").unlink()
    runs = load_runs([run])
    assert runs[0].label == "run"
    report = build_report(runs)
    write_report(report, tmp_path / "out", ["md"], [], dpi=60)
    assert "no manifest.json" in (tmp_path / "out" / "report.md").read_text()


def test_display_table_matches_numbers(mt_run):
    table = category_table(category_summary(load_runs([mt_run])[0].answers))
    assert list(table.display.columns)[:9] == ["Drafter", "Category", "Budget", "Questions", "Tokens/s", "τ",
                                               "Speedup [95% CI]", "Equal to vanilla", "Drafted"]
    assert list(table.display.columns)[9:] == ["α1", "α2", "α3", "α4"]
    assert set(table.display[table.display["Drafter"] == "ngram"]["Budget"]) == {"6"}
    vanilla = table.display[table.display["Drafter"] == "vanilla"].iloc[0]
    assert vanilla["Speedup [95% CI]"] == "1.00 (ref)" and vanilla["α1"] == "–"


def test_report_command_imports_no_torch(mt_run, tmp_path):
    """`specbench report` reads files only: with torch and transformers unimportable it still works."""
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "from specbench.harness.cli import main\n"
            f"sys.exit(main(['report', {str(mt_run)!r}, '--out', {str(tmp_path / 'r')!r}, '--charts', 'png']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "r" / "report.md").exists()


# ---- sampling --------------------------------------------------------------------------------------------------
def _sampled(folder: Path, verify: str) -> Path:
    """Rewrite a synthetic run as sampled at T = 1 with ``verify`` (ids no longer compared with vanilla)."""
    settings = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "verify": verify, "lossless": verify == "rejection"}
    if verify == "typical":
        settings |= {"typical_epsilon": 0.09, "typical_delta": 0.3}
    for path in (folder / "answers").glob("*.jsonl"):
        def mark(records):
            for r in records:
                r["sampling"], r["seeds"] = settings, [1, 2]
                r["equal_to_vanilla"], r["first_divergence"] = None, None
        _rewrite(path, mark)
    return folder


def test_greedy_and_sampled_runs_side_by_side_name_the_rule(tmp_path):
    greedy = write_mt_run(tmp_path / "t0", drafters=("vanilla", "ngram"))
    sampled = _sampled(write_mt_run(tmp_path / "t1", drafters=("vanilla", "ngram")), "rejection")
    out = tmp_path / "report"
    assert main(["report", str(greedy), str(sampled), "--out", str(out), "--charts", "none"]) == 0
    text = (out / "report.md").read_text()
    assert "| Drafter | tiny-llama, greedy (T=0) | tiny-llama, T=1 rejection |" in text  # the EAGLE-paper table
    assert "Sampled run: T=1 rejection. Lossless" in text
    summary = pd.read_csv(out / f"summary-{load_runs([greedy, sampled])[1].slug}.csv")
    assert set(summary["verify"]) == {"rejection"} and summary["lossless"].all()
    assert summary["equal_to_vanilla"].isna().all()
    assert set(pd.read_csv(out / f"summary-{load_runs([greedy, sampled])[0].slug}.csv")["verify"]) == {"greedy"}


def test_lossy_drafters_are_marked_in_every_table(tmp_path):
    run = _sampled(write_mt_run(tmp_path / "typical", drafters=("vanilla", "ngram")), "typical")
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out), "--charts", "png", "--dpi", "60"]) == 0
    text = (out / "report.md").read_text()
    assert "ngram (typical, lossy)" in text and "LOSSY verification" in text
    table = pd.read_csv(out / "csv" / "by_category.csv")
    assert set(table["drafter"]) == {"vanilla", "ngram (typical, lossy)"}  # vanilla proposes nothing: exact
    assert not pd.read_csv(out / SUMMARY).set_index("drafter").loc["ngram", "lossless"].any()


def test_eager_and_compiled_runs_side_by_side(tmp_path):
    """Two runs of one model, eager and compiled: every label, the context table and summary.csv say which
    regime each number belongs to; the compiled manifest's per-drafter record is shown."""
    eager, compiled = write_mt_run(tmp_path / "eager"), write_mt_run(tmp_path / "compiled")
    manifest = json.loads((compiled / "manifest.json").read_text())
    manifest["regime"] = {"name": "compiled", "mode": "default", "buckets": [1, 2, 4],
                          "drafters": {"vanilla": {"compiled": []}, "medusa": {"compiled": ["heads"]},
                                       "ngram": {"compiled": [], "eager": "not capturable"}}}
    (compiled / "manifest.json").write_text(json.dumps(manifest))
    for path in (compiled / "answers").glob("*.jsonl"):
        lines = [json.loads(line) | {"regime": "compiled"} for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    runs = load_runs([eager, compiled])
    assert [run.label for run in runs] == ["tiny-llama, eager", "tiny-llama, compiled"]
    report = build_report(runs)
    assert report.title == "specbench report: tiny-llama, eager, tiny-llama, compiled"
    context = report.sections[0].tables[0].data.set_index("Field")
    assert context.loc["Regime", "tiny-llama, eager"] == "eager"
    assert context.loc["Regime", "tiny-llama, compiled"] == ("compiled (default; static cache, buckets [1, 2, 4]); "
                                                              "drafters medusa: heads; ngram: eager")
    assert set(summarize({d: r for d, r in runs[1].answers.items()})["regime"]) == {"compiled"}
    assert set(summarize({d: r for d, r in runs[0].answers.items()})["regime"]) == {"eager"}
