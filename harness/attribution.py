"""Divergence attribution (issue 40; docs/decisions.md, "Divergence attribution"): when a drafter's greedy
ids differ from vanilla's, is that rounding or a bug?

Vanilla scores one token per forward, a drafter a tree; in bf16 or fp16 the two forwards round the same
logits differently, so where the target's top two tokens are nearly tied the two argmaxes may differ, and
the outputs part there, each still the target's greedy output up to rounding. A wrong KV commit looks the
same from the ids alone. This module re-scores each divergent turn with an fp32 copy of the target, one
forward over the turn's prompt and the drafter's output (no cache), which gives the fp32 logits for every
output position at once:

* the **margin** at the first divergence d: fp32 logit of vanilla's token minus the drafter's, given the
  shared prefix (the prompt and the first d ids; only when the turn's prompt equals vanilla's, i.e. every
  earlier turn's answer was equal);
* the **deficit** of every token the drafter emitted: the fp32 top logit minus that token's logit, given
  the drafter's own context. An honest greedy token is the argmax of the run's logits, so its deficit is
  within rounding as well; a bug's effect that first lands on a near-tie shows up a few tokens later as a
  large deficit (measured: docs/decisions.md).

Both are compared with `RoundingBound`, ``(sqrt(L) + 1) * (u + sqrt(K) * u32) * ||w_a - w_b|| * ||h||``
(L layers, u the run dtype's unit roundoff, K the longest reduction, u32 fp32's unit roundoff for the fp32
accumulation, w the lm_head rows of the two tokens, h the fp32 final hidden state at the position):
within it for the margin and every deficit, the turn is a **near-tie**; beyond it anywhere, a **mismatch**.

The pass runs after the run (`Run.execute` calls `attribute_run` once every question is timed, so timing
is untouched; `specbench attribute RUN_DIR` does the same for a stored run) and writes each turn's result
into the answer records as ``attribution`` (`specbench.results`).
"""

from __future__ import annotations

import copy
import math
import os
import sys
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

from specbench.errors import SpecbenchError
from specbench.model import TargetModel, load_target
from specbench.model_source import file_sha256
from specbench.prompts import PromptBuilder
from specbench.questions import Question, load_questions, resolve_bench
from specbench.results import (
    ANSWERS,
    BASELINE,
    EQUAL,
    MISMATCH,
    NEAR_TIE,
    Answer,
    answer_files,
    compared,
    first_divergence,
    load_run,
    read_manifest,
)

#: unit roundoff (half the machine epsilon) of each run dtype: bf16 keeps 8 significant bits, fp16 11, fp32 24
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
#: every kernel a run uses (CPU GEMM and the weight-left product, cuBLAS, SDPA) accumulates in fp32
ACCUMULATION = 2.0 ** -24


@dataclass(frozen=True)
class RoundingBound:
    """How far rounding in ``dtype`` can move a margin of the target's logits away from fp32's.

    A layer rounds what it stores to the run dtype (relative error u per value) and accumulates each dot
    product of length K in fp32 (relative error about sqrt(K) u32): per layer ``u + sqrt(K) u32``. Over L
    residual layers with independent errors the final hidden state h is off by ``sqrt(L)`` times that,
    relatively, and the lm_head product adds one more layer's worth. A margin between tokens a and b is
    ``(w_a - w_b) . h``, so by Cauchy-Schwarz its error is at most ``(sqrt(L) + 1) (u + sqrt(K) u32)``
    times ``||w_a - w_b|| ||h||``. K is the longest reduction: the hidden or intermediate width, or the
    context length for attention."""

    dtype: str
    layers: int
    width: int

    @classmethod
    def of(cls, config, dtype: str) -> "RoundingBound":
        if dtype not in UNIT_ROUNDOFF:
            raise SpecbenchError(f"no rounding bound for dtype {dtype!r} (known: {', '.join(UNIT_ROUNDOFF)})")
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        hidden = int(text.hidden_size)
        width = max(hidden, int(getattr(text, "intermediate_size", None) or 4 * hidden))
        return cls(dtype, int(text.num_hidden_layers), width)

    def factor(self, context: int = 0) -> float:
        """The bound divided by ``||w_a - w_b|| ||h||``, for a position that attends to ``context`` tokens."""
        per_layer = UNIT_ROUNDOFF[self.dtype] + math.sqrt(max(self.width, context)) * ACCUMULATION
        return (math.sqrt(self.layers) + 1.0) * per_layer


@contextmanager
def _full_fp32() -> Iterator[None]:
    """fp32 products really in fp32: TF32 (10-bit mantissa) off on CUDA while re-scoring."""
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
        torch.set_float32_matmul_precision(saved[2])


def _round(value: float) -> float:
    return float(f"{value:.6g}")


class Rescorer:
    """An fp32 target and the bound of the run's dtype: `attribute_turn` for one turn at a time."""

    def __init__(self, target: TargetModel, dtype: str) -> None:
        if target.dtype != torch.float32:
            raise ValueError(f"the re-scoring target must be float32, got {target.dtype}")
        self.target = target
        self.bound = RoundingBound.of(target.config, dtype)
        self.weight = target.lm_head.weight.detach()  # [V, H]

    @torch.inference_mode()
    def logits(self, prompt_ids: list[int], output_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 hidden states [n, H] and logits [n, V] predicting each of the n output ids (teacher forced)."""
        sequence = torch.tensor(list(prompt_ids) + list(output_ids[:-1]), dtype=torch.long, device=self.target.device)
        with _full_fp32():
            hidden = self.target.decoder(input_ids=sequence[None], use_cache=False).last_hidden_state[0]
            hidden = hidden[len(prompt_ids) - 1:]
            logits = self.target.lm_head(hidden)
        return hidden.float(), logits.float()

    def _scale(self, hidden: torch.Tensor, a: int, b: int) -> float:
        """||w_a - w_b|| ||h||: the largest the margin between tokens a and b could be at this position."""
        weight = self.weight
        return float((weight[a].float() - weight[b].float()).norm() * hidden.norm())

    def attribute_turn(self, prompt_ids: list[int], ids: list[int], reference: list[int], shared_prompt: bool) -> dict:
        """The attribution of one turn: ``{"status": "equal"}`` when ``ids == reference``, else near-tie or
        mismatch with the margin at the first divergence (when the prompt is shared), the worst deficit of
        the drafter's tokens, their bounds, and ``over_bound`` (the larger ratio: above 1 is a mismatch)."""
        position = first_divergence(ids, reference)
        if position is None:
            return {"status": EQUAL}
        hidden, logits = self.logits(prompt_ids, ids)
        emitted = torch.tensor(ids, device=logits.device)
        top = logits.max(dim=-1)
        deficits = top.values - logits.gather(1, emitted[:, None])[:, 0]  # >= 0
        ratios = []
        for k in range(len(ids)):
            deficit = float(deficits[k])
            if deficit <= 0.0:
                ratios.append((0.0, deficit, 0.0))
                continue
            bound = self.bound.factor(len(prompt_ids) + k) * self._scale(hidden[k], int(top.indices[k]), ids[k])
            ratios.append((deficit / bound, deficit, bound))
        worst = max(range(len(ids)), key=lambda k: ratios[k][0])
        entry = {"position": position, "shared_prompt": shared_prompt, "tokens": None, "margin": None, "bound": None,
                 "deficit": _round(ratios[worst][1]), "deficit_position": worst, "deficit_bound": _round(ratios[worst][2])}
        over = ratios[worst][0]
        reason = "deficit" if over > 1.0 else None
        if not shared_prompt:
            pass  # an earlier turn's answer differs, so this turn's prompt does: vanilla's tokens are no reference
        elif position >= len(ids) or position >= len(reference):
            reason = "length"  # one output is a strict prefix of the other: one of them stopped where greedy cannot
        else:
            vanilla, mine = reference[position], ids[position]
            margin = float(logits[position, vanilla] - logits[position, mine])
            bound = self.bound.factor(len(prompt_ids) + position) * self._scale(hidden[position], vanilla, mine)
            entry |= {"tokens": [vanilla, mine], "margin": _round(margin), "bound": _round(bound)}
            if abs(margin) > bound:
                reason = "margin"  # the first divergence itself is beyond rounding
            over = max(over, abs(margin) / bound)
        status = MISMATCH if reason is not None else NEAR_TIE
        return {"status": status, **entry, "over_bound": _round(over), **({"reason": reason} if reason else {})}


@dataclass
class Attribution:
    """What `attribute_run` did: turn counts by drafter and status, the turns it re-scored."""

    counts: dict[str, Counter]
    rescored: int = 0
    skipped: str | None = None  # why divergent turns were left unattributed (the fp32 copy could not be loaded)


def _needs_work(record: Answer, force: bool) -> bool:
    entries = record.attribution
    return force or entries is None or len(entries) != len(record.turns) or any("status" not in e for e in entries)


def _write_answers(path: Path, records: list[Answer]) -> None:
    """Rewrite a whole answers file (atomically: a temporary file, then a rename), gzip-compressed again
    when it was (``.jsonl.gz``, a committed run)."""
    import gzip
    import json

    text = "".join(json.dumps(record.to_json(), separators=(",", ":")) + "\n" for record in records)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(gzip.compress(text.encode("utf-8"), mtime=0) if path.suffix == ".gz" else text.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


def attribute_run(out: Path, scorer: Callable[[], TargetModel], prompts: PromptBuilder | None = None,
                  questions: list[Question] | None = None, force: bool = False,
                  log: Callable[[str], None] | None = None) -> Attribution:
    """Attribute every greedy turn of the run in ``out`` whose ids differ from vanilla's, and write the
    results into its answer files (records already attributed are kept unless ``force``).

    ``scorer()`` returns the fp32 target; it is called once, and only when some turn differs. ``prompts``
    builds the turns' prompts (default: from the scorer's tokenizer and the manifest's template);
    ``questions`` are the run's (default: the manifest's question file, checked against its hash). A scorer
    that cannot be loaded (memory) leaves the divergent turns unattributed and says why."""
    out = Path(out)
    log = log or (lambda text: print(text, file=sys.stderr))
    manifest = read_manifest(out) or {}
    config = manifest.get("config") or {}
    dtype = config.get("dtype", "float32")
    runs = load_run(out)  # refuses records whose claims disagree with their ids
    reference = {record.question_id: record for record in runs.get(BASELINE, [])}
    counts: dict[str, Counter] = {}
    todo = []  # (drafter, record index, turn, question): divergent turns to re-score
    changed = set()
    for name, records in runs.items():
        counts[name] = Counter()
        for index, record in enumerate(records):
            base = reference.get(record.question_id)
            if base is None or not compared(record):
                continue
            if not _needs_work(record, force):
                counts[name].update(entry["status"] for entry in record.attribution)
                continue
            record.attribution = [{"status": EQUAL} if t < len(base.output_ids) and ids == base.output_ids[t] else None
                                  for t, ids in enumerate(record.output_ids)]
            changed.add(name)
            todo += [(name, index, t) for t, entry in enumerate(record.attribution) if entry is None]
            counts[name][EQUAL] += sum(entry is not None for entry in record.attribution)
    result = Attribution(counts)
    if todo:
        if questions is None:
            questions = manifest_questions(out, manifest)
        by_id = {question.question_id: question for question in questions}
        log(f"attribution: re-scoring {len(todo)} turn(s) whose ids differ from vanilla's with an fp32 copy of the "
            f"target (run dtype {dtype}; docs/decisions.md, 'Divergence attribution')")
        try:
            rescorer = Rescorer(scorer(), dtype)
        except (RuntimeError, MemoryError, OSError, SpecbenchError) as exc:  # torch's OutOfMemoryError is a RuntimeError
            result.skipped = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            log(f"attribution skipped ({result.skipped}); `specbench attribute {out} --device cpu` re-scores later")
            todo = []
        else:
            if prompts is None:
                prompts = PromptBuilder(rescorer.target.tokenizer, config.get("template"))
        for name, index, t in todo:
            record = runs[name][index]
            base = reference[record.question_id]
            question = by_id.get(record.question_id)
            if question is None:
                raise SpecbenchError(f"{out}/{ANSWERS}/{name}.jsonl: question {record.question_id} is not in the "
                                     f"run's question file; cannot rebuild its prompt")
            prompt = prompts.build(question.turns[: t + 1], record.turns[:t])
            shared = t == 0 or prompt == prompts.build(question.turns[: t + 1], base.turns[:t])
            entry = rescorer.attribute_turn(prompt, record.output_ids[t], base.output_ids[t], shared)
            record.attribution[t] = entry
            counts[name][entry["status"]] += 1
            result.rescored += 1
    for name in changed:
        for record in runs[name]:
            if record.attribution is not None and any(entry is None for entry in record.attribution):
                record.attribution = None  # not re-scored (the scorer could not load): no claim
        _write_answers(answer_files(out / ANSWERS).get(name, out / ANSWERS / f"{name}.jsonl"), runs[name])
    return result


def manifest_questions(out: Path, manifest: dict) -> list[Question]:
    """The run's questions, from the file its manifest names (or its ``--bench``), checked against the hash
    the manifest recorded: a prompt rebuilt from other questions would re-score another text."""
    data = manifest.get("data") or {}
    path = Path(data["path"]) if data.get("path") else None
    if path is None or not path.is_file():
        bench = (manifest.get("config") or {}).get("bench")
        if not bench:
            raise SpecbenchError(f"{out}: the manifest names no question file; cannot rebuild the prompts")
        path = resolve_bench(bench)
    if data.get("sha256") and file_sha256(path) != data["sha256"]:
        raise SpecbenchError(f"{path} differs from the question file {out} ran on (sha256 {data['sha256'][:12]}...); "
                             f"point SPECBENCH_DATA at the run's data")
    return load_questions(path)


def fp32_target(target: TargetModel, spec: str | None = None, device: str | None = None,
                device_map: str | None = None) -> TargetModel:
    """The fp32 copy the re-score runs on: ``target`` itself when it is fp32; else the same model loaded
    again in fp32 from ``spec`` (its original weights); else, for an in-memory model, a copy of it upcast to
    fp32 (the run's rounded weights, computed in fp32)."""
    if target.dtype == torch.float32:
        return target
    if spec is not None and target.source is not None:
        return load_target(spec, device or str(target.device), "float32", device_map)
    return TargetModel(copy.deepcopy(target.model).to(torch.float32), target.tokenizer, target.source)
