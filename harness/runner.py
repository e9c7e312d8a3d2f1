"""The runner: questions x drafters through the one decode loop, with warm-up, interleaving, repeats,
resume, answer records and the manifest.

Order of work: for each question, every drafter in turn (vanilla first), each turn of the conversation
prompted with that drafter's own earlier answers. Interleaving per question spreads machine noise
evenly over drafters. One warm-up question (the first selected one, first turn, at most 32 tokens) runs
through every drafter before anything is recorded. Under torchrun each rank runs its share of the
questions this way and rank 0 merges the answers (`harness.distributed`).

Batch sizes (`--batch-size 1,2,4`; docs/decisions.md, "Batching"): batch 1 runs as above and writes
`<out>/answers/`. Each size B > 1 then runs drafter by drafter (vanilla first) through `generate_batch`: every
pending question's turn 1 as one stream of jobs, B decoding at a time with refill, then every turn 2 prompted
with that question's own turn-1 answer, and so on (one *batch pass* per turn). It writes
`<out>/batch-B/answers/<drafter>.jsonl`, so the summary compares each drafter with vanilla at the same B.
A record carries ``batch_size`` and, at B > 1, ``batch_passes`` (per turn: the pass's id, sequences, generated
tokens and measured wall time), from which throughput is exact. A drafter's records at B are written when
all its passes at B end: an interrupted drafter reruns all its unfinished questions at B on ``--resume``.
"""

from __future__ import annotations

import os
import platform
import sys
import time
import uuid
from dataclasses import MISSING, asdict, fields
from pathlib import Path

import torch

from specbench import __version__
from specbench.drafter import Drafter
from specbench.errors import SpecbenchError
from specbench.harness import distributed
from specbench.harness.attribution import Attribution, attribute_run, fp32_target
from specbench.harness.autobudget import resolve_budgets
from specbench.harness.autobudget.profile import below_one_node, resolve_profile
from specbench.harness.autobudget.spec import BudgetChoice, create_entry
from specbench.harness.config import RunConfig
from specbench.harness.loop import Job, TurnResult, generate, generate_batch
from specbench.harness.options import resume_keys
from specbench.harness.provenance import git_state, source_digest
from specbench.model import TargetModel, load_target
from specbench.model_source import file_sha256
from specbench.placement import placement_summary
from specbench.progress import phase
from specbench.prompts import PromptBuilder
from specbench.questions import Question, load_questions, resolve_bench, select_questions
from specbench.results import (
    ANSWERS,
    BASELINE,
    BATCH_PREFIX,
    MANIFEST,
    Answer,
    answer_files,
    answers_path,
    append_answer,
    batch_folder,
    first_divergence,
    read_answers,
    read_manifest,
    reopen_compressed,
    write_json,
)
from specbench.sampling import turn_seed
from specbench.timing import wall_clock

WARMUP_TOKENS = 32


def run_profile(config: RunConfig, target: TargetModel) -> dict | None:
    """The profile as the manifest records it (with its ``source``), or None."""
    profile, source = resolve_profile(config.profile, target)
    if profile is None:
        return None
    cells = [[shape, profile.sizes[i], round(profile.ms[shape][i] / profile.ms[shape][0], 3)]
             for shape, i in below_one_node(profile.ms)]
    return profile.to_json() | {"source": source} | ({"below_one_node": cells} if cells else {})


def drafters_regime(target: TargetModel, drafters: dict[str, Drafter]) -> dict:
    """In the compiled regime, what ran compiled per drafter: the parts it compiled (`Drafter.compile_parts`),
    or why it ran eagerly (not capturable: a plug-in's default; or nothing of its own to compile)."""
    if not target.compile:
        return {}
    record = {}
    for name, drafter in drafters.items():
        parts = target.prepare_drafter(drafter)
        reason = target.drafter_eager_reason(drafter)
        record[name] = {"compiled": parts} if parts else {"compiled": [], "eager": reason or "capturable, nothing to compile"}
    return {"drafters": record}


def build_manifest(config: RunConfig, target: TargetModel, bench_path: Path, questions: list[Question],
                   budgets: dict[str, BudgetChoice], calibration: dict | None,
                   drafters: dict[str, Drafter] | None = None) -> dict:
    import transformers

    return {
        "specbench_version": __version__,
        **git_state(),
        "source_sha256": source_digest(),
        "command": sys.argv,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "config": asdict(config),
        "model": {"name": target.name, "path": str(target.source.path) if target.source else None,
                  "sha256": target.source.sha256 if target.source else None,
                  "fingerprint": target.handle.fingerprint, "in_memory": target.source is None,
                  "architecture": type(target.model).__name__, "linear_kernel": target.linear_kernel,
                  "attention_kernel": target.attention_kernel,
                  "parameters": sum(p.numel() for p in target.model.parameters())},
        "data": {"path": str(bench_path), "sha256": file_sha256(bench_path), "questions": [q.question_id for q in questions]},
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__, "platform": platform.platform(),
                        "processor": platform.processor(), "cpu_count": os.cpu_count(),
                        "torch_threads": torch.get_num_threads(),
                        "cuda_device": torch.cuda.get_device_name() if target.device.type == "cuda" else None,
                        "placement": placement_summary(target)},
        "profile": run_profile(config, target),
        "regime": target.regime_record() | drafters_regime(target, drafters or {}),  # eager or compiled, per drafter
        "budgets": {name: choice.to_json() for name, choice in budgets.items()},  # what each drafter ran at, and why
        "calibration": calibration,
    }


class Run:
    """One benchmark run in one output directory."""

    def __init__(self, config: RunConfig, progress: bool = True, target: TargetModel | None = None) -> None:
        config.check(model_given=target is not None)
        self.target = target
        self.config = config
        self.out = Path(config.out)
        self.shard = distributed.current_shard() if target is None else None  # torchrun's rank, if sharded
        self.answers_home = self.shard.folder(self.out) if self.shard else self.out  # where this process appends
        self.drafter_names = config.ordered_drafters()
        self.bench_path = resolve_bench(config.bench)
        self.questions = select_questions(load_questions(self.bench_path), config.categories, config.limit)
        # Built before the model loads, so a bad drafter option stops the run at once.
        self.drafters = {name: create_entry(name, config.drafter_options) for name in self.drafter_names}
        if self.shard:
            distributed.start(self.shard, self.device)
        self.done = self._prepare_out_dir()
        #: finished records at each batch size B > 1 (its own `batch_folder`), by drafter and question id
        self.batch_done = {size: self._batch_done(size) for size in config.batch_sizes if size > 1}
        if self.shard:
            distributed.barrier()  # every rank has looked at the directory before any rank writes to it
        self.progress = progress and self.is_main

    @property
    def is_main(self) -> bool:
        """True for a single process and for torchrun's rank 0 (which writes the manifest and merges)."""
        return self.shard is None or self.shard.is_main

    @property
    def device(self) -> str:
        """This process's device: ``cuda`` means rank r's own GPU under torchrun."""
        return self.shard.device(self.config.device) if self.shard else self.config.device

    def _prepare_out_dir(self) -> dict[str, dict[object, Answer]]:
        """Finished records by drafter and question id (empty unless resuming)."""
        if self.out.exists() and not self.out.is_dir():
            raise SpecbenchError(f"--out {self.out} is a file, not a directory; choose another --out")
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecbenchError(f"cannot create --out {self.out}: {exc.strerror}") from None
        folders = [self.out / ANSWERS, *self.out.glob(f"{distributed.RANKS}/*/{ANSWERS}"),
                   *self.out.glob(f"{BATCH_PREFIX}*/{ANSWERS}")]  # merged, each rank's, a batch sweep's sub-runs
        existing = [path for folder in folders for path in answer_files(folder).values()]
        if existing and not self.config.resume:
            raise SpecbenchError(f"{self.out} already holds results; pass --resume to continue it, or choose another --out")
        if not self.config.resume:
            return {}
        manifest = read_manifest(self.out)
        if manifest is None:
            if existing:
                raise SpecbenchError(f"{self.out} has answers but no {MANIFEST}; cannot check it is the same run")
            return {}
        before = manifest.get("config", {})
        now = asdict(self.config)
        defaults = {f.name: f.default for f in fields(self.config) if f.default is not MISSING}
        # a key the old manifest lacks (recorded before the setting existed) had the default value
        changed = [key for key in resume_keys(type(self.config)) if before.get(key, defaults.get(key)) != now.get(key)]
        if changed:
            detail = ", ".join(f"{key}: {before.get(key)!r} -> {now.get(key)!r}" for key in changed)
            raise SpecbenchError(f"--resume with different settings than {self.out}/{MANIFEST} ({detail})")
        for folder in folders:  # a compressed finished run (`gzip -9n`) is continued in plain files
            reopen_compressed(folder)
        done = {}  # every record any earlier launch finished (merged, or in any rank's file), by drafter
        for name in self.drafter_names:
            own = answers_path(self.answers_home, name)  # a cut-short last line is removed only from our own file
            done[name] = {}
            for path in distributed.answer_files(self.out, name):
                for record in read_answers(path, drop_partial_tail=True, keep_file=path != own):
                    done[name].setdefault(record.question_id, record)
        return done

    def _batch_done(self, size: int) -> dict[str, dict[object, Answer]]:
        """Finished records at batch size ``size`` > 1 (empty unless resuming; `_prepare_out_dir` has checked
        the settings): ``batch-<size>/answers/<drafter>.jsonl``, a cut-short last line removed."""
        done: dict[str, dict[object, Answer]] = {}
        if not self.config.resume:
            return done
        for name in self.drafter_names:
            path = answers_path(batch_folder(self.out, size), name)
            done[name] = {}
            if path.is_file():
                for record in read_answers(path, drop_partial_tail=True):
                    done[name].setdefault(record.question_id, record)
        return done

    def batch_pending(self, size: int) -> list[Question]:
        """The questions some drafter has not finished at batch size ``size`` > 1."""
        done = self.batch_done[size]
        return [q for q in self.questions if any(q.question_id not in done.get(d, {}) for d in self.drafter_names)]

    def pending(self) -> list[Question]:
        """This process's questions (under torchrun, its rank's share) that some drafter has not finished."""
        mine = self.shard.owns(self.questions) if self.shard else self.questions
        return [q for q in mine if any(q.question_id not in self.done.get(d, {}) for d in self.drafter_names)]

    def _record_compile_seconds(self, target: TargetModel) -> None:
        """The compiled regime's warm-up cost per compiled function (`TargetModel.compile_seconds`), in the
        manifest's ``regime`` record: written after the warm-up (a run cut short still says where its time
        went) and again at the end (batch sizes compile in their own warm-ups)."""
        manifest = read_manifest(self.out) if self.is_main and target.compile else None
        if manifest is not None:
            manifest.setdefault("regime", {})["compile_seconds"] = dict(target.compile_seconds)
            write_json(self.out / MANIFEST, manifest)

    def _budgets_and_manifest(self, target: TargetModel, prompts: PromptBuilder,
                              ranks: list[dict] | None) -> dict[str, BudgetChoice]:
        """The tree budgets (a resumed run keeps the ones it chose), and the manifest written with them."""
        config = self.config
        manifest = read_manifest(self.out) if config.resume else None
        if manifest is not None and manifest.get("budgets"):
            budgets = {name: BudgetChoice(**choice) for name, choice in manifest["budgets"].items()}
            missing = [size for size in config.batch_sizes if size > 1 and any(
                choice.how == "auto" and str(size) not in choice.batches for choice in budgets.values())]
            if missing:  # a resume adds batch sizes to the sweep: `auto` chooses there too (from the same caches)
                added, calibration = resolve_budgets(config, target, prompts, self.drafters, self.progress)
                for name, choice in budgets.items():
                    for size in missing:
                        if choice.how == "auto" and str(size) in added[name].batches:
                            choice.batches[str(size)] = added[name].batches[str(size)]
                manifest["budgets"] = {n: c.to_json() for n, c in budgets.items()}
                manifest.setdefault("calibration", {}).setdefault("batches", {}).update(
                    (calibration or {}).get("batches", {}))
        else:
            budgets, calibration = resolve_budgets(config, target, prompts, self.drafters, self.progress)
            if manifest is None:
                manifest = build_manifest(config, target, self.bench_path, self.questions, budgets, calibration,
                                          self.drafters)
            else:  # resuming a run recorded before budgets were: add them, keep the rest as it was
                manifest |= {"budgets": {n: c.to_json() for n, c in budgets.items()}, "calibration": calibration}
        # every batch size any launch of this directory ran (a resume may add sizes to the sweep)
        recorded = manifest.setdefault("config", {})
        earlier = recorded.get("batch_size", [1])
        recorded["batch_size"] = sorted(set([earlier] if isinstance(earlier, int) else earlier) | set(config.batch_sizes))
        if ranks is not None:  # one entry per torchrun launch of this run directory
            manifest.setdefault("distributed", []).append({
                "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "world_size": len(ranks),
                "backend": "nccl" if self.device.startswith("cuda") else "gloo",
                "partition": "rank r runs the questions at positions r, r + world_size, ... of data.questions",
                "ranks": ranks})
        write_json(self.out / MANIFEST, manifest)
        return budgets

    def _leave_out_unavailable(self, target: TargetModel) -> None:
        """``--drafters all``: drop the drafters that cannot run on ``target`` (a trained one without weights
        for it), saying why, before budgets and the manifest are made."""
        for name in list(self.drafters):
            reason = self.drafters[name].unavailable(target.handle)
            if reason is not None:
                if self.is_main:
                    print(f"specbench: {name} left out of --drafters all: {reason}", file=sys.stderr)
                del self.drafters[name]
        self.drafter_names = [name for name in self.drafter_names if name in self.drafters]
        self.config.drafters = [name for name in self.config.drafters if name in self.drafters]

    def execute(self) -> Path:
        config = self.config
        torch.manual_seed(config.seed)
        if config.threads:
            torch.set_num_threads(config.threads)
        target = self.target or load_target(config.model, self.device, config.dtype, config.device_map)
        target.check_new_tokens(config.max_new_tokens)
        # eager (default) or compiled: the target's verify forward and cache
        target.use_regime(config.regime, backend=config.compile_backend)
        if getattr(config, "every_drafter", False):
            self._leave_out_unavailable(target)
        if target.compile:  # the capturable drafters' forwards compiled before the manifest records them
            for drafter in self.drafters.values():
                drafter.reset(target.handle)
                target.prepare_drafter(drafter)
        prompts = PromptBuilder(target.tokenizer, config.template)
        drafters = self.drafters
        shard = self.shard
        ranks = distributed.gather(distributed.rank_record(shard, self.device), shard.world_size) if shard else None
        if self.is_main:
            self.budgets = self._budgets_and_manifest(target, prompts, ranks)
        if shard:  # every rank runs rank 0's budgets
            self.budgets = distributed.broadcast(self.budgets if shard.is_main else None)

        sizes = config.batch_sizes
        todo = self.pending() if 1 in sizes else []  # batch 1: interleaved per question, as always
        batched = {size: self.batch_pending(size) for size in sizes if size > 1}
        first = todo or next((questions for questions in batched.values() if questions), [])
        if config.warmup and first:
            warm_ids = prompts.build(first[0].turns[:1], [])
            for name, drafter in drafters.items():
                generate(target, drafter, warm_ids, min(WARMUP_TOKENS, config.max_new_tokens), self.budgets[name].budget,
                         sampling=config.sampling, seed=turn_seed(config.seed, "warm-up", 0))
        self._record_compile_seconds(target)

        bar = phase("questions x drafters", len(todo) * len(drafters), "q", show=self.progress)
        live: dict[str, list[float]] = {name: [0, 0.0, 0, 0] for name in drafters}  # tokens, seconds, steps, accepted
        for question in todo:
            vanilla_ids = None
            if question.question_id in self.done.get(BASELINE, {}):
                vanilla_ids = self.done[BASELINE][question.question_id].output_ids
            for name, drafter in drafters.items():
                if question.question_id in self.done.get(name, {}):
                    bar.update(1)
                    continue
                record = self._run_question(question, target, drafter, prompts, vanilla_ids, name)
                append_answer(answers_path(self.answers_home, name), record)
                self.done.setdefault(name, {})[question.question_id] = record
                if name == BASELINE:
                    vanilla_ids = record.output_ids
                stats = live[name]
                stats[0] += sum(record.new_tokens)
                stats[1] += sum(record.wall_time)
                stats[2] += len(record.accept_lengths)
                stats[3] += sum(record.accept_lengths)
                bar.update(1, **{n: f"{s[0] / max(s[1], 1e-9):.1f}tok/s tau={s[3] / max(s[2], 1):.2f}"
                                 for n, s in live.items() if s[2]})
        bar.close()
        for size, questions in batched.items():
            if questions:
                self._run_batch_size(size, questions, target, prompts)
        self._record_compile_seconds(target)
        self._merge()
        if self.is_main and config.sampling.greedy and 1 in sizes:  # after every timed turn: the re-score cannot perturb timing
            self.attribution = self._attribute(target, prompts)
        return self.out

    def _attribute(self, target: TargetModel, prompts: PromptBuilder) -> Attribution:
        """Re-score the turns whose ids differ from vanilla's in fp32 (`harness.attribution`): an fp32 copy of
        the target is loaded once, and only if some turn differs and the run's dtype is not fp32."""
        config = self.config
        loaded_here = self.target is None  # loaded from --model: load it again in fp32 from the same source

        def scorer() -> TargetModel:
            return fp32_target(target, config.model if loaded_here else None, self.device, config.device_map)

        return attribute_run(self.out, scorer, prompts, self.questions)  # says on stderr what it re-scores

    def _merge(self) -> None:
        """After every rank has finished: rank 0 merges the rank files into ``answers/`` (also when a single
        process resumes a sharded run), then the process group closes."""
        if self.shard:
            distributed.barrier()
        if self.is_main and (self.out / distributed.RANKS).is_dir():
            for name in self.drafters:
                distributed.merge_answers(self.out, name, [q.question_id for q in self.questions])
        if self.shard:
            distributed.barrier()
            distributed.stop()

    def _run_question(self, question: Question, target: TargetModel, drafter, prompts: PromptBuilder,
                      vanilla_ids: list[list[int]] | None, name: str) -> Answer:
        config = self.config
        sampling = config.sampling
        budget = self.budgets[name].budget
        answers: list[str] = []
        results: list[TurnResult] = []
        repeats_wall: list[list[float]] = []
        seeds = [turn_seed(config.seed, question.question_id, turn) for turn in range(len(question.turns))]
        for turn, seed in enumerate(seeds):
            prompt_ids = prompts.build(question.turns[: turn + 1], answers)
            runs = [generate(target, drafter, prompt_ids, config.max_new_tokens, budget, config.breakdown,
                             sampling=sampling, seed=seed)
                    for _ in range(config.repeats)]
            for other in runs[1:]:  # greedy, or sampled from the same seed: the repeats must agree
                if other.output_ids != runs[0].output_ids:
                    raise RuntimeError(f"drafter {name}: repeated runs of question {question.question_id} differ")
            median = sorted(runs, key=lambda r: r.wall_s)[len(runs) // 2]
            results.append(median)
            repeats_wall.append([r.wall_s for r in runs])
            answers.append(prompts.answer_text(median.output_ids))
        return self._answer(question, name, target, results, answers, repeats_wall, seeds, vanilla_ids, {"batch_size": 1})

    def _answer(self, question: Question, name: str, target: TargetModel, results: list[TurnResult],
                answers: list[str], repeats_wall: list[list[float]], seeds: list[int],
                vanilla_ids: list[list[int]] | None, extra: dict) -> Answer:
        """One question's record from its turns' results (the same at every batch size; ``extra`` holds
        ``batch_size`` and, above 1, the ``batch_passes``; the record adds the ``regime``)."""
        sampling = self.config.sampling
        output_ids = [r.output_ids for r in results]
        divergence = None  # sampled ids equal vanilla's in distribution only (tests), so they are not compared
        if sampling.greedy and name == BASELINE:
            divergence = [None] * len(output_ids)  # the reference itself
        elif sampling.greedy and vanilla_ids is not None:
            divergence = [first_divergence(ids, ref) for ids, ref in zip(output_ids, vanilla_ids)]
        return Answer(
            question_id=question.question_id, category=question.category, drafter=name, turns=answers,
            new_tokens=[r.new_tokens for r in results], wall_time=[r.wall_s for r in results],
            output_ids=output_ids, steps=[r.steps for r in results], prefill_ms=[r.prefill_ms for r in results],
            wall_time_repeats=repeats_wall, first_divergence=divergence, model_id=target.name,
            tree_budget=self.budgets[name].at(extra["batch_size"]), sampling=sampling.to_json(),
            seeds=None if sampling.greedy else seeds,
            answer_id=uuid.uuid4().hex, tstamp=time.time(), extra={"regime": target.regime, **extra},
        )

    # ---- batch sizes above 1 (module docstring) ------------------------------------------------------------
    def _run_batch_size(self, size: int, questions: list[Question], target: TargetModel,
                        prompts: PromptBuilder) -> None:
        """Every drafter (vanilla first) over ``questions`` at batch size ``size``; records appended to
        ``batch-<size>/answers/``. A warm-up batch (``size`` copies of the first question's turn 1, at most
        `WARMUP_TOKENS` tokens) runs through each drafter first: the batch cache's first forwards."""
        config = self.config
        home = batch_folder(self.out, size)
        done = self.batch_done[size]
        for name, drafter in self.drafters.items():
            todo = [q for q in questions if q.question_id not in done.get(name, {})]
            if not todo:
                continue
            if self.progress:
                print(f"specbench: batch size {size}: {name}, {len(todo)} questions", file=sys.stderr)
            budget = self.budgets[name].at(size)  # `auto`: chosen for this batch size
            if config.warmup:
                warm_ids = prompts.build(todo[0].turns[:1], [])
                jobs = [Job(list(warm_ids), min(WARMUP_TOKENS, config.max_new_tokens),
                            turn_seed(config.seed, "warm-up", 0), key=b) for b in range(size)]
                for _ in generate_batch(target, drafter, jobs, budget, size, sampling=config.sampling):
                    pass
            vanilla = done.get(BASELINE, {})
            for record in self._batch_passes(size, todo, target, drafter, prompts, name, vanilla):
                append_answer(answers_path(home, name), record)
                done.setdefault(name, {})[record.question_id] = record

    def _batch_passes(self, size: int, todo: list[Question], target: TargetModel, drafter, prompts: PromptBuilder,
                      name: str, vanilla: dict[object, Answer]) -> list[Answer]:
        """``todo`` through ``drafter`` at batch size ``size``: one `generate_batch` pass per turn (every
        question that has that turn, each prompted with its own earlier answers), timed as a whole."""
        config = self.config
        budget = self.budgets[name].at(size)
        results: dict[object, list[TurnResult]] = {q.question_id: [] for q in todo}
        texts: dict[object, list[str]] = {q.question_id: [] for q in todo}
        passes: dict[object, list[dict]] = {q.question_id: [] for q in todo}
        for turn in range(max(len(q.turns) for q in todo)):
            asked = [q for q in todo if len(q.turns) > turn]
            jobs = [Job(list(prompts.build(q.turns[: turn + 1], texts[q.question_id])), config.max_new_tokens,
                        turn_seed(config.seed, q.question_id, turn), key=q.question_id) for q in asked]
            start = wall_clock(target.device)
            finished = {job.key: result for job, result in generate_batch(target, drafter, jobs, budget, size,
                                                                          config.breakdown, config.sampling)}
            wall_s = wall_clock(target.device) - start
            record = {"id": uuid.uuid4().hex, "turn": turn + 1, "batch_size": size, "sequences": len(jobs),
                      "new_tokens": sum(result.new_tokens for result in finished.values()), "wall_s": wall_s}
            for q in asked:
                result = finished[q.question_id]
                results[q.question_id].append(result)
                texts[q.question_id].append(prompts.answer_text(result.output_ids))
                passes[q.question_id].append(record)
        records = []
        for q in todo:
            qid = q.question_id
            seeds = [turn_seed(config.seed, qid, turn) for turn in range(len(q.turns))]
            reference = vanilla[qid].output_ids if qid in vanilla else None
            records.append(self._answer(q, name, target, results[qid], texts[qid], [[r.wall_s] for r in results[qid]],
                                        seeds, reference, {"batch_size": size, "batch_passes": passes[qid]}))
        return records

