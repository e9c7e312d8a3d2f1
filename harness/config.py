"""`RunConfig`: everything that decides what a run measures, each option declared once.

Each field is an `option` (`harness.options`): its help, default, parser and check live here, and the
``run``, ``replay`` and ``profile`` flags, `specbench.run`'s keywords and resume's keys are derived from
them. The config is written whole into each run's manifest. This module loads neither torch nor
transformers (the command line builds its parser from it).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specbench.errors import SpecbenchError
from specbench.harness.autobudget.calibration import HELDOUT, HELDOUT_PER_CATEGORY, PACKAGE, PACKAGE_NAMES
from specbench.harness.autobudget.spec import DEFAULT_CANDIDATES, parse_budget_spec, split_entry
from specbench.harness.options import at_least, csv, declared, drafter_options, int_csv, integer, normalise, number, option
from specbench.hub import is_hub_id
from specbench.placement import STRATEGIES, check_device_map
from specbench.questions import load_questions, resolve_bench
from specbench.results import drafter_order
from specbench.sampling import RULES, TYPICAL_DELTA, TYPICAL_EPSILON, Sampling
from specbench.settings import COMPILE_BACKENDS, DTYPE_NAMES, REGIMES

MODEL_HELP = ("'default' (SmolLM2-135M-Instruct), 'gemma3' (Gemma-3 270M), a model directory, a .gguf file or a "
              "Hugging Face Hub id (owner/name, read through the hub client's cache)")
#: the options `run` shares with `replay` (the target, where it runs, the drafters and the questions)
WORKLOAD = ("model", "drafters", "bench", "categories", "limit", "max_new_tokens", "device", "device_map", "dtype",
            "template", "threads", "drafter_options", "regime", "compile_backend")
#: the options every command that loads the target shares
TARGET = ("model", "device", "device_map", "dtype", "threads", "regime", "compile_backend")
#: published protocols' settings; a run's own options override them (`RunConfig.from_layers`)
PRESETS = {
    # Spec-Bench's leaderboard (hemingkx/Spec-Bench, evaluation/*.sh): its 480 questions, fp16, 1,024 new
    # tokens, greedy, one sequence at a time, on a GPU
    "spec-bench": {"bench": "spec_bench", "device": "cuda", "dtype": "float16", "max_new_tokens": 1024,
                   "temperature": 0.0},
}
#: what a rerun from a manifest leaves out: where the earlier run wrote, and whether it resumed
NOT_RERUN = ("out", "resume", "config_file")


@dataclass
class RunConfig:
    """Everything that decides what a run measures (written to the manifest)."""

    out: str = option("", "output directory (default runs/<date-time>)", resume=False)
    config_file: str | None = option(None, "a TOML or JSON file of run options (the keys `specbench.run` takes), or "
                                     "a run's manifest.json to run its settings again; options given here override "
                                     "it", flag="--config", metavar="FILE", resume=False)
    preset: str | None = option(None, "a published protocol's settings, under the options given: spec-bench "
                                "(Spec-Bench's leaderboard: its 480 questions, fp16 on CUDA, 1,024 new tokens, greedy)",
                                choices=tuple(PRESETS), resume=False)
    model: str = option("default", MODEL_HELP)
    drafters: list[str] = option(["all"], "comma-separated names, or 'all' (every registered drafter; default)",
                                 parse=csv, resume=False)
    bench: str = option("demo", "demo (default), mt_bench, spec_bench, or a question.jsonl path")
    categories: list[str] | None = option(None, "comma-separated categories to keep", parse=csv, resume=False)
    limit: int | None = option(None, "at most N questions from each category", parse=integer, check=at_least(1),
                               resume=False)
    max_new_tokens: int = option(128, "token cap per turn", parse=integer, check=at_least(1))
    tree_budget: int | str = option("auto", "max draft-tree nodes per step, root included: N, 'auto' (per drafter, the "
                              "budget of highest predicted speedup on this machine, from a replay over the calibration "
                              "set and the verify-cost profile; greedy), or per drafter, e.g. hydra=4,medusa=3,auto")
    repeats: int = option(1, "time each turn N times, keep the median", parse=integer, check=at_least(1))
    batch_size: list[int] = option([1], "sequences decoded together (continuous batching, one verify forward per step), "
                                   "or a sweep, e.g. 1,2,4: batch 1 writes answers/ as always, each size B > 1 its "
                                   "own batch-B/answers/ with vanilla at B as its baseline", parse=int_csv,
                                   check=at_least(1), metavar="N,N,...", resume=False)
    breakdown: bool = option(True, "record per-stage times (draft, transform, verify, accept) in the timed run "
                             "itself; costs nothing measurable on CPU (docs/performance.md)")
    device: str = option("cpu", "cpu, cuda or cuda:N")
    dtype: str = option("float32", "the target's dtype", choices=DTYPE_NAMES)
    device_map: str | None = option(None, "auto: spread the target over every visible GPU with accelerate "
                                    "(give --device cuda)", choices=STRATEGIES)
    regime: str = option("eager", "how the target verifies: eager (default; dynamic cache, eager forwards, the field's "
                         "convention) or compiled (static KV cache, trees padded to buckets 1-64, the verify forward "
                         "compiled per bucket: CUDA graphs on a GPU, inductor on a CPU)", choices=REGIMES)
    compile_backend: str = option("inductor", "the compiled regime's torch.compile backend: inductor (fused kernels; "
                                  "on a GPU in CUDA graphs, mode reduce-overhead) or cudagraphs (GPU only: the eager "
                                  "kernels replayed as CUDA graphs; builds in seconds where inductor takes minutes)",
                                  choices=COMPILE_BACKENDS)
    template: str | None = option(None, "FastChat conversation template for models without a chat template")
    seed: int = option(0, "seed of the sampled runs' random streams (one per turn, recorded in the answers; "
                       "greedy runs do not depend on it)", parse=integer)
    threads: int | None = option(None, "torch CPU threads (default: torch's choice)", parse=integer,
                                 check=at_least(1), resume=False)
    warmup: bool = option(True, "run one warm-up question through every drafter first", resume=False)
    resume: bool = option(False, "continue an interrupted run in --out", resume=False)
    drafter_options: dict[str, dict] = option({}, "a drafter-specific option, e.g. ngram.max_depth=6 (repeatable)",
                                              parse=drafter_options, flag="--drafter-option",
                                              metavar="DRAFTER.OPTION=VALUE", repeatable=True)
    profile: str | None = option(None, "verify-cost profile file (default: the one `specbench profile` cached for "
                                 "this machine)", metavar="FILE", resume=False)
    calibration: str | None = option(None, f"what `auto` calibrates on: '{HELDOUT}' (up to {HELDOUT_PER_CATEGORY} "
                                     "questions per category of the benchmark that the run leaves out), "
                                     f"'{PACKAGE}' (16 two-turn questions written for specbench, two per MT-bench "
                                     "category, disjoint from the drafters' ShareGPT training data; 'shipped' is "
                                     "its earlier name) or a question file; default: heldout when the run leaves "
                                     "questions of every category out (--limit), else package", metavar="FILE")
    auto_budgets: list[int] | None = option(None, "budgets `auto` chooses among (default: "
                                            f"{','.join(map(str, DEFAULT_CANDIDATES))} up to the profile's largest)",
                                            parse=int_csv, check=at_least(1), metavar="N,N,...")
    # Sampling (specbench.sampling): temperature 0 is greedy; above it every drafter and vanilla sample from
    # the same warped target distribution, verified by `verify` (auto: greedy at T=0, else rejection).
    temperature: float = option(0.0, "target sampling temperature; 0 (default) is greedy decoding, exact token "
                                "for token", parse=number)
    top_p: float = option(1.0, "nucleus sampling: keep the smallest set of tokens reaching this probability "
                          "(1.0: off); applied to the target, the same for every drafter", parse=number)
    top_k: int = option(0, "keep the K most likely tokens (0: off)", parse=integer)
    verify: str = option("auto", "verification rule: greedy (T=0), rejection (lossless tree rejection sampling, "
                         "T>0), typical (Medusa's typical acceptance, LOSSY, T>0); auto picks greedy or rejection",
                         choices=("auto", *RULES))
    typical_epsilon: float = option(TYPICAL_EPSILON, "typical acceptance: the hard threshold epsilon (Medusa's "
                                    "posterior_threshold)", parse=number)
    typical_delta: float = option(TYPICAL_DELTA, "typical acceptance: the entropy-scaled threshold delta (Medusa's "
                                  "posterior_alpha)", parse=number)

    def __post_init__(self) -> None:
        normalise(self)  # text from the command line (or "a,b" from the API) parsed; each value checked
        if not self.out:
            self.out = f"runs/{time.strftime('%Y%m%d-%H%M%S')}"
        #: ``--drafters all``: every registered drafter that can run on the target (`Run` leaves out the
        #: others, saying why); not a field, so the manifest records the drafters that ran
        self.every_drafter = list(self.drafters) == ["all"]
        if self.every_drafter:
            from specbench.registry import available_drafters  # loads torch; the parser does not need it

            self.drafters = list(available_drafters())

    @classmethod
    def from_layers(cls, given: dict[str, Any]) -> RunConfig:
        """The config from options ``given`` explicitly, over ``config_file``'s, over ``preset``'s, over the
        declared defaults (the command line and the API both build a run's config this way)."""
        from_file = read_settings(given["config_file"], cls) if given.get("config_file") else {}
        preset = given.get("preset", from_file.get("preset"))
        return cls(**PRESETS.get(preset, {}) | from_file | given)

    def check(self, model_given: bool = False) -> None:
        """Reject impossible combinations before anything is loaded (``model_given``: an in-memory model).
        Each option's own value was checked when the config was made. (Imports here load torch: the
        command line builds its parser from this module without it.)"""
        from specbench.harness import distributed
        from specbench.harness.autobudget.calibration import heldout_questions
        from specbench.harness.autobudget.profile import load_profile
        from specbench.model import check_device
        from specbench.model_source import MODEL_FORMS, NAMED_MODELS
        from specbench.registry import get_drafter_class

        if not self.drafters:
            raise SpecbenchError("--drafters is empty")
        if self.categories is not None and not self.categories:
            raise SpecbenchError("--categories is empty (leave it out to keep every category)")
        duplicates = sorted({d for d in self.drafters if self.drafters.count(d) > 1})
        if duplicates:
            raise SpecbenchError(f"--drafters names {', '.join(duplicates)} more than once")
        for name in self.drafters:
            get_drafter_class(split_entry(name)[0])  # unknown names fail here, listing the known ones
        self._check_batch_sizes(distributed.current_shard() is not None)
        parse_budget_spec(self.tree_budget, self.drafters)
        self.sampling  # impossible sampling settings raise here
        if self.calibration == HELDOUT:
            heldout_questions(self.bench, self.categories, self.limit)  # a run that leaves none out stops here
        elif self.calibration not in (None, *PACKAGE_NAMES):
            load_questions(resolve_bench(self.calibration))  # a bad calibration file stops the run here
        unknown = sorted(set(self.drafter_options) - {split_entry(name)[0] for name in self.drafters})
        if unknown:
            raise SpecbenchError(f"--drafter-option names drafters not in --drafters: {', '.join(unknown)}")
        if not model_given and self.model not in NAMED_MODELS and not Path(self.model).expanduser().exists() \
                and not is_hub_id(self.model):
            raise SpecbenchError(f"model not found: {self.model} (give {MODEL_FORMS})")
        check_device_map(self.device_map, self.device, distributed=distributed.current_shard() is not None)
        check_device(self.device)
        if self.compile_backend == "cudagraphs" and (self.regime != "compiled" or not self.device.startswith("cuda")):
            raise SpecbenchError("--compile-backend cudagraphs needs --regime compiled and --device cuda (CUDA graphs "
                                 f"exist on GPUs only; got --regime {self.regime} --device {self.device})")
        if self.profile is not None:
            load_profile(Path(self.profile))  # a bad file stops the run before the model loads

    def _check_batch_sizes(self, sharded: bool) -> None:
        """``--batch-size``: a drafter that cannot batch (its class's ``max_batch_size``, e.g. eagle3's 1) is a
        one-line error before the model loads (under ``--drafters all`` it is left out, saying why); so are
        ``--repeats`` and torchrun with a batch above 1 (neither is implemented for batches)."""
        from specbench.registry import get_drafter_class

        largest = max(self.batch_sizes)
        if largest == 1:
            return
        if self.repeats > 1:
            raise SpecbenchError(f"--repeats {self.repeats} works at batch size 1 only; drop --repeats or give "
                                 f"--batch-size 1 (got --batch-size {','.join(map(str, self.batch_sizes))})")
        if sharded:
            raise SpecbenchError("--batch-size above 1 does not run under torchrun yet; launch one process")
        for name in list(self.drafters):
            limit = getattr(get_drafter_class(split_entry(name)[0]), "max_batch_size", None)
            if limit is None or largest <= limit:
                continue
            if getattr(self, "every_drafter", False):
                print(f"specbench: {name} left out of --drafters all: it runs at batch size {limit} at most "
                      f"(--batch-size {largest})", file=sys.stderr)
                self.drafters.remove(name)
                continue
            raise SpecbenchError(f"--batch-size {largest}: drafter {name} runs at batch size {limit} at most; "
                                 f"leave it out or give --batch-size {limit}")

    @property
    def batch_sizes(self) -> list[int]:
        """``batch_size`` as sorted distinct sizes (the API's one int is already a list: `options.normalise`)."""
        return sorted(set(self.batch_size))

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k, self.verify, self.typical_epsilon, self.typical_delta)

    def ordered_drafters(self) -> list[str]:
        """Vanilla first (when asked for), then the others in the order given."""
        return drafter_order(self.drafters)


def read_settings(path: str, config: type = RunConfig) -> dict[str, Any]:
    """Run options from a TOML or JSON file: a mapping of option names to values, or a run's manifest
    (its ``config``, less `NOT_RERUN`). An unknown name is a one-line error naming the file."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise SpecbenchError(f"--config {path}: no such file")
    text = file.read_text(encoding="utf-8")
    try:
        if file.suffix == ".toml":
            import tomllib

            data = tomllib.loads(text)
        else:
            data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        raise SpecbenchError(f"--config {path}: not {'TOML' if file.suffix == '.toml' else 'JSON'} ({error})") from None
    if not isinstance(data, dict):
        raise SpecbenchError(f"--config {path}: expected a mapping of option names to values")
    if isinstance(data.get("config"), dict) and "specbench_version" in data:  # a manifest: run its settings again
        data = {key: value for key, value in data["config"].items() if key not in NOT_RERUN}
    unknown = sorted(set(data) - set(declared(config)))
    if unknown:
        raise SpecbenchError(f"--config {path}: unknown option(s) {', '.join(unknown)}")
    return data
