"""``specbench attribute``: re-score a stored run's divergent turns in fp32 (`harness.attribution`).

``specbench run`` does this itself at the end of a greedy run; this command is for runs recorded before it
existed, runs whose re-score was skipped (an fp32 copy that did not fit), or to redo it (``--force``). It
loads the run's model in fp32 (from the manifest), rebuilds each divergent turn's prompt from the run's
question file (checked against the manifest's hash), writes the results into the answer files and
rewrites ``summary.csv``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specbench.errors import SpecbenchError
from specbench.harness.cli.common import Command


def attribute_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", help="a run directory (specbench run --out)")
    parser.add_argument("--device", default=None, help="where the fp32 copy runs: cpu, cuda, cuda:N "
                        "(default: the run's device)")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--force", action="store_true", help="re-score turns already attributed too")


def cmd_attribute(args: argparse.Namespace) -> int:
    import torch

    from specbench.harness.attribution import attribute_run
    from specbench.model import load_target
    from specbench.reports.summary import format_table, write_summary
    from specbench.results import MANIFEST, read_manifest

    out = Path(args.run)
    if not out.is_dir():
        raise SpecbenchError(f"run directory not found: {out}")
    manifest = read_manifest(out)
    if manifest is None:
        raise SpecbenchError(f"{out} has no {MANIFEST}: cannot tell which model and questions the run used")
    config, model = manifest.get("config") or {}, manifest.get("model") or {}
    if model.get("in_memory"):
        raise SpecbenchError(f"{out} ran an in-memory model; attribute it from Python: "
                             f"specbench.harness.attribution.attribute_run(run_dir, lambda: fp32 TargetModel)")
    if args.threads:
        torch.set_num_threads(args.threads)

    def scorer():
        target = load_target(config.get("model", "default"), args.device or config.get("device", "cpu"), "float32",
                             None if args.device == "cpu" else config.get("device_map"))
        recorded = model.get("sha256")
        if recorded and target.source is not None and target.source.sha256 != recorded:
            raise SpecbenchError(f"the model {config.get('model')} is not the one {out} ran (sha256 "
                                 f"{target.source.sha256[:12]}... vs {recorded[:12]}...)")
        return target

    result = attribute_run(out, scorer, force=args.force)
    if result.skipped:
        raise SpecbenchError(f"could not load the fp32 copy ({result.skipped}); try --device cpu")
    print(f"attribution: {result.rescored} turn(s) re-scored in fp32", file=sys.stderr)
    print(format_table(write_summary(out)))
    return 0


COMMANDS = [
    Command("attribute", "re-score a run's turns whose ids differ from vanilla's in fp32: near-tie or mismatch",
            "specbench attribute runs/mt", attribute_arguments, cmd_attribute),
]
