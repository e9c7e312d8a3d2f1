"""Greedy trajectories of a question set, recorded once and kept under ``$SPECBENCH_CACHE``.

A trajectory (`specbench.replay.Trajectory`) depends on the model, where and in what dtype it runs, the
chat template, the token cap and the questions, so the cache key holds all of these. Both users of
trajectories go through here: `--tree-budget auto`'s calibration set (keyed by its file's hash) and
`specbench replay` (keyed by the selected questions' content, so `--limit` and `--categories` are part
of it). A second replay of the same questions, with other drafters, budgets or options, then costs the
drafters alone: recording is the one step that runs the target (about 4 minutes for MT-bench limit 2 on
the 2-core CPU).

Files are a flat list, question by question and turn by turn, of ``{prompt, continuation, hidden}``
(hidden states in float32 on the CPU, read back in the target's dtype: replay must hand a drafter exactly
the states a run would).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from specbench.questions import Question
from specbench.replay import Trajectory, question_trajectories


def trajectory_key(target, max_new_tokens: int, template: str | None, **source: str) -> dict:
    """What a set of trajectories depends on; ``source`` names the questions (a file hash, a content hash)."""
    return {"model": target.name, "model_sha256": target.handle.sha256 or target.handle.fingerprint,
            "device": target.device.type, "dtype": str(target.dtype).removeprefix("torch."), "template": template,
            "max_new_tokens": max_new_tokens, "turns": "all", **source}


def key_digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:16]


def questions_digest(questions: list[Question]) -> str:
    """A hash of the questions' ids, categories and turns, in order (what their trajectories depend on)."""
    lines = [json.dumps([str(q.question_id), q.category, list(q.turns)], ensure_ascii=False) for q in questions]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def cached_trajectories(target, prompts, questions: list[Question], max_new_tokens: int, key: dict,
                        path: Path) -> list[list[Trajectory]]:
    """One list of per-turn trajectories per question, read from ``path`` or recorded and written there
    (atomically, so an interrupted recording leaves no file). ``prompts`` is the run's `PromptBuilder`."""
    if path.exists():
        stored = torch.load(path, weights_only=True)
        flat = [Trajectory(t["prompt"], t["continuation"], t["hidden"].to(target.device, target.dtype))
                for t in stored]  # float32 on disk holds bf16/fp16 states exactly: back to what a run sees
        if len(flat) == sum(len(q.turns) for q in questions):
            turns = iter(flat)
            return [[next(turns) for _ in q.turns] for q in questions]
    recorded = [question_trajectories(target, prompts, question, max_new_tokens) for question in questions]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save([{"prompt": t.prompt, "continuation": t.continuation, "hidden": t.hidden.float().cpu()}
                for turns in recorded for t in turns], tmp)
    tmp.replace(path)
    return recorded


def replay_trajectories(target, prompts, questions: list[Question], max_new_tokens: int, template: str | None,
                        root: Path) -> tuple[list[list[Trajectory]], Path]:
    """`specbench replay`'s trajectories of ``questions``, cached under ``root/trajectories/``."""
    key = trajectory_key(target, max_new_tokens, template, questions=questions_digest(questions))
    path = root / "trajectories" / f"{target.name}-{key_digest(key)}.pt"
    return cached_trajectories(target, prompts, questions, max_new_tokens, key, path), path
