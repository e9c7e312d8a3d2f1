"""Sharded runs on torchrun (gloo, CPU): two ranks give the same ids, tau and question set as one process;
rank 0 merges the rank files in question order and records the ranks in the manifest; a crashed rank
leaves every finished record intact, and ``--resume`` under torchrun (or in one process) completes the run.

The runs go through a small launcher script that registers ``flaky``: the n-gram drafter, made to raise
on rank 1 after a given number of proposals when ``FLAKY_AFTER`` is set (a planted crash).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from specbench.harness.distributed import Shard
from specbench.results import load_run, read_answers

DATA = Path(os.environ.get("SPECBENCH_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
LAUNCHER = textwrap.dedent('''
    import os, sys
    from specbench.drafters.ngram import NgramDrafter
    from specbench.registry import register_drafter

    @register_drafter("flaky")
    class Flaky(NgramDrafter):
        proposals = 0

        def propose(self, ctx):
            if os.environ.get("RANK") == "1" and os.environ.get("FLAKY_AFTER"):
                Flaky.proposals += 1
                if Flaky.proposals > int(os.environ["FLAKY_AFTER"]):
                    raise RuntimeError("planted crash on rank 1")
            return super().propose(ctx)

    from specbench.harness.cli import main
    sys.exit(main())
''')


def test_shards_take_every_nth_question_and_their_own_gpu():
    shards = [Shard(rank, 3, rank) for rank in range(3)]
    questions = list(range(10))
    owned = [shard.owns(questions) for shard in shards]
    assert owned == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert sorted(sum(owned, [])) == questions
    assert [s.device("cuda") for s in shards] == ["cuda:0", "cuda:1", "cuda:2"]
    assert shards[2].device("cpu") == "cpu" and shards[2].device("cuda:5") == "cuda:5"


@pytest.fixture(scope="module")
def launcher(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("launcher") / "launch_specbench.py"
    path.write_text(LAUNCHER)
    return path


def launch(launcher: Path, args: list[str], ranks: int = 0, **env: str) -> subprocess.CompletedProcess:
    """``python launcher ARGS``, or under ``torchrun --standalone --nproc-per-node RANKS``."""
    command = [sys.executable, str(launcher)]
    if ranks:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
                   str(launcher)]
    environment = {**os.environ, "SPECBENCH_DATA": str(DATA), "OMP_NUM_THREADS": "1", **env}
    return subprocess.run([*command, *args], capture_output=True, text=True, env=environment, timeout=900)


def run_args(model: Path, out: Path) -> list[str]:
    return ["run", "--model", str(model), "--drafters", "vanilla,ngram,flaky", "--bench", "mt_bench", "--limit", "1",
            "--max-new-tokens", "12", "--tree-budget", "4", "--threads", "1", "--no-progress", "--out", str(out)]


def per_question(out: Path) -> dict[str, dict]:
    """drafter -> question id -> (output ids, accept lengths), and the question order per drafter."""
    return {name: {r.question_id: (r.output_ids, r.accept_lengths) for r in records}
            for name, records in load_run(out).items()}


@pytest.fixture(scope="module")
def single(launcher, tiny_model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("single") / "run"
    result = launch(launcher, run_args(tiny_model_dir, out))
    assert result.returncode == 0, result.stderr
    return out


def test_two_ranks_equal_one_process(launcher, tiny_model_dir, single, tmp_path):
    out = tmp_path / "sharded"
    result = launch(launcher, run_args(tiny_model_dir, out), ranks=2)
    assert result.returncode == 0, result.stderr
    assert per_question(out) == per_question(single)
    order = [r.question_id for r in load_run(single)["ngram"]]
    assert [r.question_id for r in load_run(out)["ngram"]] == order  # merged in the run's question order
    ranks = sorted((out / "ranks").iterdir())
    assert [r.name for r in ranks] == ["rank-0", "rank-1"]
    assert [r.question_id for r in read_answers(ranks[1] / "answers" / "ngram.jsonl")] == order[1::2]
    manifest = json.loads((out / "manifest.json").read_text())
    (launch_record,) = manifest["distributed"]
    assert launch_record["world_size"] == 2 and launch_record["backend"] == "gloo"
    assert [r["rank"] for r in launch_record["ranks"]] == [0, 1] and launch_record["ranks"][1]["device"] == "cpu"
    columns = ["drafter", "category", "new_tokens", "tau", "equal_to_vanilla", "n_questions"]
    pd.testing.assert_frame_equal(pd.read_csv(out / "summary.csv")[columns], pd.read_csv(single / "summary.csv")[columns])
    assert result.stdout.count("results:") == 1  # only rank 0 prints the summary

    # scripts/compare_runs.py, the check the docs' sharded-vs-single measurement uses, agrees, and catches a change
    compare = [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "compare_runs.py")]
    agreed = subprocess.run([*compare, str(single), str(out)], capture_output=True, text=True)
    assert agreed.returncode == 0 and "| ngram | 8 / 8 | True | True | True |" in agreed.stdout, agreed.stdout + agreed.stderr
    answers = out / "answers" / "ngram.jsonl"
    lines = answers.read_text().splitlines()
    first = json.loads(lines[0])
    first["choices"][0]["output_ids"][0][-1] += 1  # one token of one turn differs
    answers.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    differs = subprocess.run([*compare, str(single), str(out)], capture_output=True, text=True)
    # the token no longer agrees with the record's own equality fields: the run is refused, naming the file
    assert differs.returncode == 1 and "a hand-edited or corrupted answer file" in differs.stderr, differs.stderr
    assert subprocess.run([*compare, str(single), str(tmp_path / "nowhere")], capture_output=True).returncode == 2


def test_a_crashed_rank_keeps_what_finished_and_resume_completes(launcher, tiny_model_dir, single, tmp_path):
    out = tmp_path / "crashed"
    crashed = launch(launcher, run_args(tiny_model_dir, out), ranks=2, FLAKY_AFTER="30")
    assert crashed.returncode != 0 and "planted crash on rank 1" in crashed.stderr
    reference = per_question(single)
    finished = 0
    for rank in ("rank-0", "rank-1"):
        for path in (out / "ranks" / rank / "answers").glob("*.jsonl"):
            for record in read_answers(path, drop_partial_tail=True, keep_file=True):  # every line intact
                assert (record.output_ids, record.accept_lengths) == reference[path.stem][record.question_id]
                finished += 1
    assert 0 < finished < 3 * len(reference["ngram"])
    assert not (out / "answers").exists()  # nothing merged from a failed launch

    resumed = launch(launcher, [*run_args(tiny_model_dir, out), "--resume"], ranks=2)
    assert resumed.returncode == 0, resumed.stderr
    assert per_question(out) == reference
    assert len(json.loads((out / "manifest.json").read_text())["distributed"]) == 2  # both launches recorded

    # A single process can also finish (or extend) a sharded run: it reads every rank's records.
    Path(out / "answers" / "ngram.jsonl").unlink()
    alone = launch(launcher, [*run_args(tiny_model_dir, out), "--resume"])
    assert alone.returncode == 0, alone.stderr
    assert per_question(out) == reference


def test_two_ranks_equal_one_process_on_the_default_model(launcher, default_model_available, tmp_path):
    """The real target with a trained drafter: two ranks give the records of one process."""
    args = ["run", "--model", "default", "--drafters", "vanilla,ngram,hydra", "--bench", "mt_bench", "--categories",
            "coding", "--limit", "2", "--max-new-tokens", "16", "--tree-budget", "4", "--threads", "1", "--no-progress",
            "--no-warmup"]  # records do not depend on a warm-up; each rank's would add a fifth of the decoding
    single_run = launch(launcher, [*args, "--out", str(tmp_path / "single")])
    sharded_run = launch(launcher, [*args, "--out", str(tmp_path / "sharded")], ranks=2)
    assert single_run.returncode == 0, single_run.stderr
    assert sharded_run.returncode == 0, sharded_run.stderr
    assert per_question(tmp_path / "sharded") == per_question(tmp_path / "single")
    assert len(per_question(tmp_path / "single")["hydra"]) == 2
