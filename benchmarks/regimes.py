"""Eager vs compiled, in one process, interleaved: every drafter's tok/s in both regimes and transformers'
own `generate()` beside them (issue 42's measurement; docs/performance.md, "Compiled regime").

For each prompt (turn 1 of the selected questions) and each repeat, in turn: transformers' `generate()`
eager and with its static cache (compiled: on a GPU by transformers' own rule, on a CPU by asking it to),
then every drafter eager and compiled (the same weights: two `TargetModel`s over one model). Warm-up (every
bucket's and drafter part's compilation) runs first and is not timed. Ids are compared: every compiled
drafter with compiled vanilla, every compiled run with its eager twin, transformers' with vanilla eager.
Writes ``<out>/regimes.json`` (every timing and the ids' verdicts; rewritten after every prompt, ``complete``
false until the last) and prints a table of tok/s and ratios.

    python -m benchmarks.regimes --out docs/runs/regimes-cpu --questions 2 --max-new-tokens 128 \\
        --drafters vanilla,ngram,medusa,hydra,ctc,ctc-ce,eagle --budgets 8

Time it alone on the machine (nothing else using the CPU or the GPU).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from specbench.harness.autobudget.spec import create_entry
from specbench.harness.loop import generate
from specbench.model import TargetModel, load_target
from specbench.prompts import PromptBuilder
from specbench.questions import load_questions, resolve_bench, select_questions
from specbench.timing import wall_clock

REGIMES = ("eager", "compiled")


def parse_budgets(spec: str, drafters: list[str]) -> dict[str, int]:
    """``8`` (every drafter) or ``8,medusa=12,eagle=24`` (a default, then per drafter)."""
    budgets: dict[str, int] = {}
    default = 8
    for item in filter(None, (part.strip() for part in spec.split(","))):
        if "=" in item:
            name, value = item.split("=", 1)
            budgets[name] = int(value)
        else:
            default = int(item)
    return {name: 1 if name == "vanilla" else budgets.get(name, default) for name in drafters}


def hf_generate(model, prompt: list[int], max_new_tokens: int, static: bool, eos: list[int]) -> tuple[list[int], float]:
    """transformers' greedy `generate()` (its dynamic cache, or its static cache, compiled); (ids, seconds)."""
    from transformers import CompileConfig

    ids = torch.tensor([prompt], device=model.device)
    extra = {}
    if static:
        extra["cache_implementation"] = "static"
        if model.device.type == "cpu":  # transformers compiles a static-cache forward by itself only on GPUs
            config = CompileConfig()
            config._compile_all_devices = True  # its documented switch for other devices
            extra["compile_config"] = config
    start = wall_clock(model.device)
    out = model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos, **extra)
    seconds = wall_clock(model.device) - start
    return out[0, len(prompt):].tolist(), seconds


def build_parser() -> argparse.ArgumentParser:
    """The command line (its own function so `tests/test_gpu_scripts.py` can check the lease scripts' calls)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for regimes.json")
    parser.add_argument("--model", default="default")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--bench", default="mt_bench")
    parser.add_argument("--questions", type=int, default=2,
                        help="the first question of each category, this many categories (turn 1 of each)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--drafters", default="vanilla,ngram,medusa,hydra,ctc,ctc-ce,eagle")
    parser.add_argument("--budgets", default="8", help="N or N,NAME=N,... (vanilla always 1)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-hf", action="store_true", help="leave out transformers' generate()")
    parser.add_argument("--compile-backend", default="inductor", choices=("inductor", "cudagraphs"),
                        help="the compiled regime's backend (`specbench run --compile-backend`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    drafters = [name.strip() for name in args.drafters.split(",") if name.strip()]
    if "vanilla" not in drafters:
        drafters.insert(0, "vanilla")
    budgets = parse_budgets(args.budgets, drafters)
    eager = load_target(args.model, args.device, args.dtype)
    compiled = TargetModel(eager.model, eager.tokenizer, eager.source)  # the same weights, the other regime
    compiled.use_regime("compiled", backend=args.compile_backend)
    targets = {"eager": eager, "compiled": compiled}
    instances = {(regime, name): create_entry(name, {}) for regime in REGIMES for name in drafters}
    prompts_builder = PromptBuilder(eager.tokenizer)
    questions = select_questions(load_questions(resolve_bench(args.bench)), None, 1)[: args.questions]
    prompts = [prompts_builder.build(q.turns[:1], []) for q in questions]
    eos = sorted(eager.eos_ids)
    n = args.max_new_tokens

    def run_drafter(regime: str, name: str, prompt: list[int]):
        result = generate(targets[regime], instances[(regime, name)], prompt, n, budgets[name])
        return result.output_ids, result.wall_s, result.accept_lengths

    compile_s: dict[str, float] = {}
    print(f"warm-up: compiling every bucket and drafter part ({len(drafters)} drafters)", file=sys.stderr)
    for regime in REGIMES:
        for name in drafters:
            start = time.perf_counter()
            run_drafter(regime, name, prompts[0])
            compile_s[f"{name} {regime}"] = time.perf_counter() - start
            print(f"warm-up {name} {regime}: {compile_s[f'{name} {regime}']:.1f} s", file=sys.stderr)
    if not args.no_hf:
        for static in (False, True):
            start = time.perf_counter()
            hf_generate(eager.model, prompts[0], n, static, eos)
            key = f"transformers {'static' if static else 'eager'}"
            compile_s[key] = time.perf_counter() - start
            print(f"warm-up {key}: {compile_s[key]:.1f} s", file=sys.stderr)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def save(rows: list[dict], complete: bool) -> list[dict]:
        """regimes.json with what has run so far (after every prompt: a run cut by a timeout keeps its prompts)."""
        table = summarize(rows, drafters, not args.no_hf) if rows else []
        record = {"command": sys.argv, "model": eager.name, "device": args.device, "dtype": args.dtype,
                  "torch": torch.__version__, "threads": torch.get_num_threads(), "budgets": budgets,
                  "regime": compiled.regime_record(), "questions": [q.question_id for q in questions],
                  "complete": complete, "compile_and_first_run_s": compile_s,
                  "compile_seconds": compiled.compile_seconds, "table": table, "rows": rows}
        (out / "regimes.json").write_text(json.dumps(record, indent=1) + "\n")
        return table

    rows: list[dict] = []
    save(rows, False)
    for repeat in range(args.repeats):
        for index, prompt in enumerate(prompts):
            if not args.no_hf:
                for static in (False, True):
                    ids, seconds = hf_generate(eager.model, prompt, n, static, eos)
                    rows.append({"system": "transformers", "regime": "compiled" if static else "eager",
                                 "prompt": index, "repeat": repeat, "ids": ids, "seconds": seconds})
            for name in drafters:
                for regime in REGIMES:
                    ids, seconds, lengths = run_drafter(regime, name, prompt)
                    rows.append({"system": name, "regime": regime, "prompt": index, "repeat": repeat, "ids": ids,
                                 "seconds": seconds, "tau": statistics.mean(lengths) if lengths else None})
            print(format_table(save(rows, False)), file=sys.stderr)
            print(f"repeat {repeat + 1}/{args.repeats}, prompt {index + 1}/{len(prompts)} done", file=sys.stderr)

    table = save(rows, True)
    print(format_table(table))
    failures = [line for line in table if line["ids"] not in ("equal", "reference")]
    return 1 if failures else 0


def summarize(rows: list[dict], drafters: list[str], with_hf: bool) -> list[dict]:
    """One line per (system, regime): tok/s (all tokens over all seconds), tau, ratio to vanilla in the same
    regime and to its eager self, and whether its ids equal the reference's (compiled vanilla for compiled
    drafters, eager vanilla otherwise) on every prompt and repeat."""
    def pick(system: str, regime: str) -> list[dict]:
        return [row for row in rows if row["system"] == system and row["regime"] == regime]

    def speed(selected: list[dict]) -> float:
        return sum(len(row["ids"]) for row in selected) / sum(row["seconds"] for row in selected)

    reference = {(row["prompt"], row["regime"]): row["ids"] for row in rows if row["system"] == "vanilla"}
    eager_ids = {(row["system"], row["prompt"]): row["ids"] for row in rows if row["regime"] == "eager"}
    vanilla = {regime: speed(pick("vanilla", regime)) for regime in REGIMES}
    table = []
    for system in (["transformers"] if with_hf else []) + drafters:
        for regime in REGIMES:
            selected = pick(system, regime)
            tok_s = speed(selected)
            if system == "vanilla" and regime == "eager":
                verdict = "reference"
            else:  # transformers against eager vanilla; a drafter against vanilla in its regime and its eager self
                key_regime = "eager" if system == "transformers" else regime
                same = all(row["ids"] == reference[(row["prompt"], key_regime)] for row in selected)
                as_eager = system == "transformers" or all(row["ids"] == eager_ids[(system, row["prompt"])]
                                                           for row in selected)
                verdict = "equal" if same and as_eager else "differs" if not same else "differs from its eager ids"
            taus = [row["tau"] for row in selected if row.get("tau") is not None]
            table.append({"system": system, "regime": regime, "tok_s": tok_s,
                          "tau": statistics.mean(taus) if taus else None,
                          "vs_vanilla_same_regime": tok_s / vanilla[regime],
                          "vs_eager_vanilla": tok_s / vanilla["eager"],
                          "compiled_over_eager": tok_s / speed(pick(system, "eager")) if regime == "compiled" else None,
                          "ids": verdict})
    return table


def format_table(table: list[dict]) -> str:
    head = f"{'system':<13} {'regime':<9} {'tok/s':>7} {'tau':>5} {'x vanilla':>9} {'x eager van.':>12} {'comp/eager':>10}  ids"
    lines = [head]
    for line in table:
        tau = f"{line['tau']:.2f}" if line["tau"] is not None else "-"
        ratio = f"{line['compiled_over_eager']:.2f}" if line["compiled_over_eager"] is not None else "-"
        lines.append(f"{line['system']:<13} {line['regime']:<9} {line['tok_s']:>7.1f} {tau:>5} "
                     f"{line['vs_vanilla_same_regime']:>9.2f} {line['vs_eager_vanilla']:>12.2f} {ratio:>10}  {line['ids']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
