"""Greedy trajectories of a question set, recorded once and kept under ``$SPECBENCH_CACHE``.

A trajectory (`Trajectory`: a prompt's greedy continuation and the target's hidden states along it)
depends on the model, where and in what dtype it runs, the
chat template, the token cap and the questions, so the cache key holds all of these (the questions by
their content: `--limit` and `--categories` are part of it, a file's path is not). Both users of
trajectories go through here: `--tree-budget auto`'s calibration set and `specbench replay`.
`cached_json` keeps what is computed from them (`auto`'s replayed curves and loop timing) under keys of
the same kind. A second replay of the same questions, with other drafters, budgets or options, then
costs the drafters alone: recording is the one step that runs the target (about 4 minutes for MT-bench
limit 2 on the 2-core CPU).

Files are a flat list, question by question and turn by turn, of ``{prompt, continuation, hidden}``
(hidden states in float32 on the CPU, read back in the target's dtype: replay must hand a drafter exactly
the states a run would).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from specbench.drafters.vanilla import VanillaDrafter
from specbench.harness.loop import generate
from specbench.progress import phase
from specbench.questions import Question


@dataclass
class Trajectory:
    """One prompt's greedy continuation and the target's hidden states along it.

    prompt:       LongTensor[P]
    continuation: LongTensor[N] greedy tokens, the root (first new token) first; ends at EOS or the cap
    hidden:       Tensor[P + N, H] last-layer hidden states (after the final norm) at every position
    taps:         {layer id: Tensor[P + N, H]} the states entering decoder layers along it, for drafters that read
                  the target's layer taps (eagle3): computed by replay on first use, in one forward, kept in memory
    """

    prompt: torch.Tensor
    continuation: torch.Tensor
    hidden: torch.Tensor
    taps: dict[int, torch.Tensor] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ids(self) -> torch.Tensor:
        return torch.cat([self.prompt, self.continuation])


@torch.inference_mode()
def record_trajectory(target, prompt_ids: list[int], max_new_tokens: int) -> Trajectory:
    """Plain greedy decoding of ``prompt_ids`` through the loop (vanilla drafter), then one forward over
    prompt + continuation for the hidden states."""
    result = generate(target, VanillaDrafter(), prompt_ids, max_new_tokens, 1)
    ids = torch.tensor(prompt_ids + result.output_ids, dtype=torch.long)
    hidden = target.decoder(input_ids=ids[None].to(target.device)).last_hidden_state[0]  # [P + N, H]
    return Trajectory(ids[: len(prompt_ids)], ids[len(prompt_ids):], hidden)


def question_trajectories(target, prompts, question, max_new_tokens: int, bar=None) -> list[Trajectory]:
    """One trajectory per turn, each turn prompted with the greedy answers before it (as a run does);
    each turn counts one unit of ``bar`` (a `specbench.progress.Phase`) if given."""
    answers: list[str] = []
    trajectories = []
    for turn in range(len(question.turns)):
        trajectory = record_trajectory(target, prompts.build(question.turns[: turn + 1], answers), max_new_tokens)
        trajectories.append(trajectory)
        answers.append(prompts.answer_text(trajectory.continuation.tolist()))
        if bar is not None:
            bar.update(1)
    return trajectories




def trajectory_key(target, questions: list[Question], max_new_tokens: int, template: str | None) -> dict:
    """What the trajectories of ``questions`` depend on."""
    return {"model": target.name, "model_sha256": target.handle.sha256 or target.handle.fingerprint,
            "device": target.device.type, "dtype": str(target.dtype).removeprefix("torch."), "template": template,
            "max_new_tokens": max_new_tokens, "turns": "all", "questions": questions_digest(questions)}


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cached_json(path: Path, key: dict, compute, parse=lambda value: value):
    """``parse`` of the ``value`` stored in ``path`` (a JSON file ``{"key": key, "value": ...}``), else of
    ``compute()``, written there first. ``path`` is named by the key's digest, so a changed key is a new file. A
    stored file that cannot be read or parsed (cut short, or written by another version of specbench under the
    same key) is computed again and replaced, with a one-line note on stderr: a cache never stops a run."""
    if path.exists():
        try:
            return parse(json.loads(path.read_text(encoding="utf-8"))["value"])
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            print(f"specbench: cache file {path} is unreadable ({type(error).__name__}: {error}); computing it again",
                  file=sys.stderr)
    value = compute()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps({"key": key, "value": value}, indent=1, default=str) + "\n", encoding="utf-8")
    partial.replace(path)  # atomic: an interrupted write leaves no file under the key's name
    return parse(value)


def holding(*keys: str):
    """A `cached_json` parse for a dict value that must hold ``keys``: a file without them is stale (KeyError, so
    it is computed again)."""
    def parse(value: dict) -> dict:
        missing = [key for key in keys if key not in value]
        if missing:
            raise KeyError(f"no {', '.join(missing)}")
        return value
    return parse


def questions_digest(questions: list[Question]) -> str:
    """A hash of the questions' ids, categories and turns, in order (what their trajectories depend on)."""
    lines = [json.dumps([str(q.question_id), q.category, list(q.turns)], ensure_ascii=False) for q in questions]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def cached_trajectories(target, prompts, questions: list[Question], max_new_tokens: int, template: str | None,
                        directory: Path) -> tuple[list[list[Trajectory]], dict, Path]:
    """(one list of per-turn trajectories per question, the cache key, the file): read from ``directory``
    or recorded and written there (atomically, so an interrupted recording leaves no file). ``prompts`` is
    the run's `PromptBuilder`, built with ``template``."""
    key = trajectory_key(target, questions, max_new_tokens, template)
    path = directory / f"trajectories-{target.name}-{key_digest(key)}.pt"
    if path.exists():
        stored = iter(torch.load(path, weights_only=True))  # flat, question by question and turn by turn
        return [[Trajectory(t["prompt"], t["continuation"], t["hidden"].to(target.device, target.dtype))
                 for t in itertools.islice(stored, len(q.turns))]  # float32 on disk holds bf16 exactly
                for q in questions], key, path
    with phase("greedy pass", sum(len(q.turns) for q in questions), "turn") as bar:
        recorded = [question_trajectories(target, prompts, question, max_new_tokens, bar) for question in questions]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save([{"prompt": t.prompt, "continuation": t.continuation, "hidden": t.hidden.float().cpu()}
                for turns in recorded for t in turns], tmp)
    tmp.replace(path)
    return recorded, key, path


def replay_trajectories(target, prompts, questions: list[Question], max_new_tokens: int, template: str | None,
                        root: Path) -> tuple[list[list[Trajectory]], Path]:
    """`specbench replay`'s trajectories of ``questions`` (and their file), cached under ``root/trajectories/``."""
    recorded, _, path = cached_trajectories(target, prompts, questions, max_new_tokens, template, root / "trajectories")
    return recorded, path
