"""The GPU lease scripts' command lines still parse and pass `RunConfig.check` with today's code.

A GPU is lent rarely and for 15 minutes (../shared/gpu/README.md), and the lease scripts are run nowhere else:
a flag renamed or a drafter name changed since a script was written would only show on the device, after the
lease had started. So each script runs here under bash with ``specbench``, ``python3``, ``timeout``,
``nvidia-smi`` and ``tar`` replaced by shell functions that record their arguments and do nothing, and every
recorded call is then parsed by the real parser (``specbench``'s, or `benchmarks.regimes.build_parser`);
``run`` and ``replay`` calls also pass the checks a run makes before its model loads, with ``--device cuda``
read as ``cpu`` (this machine has no CUDA) and ``--compile-backend cudagraphs`` as inductor (it needs CUDA).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIELD, RECORD = "\x1f", "\x1e"  # between a call's arguments; after each call

#: shell functions standing in for the commands the scripts call (exported, so a script a script calls has them)
STUBS = f"""
record() {{ local IFS=$'{FIELD}'; printf '%s{RECORD}' "$*" >> "$CALLS"; }}
specbench() {{ record specbench "$@"; }}
python3() {{ record python3 "$@"; }}
timeout() {{ shift; "$@"; }}
nvidia-smi() {{ :; }}
tar() {{ :; }}
export -f record specbench python3 timeout nvidia-smi tar
"""


#: the scripts' own settings: a developer's shell may set them, and the test checks the scripts' defaults
SCRIPT_SETTINGS = {"STEPS", "DRAFTERS", "BUDGETS", "REGIME_DRAFTERS", "BACKEND", "DEVICE", "EPOCHS", "TOKENS", "INIT",
                   "DRAFT_VOCAB", "CONTEXT_VOCAB", "STEP_DECAY", "HIDDEN_BATCH", "TRAIN", "HELDOUT", "LIMIT", "MAX_NEW",
                   "SIZES", "T_REGIMES", "T_COMPILED", "T_EAGER", "T_BATCHES", "T_GRAPHS"}


def recorded_calls(script: str, args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> list[list[str]]:
    """Run ``scripts/<script>`` with the stubs; the calls it made, each as its argument list."""
    calls = tmp_path / "calls"
    calls.touch()
    inherited = {key: value for key, value in os.environ.items() if key not in SCRIPT_SETTINGS}
    environment = inherited | {"CALLS": str(calls), "OUT": str(tmp_path / "out"),
                               "LEASE_WORK": str(tmp_path / "lease")} | (env or {})
    (tmp_path / "out").mkdir(exist_ok=True)
    command = f"{STUBS}\nbash {shlex.quote(str(ROOT / 'scripts' / script))} " + " ".join(map(shlex.quote, args))
    done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=environment, capture_output=True, text=True,
                          timeout=60)
    # the exit code is the last line's (gpu_lease.sh ends in a grep that finds nothing here), so the script's
    # own failures are read from its stderr: a missing command, an unset variable, a syntax error
    assert not any(sign in done.stderr for sign in ("command not found", "unbound variable", "syntax error")), done.stderr
    return [call.split(FIELD) for call in calls.read_text().split(RECORD) if call]


def on_this_machine(argv: list[str]) -> list[str]:
    """``argv`` with the device and backend that need CUDA replaced by what this machine has."""
    swapped = {"cuda": "cpu", "cudagraphs": "inductor"}
    return [swapped.get(arg, arg) for arg in argv]


def check_call(call: list[str]) -> str:
    """Parse one recorded call with the real parser (and run's / replay's pre-load checks); the command's name."""
    from specbench.harness.cli import build_parser
    from specbench.harness.config import RunConfig
    from specbench.harness.options import given

    program, *argv = on_this_machine(call)
    if program == "python3" and argv[:2] == ["-m", "benchmarks.regimes"]:
        from benchmarks.regimes import build_parser as regimes_parser
        from benchmarks.regimes import parse_budgets
        from specbench.registry import get_drafter_class

        args = regimes_parser().parse_args(argv[2:])
        drafters = [name for name in args.drafters.split(",") if name]
        for name in drafters:
            get_drafter_class(name)
        parse_budgets(args.budgets, drafters)
        return "regimes"
    if program == "python3":  # a script of ours with a path argument (learning_curve.py): it exists
        assert (ROOT / "scripts" / Path(argv[0]).name).exists(), call
        return Path(argv[0]).name
    assert program == "specbench", call
    args = build_parser().parse_args(argv)
    if args.command == "run":
        RunConfig.from_layers(given(args, RunConfig)).check()
    elif args.command == "replay":
        RunConfig(out=".", **given(args, RunConfig)).check()
    return args.command


def commands_of(calls: list[list[str]]) -> list[str]:
    """Each recorded call checked (`check_call`), as the list of their commands' names."""
    return [check_call(call) for call in calls]


def test_the_lease_script_calls_parse(tmp_path):
    """Every step of `scripts/gpu_lease.sh`, the graphs step included, through `scripts/gpu_regimes.sh`."""
    calls = recorded_calls("gpu_lease.sh", [], tmp_path, {"STEPS": "regimes compiled eager batches graphs"})
    assert commands_of(calls) == ["regimes", "run", "run", "run", "regimes"]


def test_the_eagle3_script_calls_parse(tmp_path):
    """`scripts/gpu_eagle3.sh`: distill, train, the learning curve, and (with a finished checkpoint there) the two
    replays."""
    work = tmp_path / "e3"
    work.mkdir()
    (work / "eagle3-full.safetensors").touch()  # the replays run only after a finished training
    calls = recorded_calls("gpu_eagle3.sh", [str(work), str(tmp_path / "out"), "600"], tmp_path)
    assert commands_of(calls) == ["distill", "train", "learning_curve.py", "replay", "replay"]


def test_the_batches_script_calls_parse(tmp_path):
    calls = recorded_calls("gpu_batches.sh", [str(tmp_path / "b")], tmp_path)
    assert commands_of(calls) == ["profile", "run", "run", "report"]


def test_a_renamed_flag_is_caught(tmp_path):
    """The check can fail: a call with a flag the parser does not know, or a drafter it does not, is refused."""
    from specbench.errors import SpecbenchError

    with pytest.raises(SpecbenchError, match="unrecognized arguments: --max-tokens"):
        check_call(["specbench", "run", "--out", str(tmp_path), "--drafters", "vanilla", "--max-tokens", "8"])
    with pytest.raises(SpecbenchError):
        check_call(["specbench", "run", "--out", str(tmp_path), "--drafters", "vanilla,hydra2"])
    with pytest.raises(SpecbenchError):
        check_call(["python3", "-m", "benchmarks.regimes", "--out", "x", "--drafters", "vanilla,eagle4"])
    with pytest.raises(SystemExit):  # benchmarks.regimes' own parser exits as argparse does
        check_call(["python3", "-m", "benchmarks.regimes", "--out", "x", "--tree-budget", "8"])
