"""Claims recomputed from answers: every table the README and the reference docs mark as a claim is
rebuilt from its run directory's answer files with the metric code, and any difference fails.

A claim block in a markdown file is::

    <!-- claim: docs/runs/NAME [KIND] -->
    ...the table...
    <!-- /claim -->

KIND ``summary`` (the default) is the table `specbench run` prints at its end (`reports.summary.format_table`
of `summarize(load_run(RUN))`, in a ``text`` fence); ``attribution`` is the markdown table of how each drafter's
ids compare with vanilla's (turns, equal, near-tie, mismatch, largest margin-or-deficit over the bound), from
the same summary; ``tau`` is the markdown table of each drafter's tau per category and overall, and how many
turns' ids equal vanilla's (the deterministic columns of a run: no timing); ``depth`` is the markdown table of
acceptance by depth, as the report's "Acceptance by depth" computes it (`reports.tables.acceptance`): per drafter
and depth d, P(>=d) with P(d | d-1) in brackets, over the steps that proposed a node at depth d. Paths are
relative to the repository root. Nobody writes a block by hand:

    python -m tests.test_claims --write [FILE ...]   # (re)write every block from its run (default: README.md, docs/*.md)
    python -m tests.test_claims [FILE ...]           # check, printing each difference

The tests also check that answer files compressed as ``.jsonl.gz`` read like plain ones (committed runs keep
their answers compressed), and that every committed run with answers still gives its committed summary.csv.
"""

from __future__ import annotations

import difflib
import gzip
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from specbench.errors import SpecbenchError
from specbench.reports.summary import OVERALL, format_table, summarize, write_summary
from specbench.results import ANSWERS, BASELINE, SUMMARY, answer_files, load_run, read_answers
from tests.test_summary import write_run

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("summary", "attribution", "tau", "depth")
BLOCK = re.compile(r"^(?P<open>(?P<indent>[ \t]*)<!-- claim: (?P<run>\S+)(?: (?P<kind>\w+))? -->\n)(?P<body>.*?)"
                   r"(?P<close>[ \t]*<!-- /claim -->)", re.DOTALL | re.MULTILINE)
RUN_FOLDERS = ("docs/runs", "docs/gpu-runs")


def claim_docs() -> list[Path]:
    """The files whose claims are checked: the README and the reference docs (not the journal)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def summary_of(run: Path) -> pd.DataFrame:
    """The run's summary recomputed from its answer files (never from its summary.csv)."""
    return summarize(load_run(run))


def attribution_table(summary: pd.DataFrame) -> str:
    """Markdown: per drafter whose ids were compared, its turns equal / near-tie / mismatch to vanilla's."""
    rows = summary[(summary["category"] == OVERALL) & (summary["drafter"] != BASELINE) & summary["equal_turns"].notna()]
    lines = ["| drafter | turns | equal | near-tie | mismatch | largest margin-or-deficit / B |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for _, row in rows.iterrows():
        value = row["max_over_bound"]
        worst = "-" if pd.isna(value) else f"{value:.3f}" if value < 1 else f"{value:.2f}"
        lines.append(f"| {row['drafter']} | {int(row['turns'])} | {int(row['equal_turns'])} | "
                     f"{int(row['near_tie_turns'])} | {int(row['mismatch_turns'])} | {worst} |")
    return "\n".join(lines)


def tau_table(summary: pd.DataFrame) -> str:
    """Markdown: per drafter other than vanilla, tau per category (file order), overall, and turns with ids
    equal to vanilla's (of the turns compared)."""
    categories = [c for c in dict.fromkeys(summary["category"]) if c != OVERALL]
    lines = ["| drafter | budget | " + " | ".join(categories) + " | overall | ids = vanilla |",
             "| --- | ---: | " + " | ".join("---:" for _ in categories) + " | ---: | ---: |"]
    for drafter, rows in summary[summary["drafter"] != BASELINE].groupby("drafter", sort=False):
        by = rows.set_index("category")
        overall = by.loc[OVERALL]
        equal = "-" if pd.isna(overall["equal_turns"]) else f"{int(overall['equal_turns'])}/{int(overall['turns'])}"
        cells = [f"{by.loc[c, 'tau']:.2f}" if c in by.index else "-" for c in categories]
        lines.append(f"| {drafter} | {overall['tree_budget']} | " + " | ".join(cells) +
                     f" | **{overall['tau']:.3f}** | {equal} |")
    return "\n".join(lines)


def depth_table(run: Path) -> str:
    """Markdown: per drafter other than vanilla, P(>=d) (P(d | d-1)) at each depth d it proposed, over the steps
    that proposed depth d (the report's acceptance table, `reports.tables.acceptance`), and its step count."""
    from specbench.reports.tables import acceptance, max_depth, step_table

    steps = step_table(load_run(run))
    steps = steps[steps["drafter"] != BASELINE]
    deepest = max_depth(steps)
    lines = ["| drafter | steps | " + " | ".join(f"d = {d}" for d in range(1, deepest + 1)) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in range(deepest)) + " |"]

    def cell(d: int, reached: float, given: float, proposing: int, total: int) -> str:
        if proposing == 0:
            return "-"
        given_text = "" if d == 1 else " (-)" if given != given else f" ({100 * given:.0f}%)"  # NaN: none reached d-1
        return f"{100 * reached:.0f}%{given_text}" + ("" if proposing == total else f" of {proposing:,}")

    for drafter, mine in steps.groupby("drafter", sort=False):
        unconditional, conditional = acceptance(mine, deepest)
        total = len(mine)
        proposing = [int((mine["depth"] >= d).sum()) if not mine["depth"].isna().any() else total
                     for d in range(1, deepest + 1)]
        cells = [cell(d, unconditional[d - 1], conditional[d - 1], proposing[d - 1], total) for d in range(1, deepest + 1)]
        lines.append(f"| {drafter} | {total:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(run: Path, kind: str, indent: str = "") -> str:
    """A claim block's body (without the markers), recomputed from ``run``'s answers; each line indented
    as the opening marker is (a block inside a list item)."""
    if kind not in KINDS:
        raise SpecbenchError(f"claim kind {kind!r}: expected one of {', '.join(KINDS)}")
    if kind == "depth":
        body = depth_table(run)
    else:
        summary = summary_of(run)
        body = (attribution_table(summary) if kind == "attribution" else tau_table(summary) if kind == "tau" else
                f"```text\n{format_table(summary)}\n```")
    return "".join(f"{indent}{line}\n" if line else "\n" for line in body.split("\n"))


@dataclass
class Claim:
    doc: Path
    line: int
    run: str
    kind: str
    body: str
    indent: str = ""


def claims_in(doc: Path) -> list[Claim]:
    text = doc.read_text(encoding="utf-8")
    return [Claim(doc, text.count("\n", 0, m.start()) + 1, m["run"], m["kind"] or "summary", m["body"], m["indent"])
            for m in BLOCK.finditer(text)]


def differences(claim: Claim, root: Path = ROOT) -> str:
    """'' when the block equals its recomputation, else a unified diff (stated -> recomputed)."""
    run = root / claim.run
    if not (run / ANSWERS).is_dir():
        return f"{claim.run} has no answers/ folder: the claim cannot be recomputed\n"
    fresh = render(run, claim.kind, claim.indent)
    if fresh == claim.body:
        return ""
    return "".join(difflib.unified_diff(claim.body.splitlines(True), fresh.splitlines(True),
                                        f"{claim.doc.name}:{claim.line} (stated)", f"{claim.run} (recomputed)"))


def write_claims(doc: Path, root: Path = ROOT) -> int:
    """Rewrite every claim block of ``doc`` from its run; the number of blocks that changed."""
    text = doc.read_text(encoding="utf-8")
    changed = 0

    def fresh(match: re.Match) -> str:
        nonlocal changed
        body = render(root / match["run"], match["kind"] or "summary", match["indent"])
        changed += body != match["body"]
        return match["open"] + body + match["close"]

    doc.write_text(BLOCK.sub(fresh, text), encoding="utf-8")
    return changed


#: run directories a reference doc may cite although they keep no answers, and why each cannot be one that does
WITHOUT_ANSWERS = {
    "docs/gpu-runs/h100-2026-11-23-budget64": "an H100 run from before answers were kept: remaking it needs a GPU",
    "docs/runs/context-vocab-s26": "replay rows: `specbench replay` writes per-budget rows, not answers",
    "docs/runs/issue42-regimes-cpu": "benchmarks/regimes.py, not `specbench run`: its regimes.json keeps the ids",
}


def run_dirs() -> list[Path]:
    """The run directories under docs/runs and docs/gpu-runs: each folder, or, for a folder grouping runs (no
    manifest of its own, runs with manifests inside, e.g. issue16's single/sharded/gemma3), each of those."""
    runs = []
    for folder in RUN_FOLDERS:
        for child in sorted((ROOT / folder).glob("*")):
            inner = [run for run in sorted(child.glob("*")) if (run / "manifest.json").is_file()]
            if child.is_dir():
                runs += inner if inner and not (child / "manifest.json").exists() else [child]
    return runs


def tracked(runs: list[Path]) -> list[Path]:
    """``runs`` that git tracks files in (all of them where git is absent)."""
    listed = subprocess.run(["git", "ls-files", "--", *RUN_FOLDERS], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode != 0:
        return runs
    folders = {parent for line in listed.stdout.splitlines() for parent in Path(line).parents}
    return [run for run in runs if run.relative_to(ROOT) in folders]


def kept_runs() -> list[Path]:
    """Every run directory tracked under docs/runs and docs/gpu-runs."""
    return tracked(run_dirs())


def keeps_answers(run: Path) -> bool:
    """The run keeps answer files: its own answers/, or a batch sweep's ``batch-B/answers/`` (a sweep of sizes
    above 1 only has no batch-1 answers)."""
    return (run / ANSWERS).is_dir() or any(folder.is_dir() for folder in run.glob(f"batch-*/{ANSWERS}"))


def committed_runs() -> list[Path]:
    """Every committed run directory that keeps its answers (tracked by git where the tree is a checkout, so
    a run still being made beside it is not one)."""
    return [run for run in kept_runs() if keeps_answers(run)]


# ---- answers compressed as .jsonl.gz ----------------------------------------------------------------------
def gzip_answers(run: Path) -> None:
    for path in sorted((run / ANSWERS).glob("*.jsonl")):
        with open(path, "rb") as plain, gzip.open(path.with_name(path.name + ".gz"), "wb") as packed:
            shutil.copyfileobj(plain, packed)
        path.unlink()


def test_compressed_answers_give_the_same_summary_and_report(tmp_path, capsys):
    from specbench.harness.cli import main

    plain, packed = write_run(tmp_path / "plain"), write_run(tmp_path / "packed")
    gzip_answers(packed)
    assert sorted(p.name for p in (packed / ANSWERS).iterdir()) == ["ngram.jsonl.gz", "vanilla.jsonl.gz"]
    assert {name: p.name for name, p in answer_files(packed / ANSWERS).items()} == \
        {"ngram": "ngram.jsonl.gz", "vanilla": "vanilla.jsonl.gz"}
    assert load_run(packed) == load_run(plain)
    pd.testing.assert_frame_equal(write_summary(packed), write_summary(plain))
    assert (packed / SUMMARY).read_text() == (plain / SUMMARY).read_text()
    assert main(["report", str(packed), "--out", str(tmp_path / "report")]) == 0
    assert "ngram" in capsys.readouterr().out
    assert (tmp_path / "report" / SUMMARY).read_text() == (plain / SUMMARY).read_text()


def test_a_compressed_file_with_a_cut_tail_is_read_but_never_rewritten(tmp_path):
    run = write_run(tmp_path / "run")
    path = run / ANSWERS / "ngram.jsonl"
    text = path.read_text()
    packed = path.with_name("ngram.jsonl.gz")
    packed.write_bytes(gzip.compress((text + text.splitlines()[0][:30]).encode()))
    path.unlink()
    before = packed.read_bytes()
    assert len(read_answers(packed, drop_partial_tail=True)) == len(text.splitlines())
    assert packed.read_bytes() == before
    with pytest.raises(SpecbenchError, match=r"ngram\.jsonl\.gz:\d+: malformed answer record"):
        read_answers(packed)


def test_a_drafter_with_both_a_plain_and_a_compressed_file_is_refused(tmp_path, capsys):
    from specbench.harness.cli import main

    run = write_run(tmp_path / "run")
    path = run / ANSWERS / "ngram.jsonl"
    path.with_name("ngram.jsonl.gz").write_bytes(gzip.compress(path.read_bytes()))
    with pytest.raises(SpecbenchError, match="both ngram.jsonl and ngram.jsonl.gz"):
        load_run(run)
    assert main(["report", str(run)]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "ngram.jsonl.gz" in err[0]


def test_attribute_rewrites_a_compressed_file_compressed(tmp_path):
    """`specbench attribute` rewrites a run's answers in place: a .jsonl.gz stays one (no plain file beside it)."""
    from specbench.harness.attribution import _write_answers

    run = write_run(tmp_path / "run")
    gzip_answers(run)
    path = run / ANSWERS / "ngram.jsonl.gz"
    records = read_answers(path)
    records[0].extra["note"] = "rewritten"
    _write_answers(path, records)
    assert sorted(p.name for p in (run / ANSWERS).iterdir()) == ["ngram.jsonl.gz", "vanilla.jsonl.gz"]
    assert read_answers(path) == records and load_run(run)["ngram"][0].extra["note"] == "rewritten"


def test_a_file_that_is_not_gzip_is_a_one_line_error(tmp_path):
    run = write_run(tmp_path / "run")
    (run / ANSWERS / "ngram.jsonl").rename(run / ANSWERS / "ngram.jsonl.gz")
    with pytest.raises(SpecbenchError, match="not a readable gzip file"):
        load_run(run)


# ---- claim blocks ---------------------------------------------------------------------------------------
def test_a_claim_block_is_written_from_the_run_and_one_cell_off_fails(tmp_path):
    run = write_run(tmp_path / "runs" / "small")
    gzip_answers(run)
    doc = tmp_path / "doc.md"
    doc.write_text("Intro.\n\n<!-- claim: runs/small -->\n(table)\n<!-- /claim -->\n\n"
                   "<!-- claim: runs/small attribution -->\n<!-- /claim -->\n"
                   "<!-- claim: runs/small tau -->\n<!-- /claim -->\nEnd.\n", encoding="utf-8")
    assert write_claims(doc, tmp_path) == 3
    assert write_claims(doc, tmp_path) == 0  # rewriting is idempotent
    claims = claims_in(doc)
    assert [(c.run, c.kind) for c in claims] == [("runs/small", "summary"), ("runs/small", "attribution"),
                                                 ("runs/small", "tau")]
    assert claims[1].line == claims[0].line + claims[0].body.count("\n") + 3  # the markers and a blank line
    assert format_table(summarize(load_run(run))) in claims[0].body
    assert claims[1].body.splitlines()[2].startswith("| ngram | ")
    assert all(differences(c, tmp_path) == "" for c in claims)

    text = doc.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.lstrip().startswith("ngram") and "overall" in line)
    cells = line.split()
    for index in range(2, len(cells)):  # every numeric cell of the overall row, one at a time
        try:
            value = float(cells[index])
        except ValueError:
            continue
        edited = line.replace(cells[index], f"{value + 0.001:.3f}" if "." in cells[index] else str(int(value) + 1), 1)
        doc.write_text(text.replace(line, edited), encoding="utf-8")
        diff = differences(claims_in(doc)[0], tmp_path)
        assert diff and edited.strip() in diff and line.strip() in diff
    doc.write_text(re.sub(r"\| ngram \| (\d+) \|", lambda m: f"| ngram | {int(m[1]) + 1} |", text), encoding="utf-8")
    assert differences(claims_in(doc)[1], tmp_path)
    tau = summarize(load_run(run)).query("drafter == 'ngram' and category == 'overall'")["tau"].item()
    assert f"**{tau:.3f}**" in claims[2].body
    doc.write_text(text.replace(f"**{tau:.3f}**", f"**{tau + 0.001:.3f}**"), encoding="utf-8")
    assert differences(claims_in(doc)[2], tmp_path)


def test_a_depth_claim_is_the_reports_acceptance_and_one_cell_off_fails(tmp_path):
    from specbench.reports.tables import acceptance, step_table

    run = write_run(tmp_path / "runs" / "small")
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- claim: runs/small depth -->\n<!-- /claim -->\n", encoding="utf-8")
    assert write_claims(doc, tmp_path) == 1 and write_claims(doc, tmp_path) == 0
    claim = claims_in(doc)[0]
    steps = step_table(load_run(run))
    ngram = steps[steps["drafter"] == "ngram"]
    unconditional, conditional = acceptance(ngram, 5)  # every ngram step of the fixture proposes depth 5
    row = claim.body.splitlines()[2]
    assert row == (f"| ngram | {len(ngram)} | {100 * unconditional[0]:.0f}% | " +
                   " | ".join(f"{100 * u:.0f}% ({100 * c:.0f}%)" for u, c in zip(unconditional[1:], conditional[1:])) + " |")
    assert differences(claim, tmp_path) == ""
    first = f"{100 * unconditional[0]:.0f}%"
    doc.write_text(doc.read_text().replace(f"| {first} |", f"| {100 * unconditional[0] + 1:.0f}% |", 1), encoding="utf-8")
    assert differences(claims_in(doc)[0], tmp_path)


def test_a_claim_on_a_run_without_answers_fails(tmp_path):
    (tmp_path / "runs" / "bare").mkdir(parents=True)
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- claim: runs/bare -->\n```text\nx\n```\n<!-- /claim -->\n", encoding="utf-8")
    assert "no answers/ folder" in differences(claims_in(doc)[0], tmp_path)


@pytest.mark.parametrize("claim", [c for doc in claim_docs() for c in claims_in(doc)],
                         ids=lambda c: f"{c.doc.name}:{c.line}:{c.run}:{c.kind}")
def test_each_claim_in_the_docs_is_recomputed_from_its_answers(claim):
    diff = differences(claim)
    assert not diff, f"{claim.doc.name}:{claim.line} differs from {claim.run}'s answers " \
                     f"(python -m tests.test_claims --write rewrites it):\n{diff}"


def test_the_docs_hold_claims():
    """The marked tables exist, so the parametrised check above is not silently empty."""
    assert sum(len(claims_in(doc)) for doc in claim_docs()) >= 2


@pytest.mark.parametrize("run", kept_runs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_kept_run_is_cited_by_a_reference_doc_and_keeps_its_answers_or_says_why(run):
    """Issue 40: keep only the runs that current claims cite, and every figure from a run with its answers."""
    text = "".join(doc.read_text(encoding="utf-8") for doc in claim_docs())
    cited = str(run.relative_to(run.parent.parent)) if run.parent.name not in ("runs", "gpu-runs") else run.name
    assert cited in text, f"{run.relative_to(ROOT)} is cited by neither the README nor docs/*.md: delete it"
    name = str(run.relative_to(ROOT))
    assert keeps_answers(run) or name in WITHOUT_ANSWERS, f"{name} keeps no answers/"
    assert not (keeps_answers(run) and name in WITHOUT_ANSWERS), f"{name} has answers: drop it from the list"


def test_the_list_of_runs_without_answers_names_kept_runs():
    kept = {str(run.relative_to(ROOT)) for run in kept_runs()}
    assert set(WITHOUT_ANSWERS) <= kept


@pytest.mark.parametrize("run", committed_runs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_committed_run_with_answers_gives_its_committed_summary(run, tmp_path):
    """summary.csv is what the answers give (the file written as `specbench run` writes it)."""
    copy = tmp_path / run.name
    if (run / ANSWERS).is_dir():
        shutil.copytree(run / ANSWERS, copy / ANSWERS)
    for folder in run.glob("batch-*"):  # a batch sweep's sub-runs: one block of rows per batch size
        shutil.copytree(folder / ANSWERS, copy / folder.name / ANSWERS)
    if (run / "manifest.json").exists():
        shutil.copy(run / "manifest.json", copy)
    write_summary(copy)
    assert (copy / SUMMARY).read_text() == (run / SUMMARY).read_text()


def main(argv: list[str]) -> int:
    write = "--write" in argv
    docs = [Path(a) for a in argv if a != "--write"] or claim_docs()
    failed = 0
    for doc in docs:
        if write:
            print(f"{doc}: {write_claims(doc)} of {len(claims_in(doc))} claim blocks rewritten")
            continue
        for claim in claims_in(doc):
            diff = differences(claim)
            failed += bool(diff)
            print(f"{doc}:{claim.line}: {claim.run} ({claim.kind}): {'DIFFERS' if diff else 'ok'}")
            sys.stdout.write(diff)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
