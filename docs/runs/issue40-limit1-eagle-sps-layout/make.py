"""The run behind this directory: deterministic figures rerun with their answers (issue 40), one interleaved
run on MT-bench limit 1, 128 new tokens, greedy, fp32, vanilla first:

- ``eagle@16``: the shipped eagle at budget 16 (tau per category, acceptance by depth);
- ``sps@3``, ``sps@5``: the default int8 self-draft pinned at 3 and 5 nodes;
- the published-layout round trip: ``medusa-50bb434`` is the medusa checkpoint shipped at commit 50bb434
  (shared lm_head, 4 heads of 2 layers; the one the round trip was first made with), scoring every token
  (``draft_vocab=0``: the published layout stores no token ranking); ``medusa-50bb434-published`` is the
  same checkpoint written by ``specbench convert`` in FasterDecoding's medusa-1 layout and read back. Both
  draft the same static tree of 8 nodes (``tree-8.json``, that checkpoint's own tree at 8), so their ids
  and accept lengths must be equal.

    python docs/runs/issue40-limit1-eagle-sps-layout/make.py --threads 1 --work /tmp/round-trip
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import specbench
from specbench.drafters.medusa import MedusaDrafter

HERE = Path(__file__).resolve().parent
STEM = "medusa-SmolLM2-135M-Instruct.Q4_1-b179c9523d0e6a0f"
ENTRIES = ["vanilla", "eagle@16", "sps@3", "sps@5", "medusa-50bb434@8", "medusa-50bb434-published@8"]


@specbench.register_drafter("medusa-50bb434")
class OriginalMedusa(MedusaDrafter):
    """The medusa of commit 50bb434 (its checkpoint given as an option)."""


@specbench.register_drafter("medusa-50bb434-published")
class PublishedMedusa(MedusaDrafter):
    """The same heads read back from the published medusa-1 layout."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/runs/issue40-limit1-eagle-sps-layout", help="run from the repository root")
    parser.add_argument("--work", default="/tmp/round-trip", help="where the old checkpoint and its conversion go")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--drafters", default=",".join(ENTRIES), help="run entries (default: all of them)")
    args = parser.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for suffix in (".json", ".safetensors"):  # the checkpoint as committed at 50bb434
        blob = subprocess.run(["git", "show", f"50bb434:drafters/checkpoints/{STEM}{suffix}"], check=True,
                              capture_output=True, cwd=HERE).stdout
        (work / f"medusa-50bb434{suffix}").write_bytes(blob)
    published = work / "medusa-50bb434-published"
    if not published.exists():
        subprocess.run([sys.executable, "-m", "specbench", "convert", str(work / "medusa-50bb434"), "--model", "default",
                        "--out", str(published)], check=True)
    tree = str(HERE / "tree-8.json")
    entries = args.drafters.split(",")
    options = {"medusa-50bb434": {"checkpoint": str(work / "medusa-50bb434"), "draft_vocab": 0, "choices": tree},
               "medusa-50bb434-published": {"checkpoint": str(published), "choices": tree}}
    specbench.run(model="default", bench="mt_bench", limit=1, max_new_tokens=128, threads=args.threads, warmup=False,
                  tree_budget="16", out=args.out, progress=False, drafters=entries,
                  drafter_options={name: value for name, value in options.items()
                                   if any(entry.split("@")[0] == name for entry in entries)})


if __name__ == "__main__":
    main()
