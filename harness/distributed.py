"""Sharded runs on torchrun: which questions a rank owns, its device, and the few collectives a run needs.

`torchrun --nproc-per-node N -m specbench run ...` starts N copies of the same command; torchrun sets
``WORLD_SIZE``, ``RANK`` and ``LOCAL_RANK``. Each rank opens a process group (gloo on CPU, nccl on CUDA),
owns the questions at positions rank, rank + N, ... of the run's question list (deterministic, so a
crashed rank's questions go to the same rank on ``--resume``), runs every drafter on them interleaved as a
single process does, and appends to its own answer files under ``ranks/rank-R/answers/``. Rank 0 chooses
the tree budgets and broadcasts them (every rank must run the same budgets), writes the manifest with every
rank's host and device, and, after all ranks finish, merges the rank files into ``answers/<drafter>.jsonl``
in question order. Without torchrun (or with one rank) nothing here is used.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, TypeVar

import torch

T = TypeVar("T")
RANKS = "ranks"  # folder of the per-rank answer files, inside the run directory


@dataclass(frozen=True)
class Shard:
    """This process's place among torchrun's ranks."""

    rank: int
    world_size: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def owns(self, items: Sequence[T]) -> list[T]:
        """The items at positions rank, rank + world_size, ... (questions in the run's order)."""
        return list(items[self.rank :: self.world_size])

    def folder(self, out: Path) -> Path:
        return Path(out) / RANKS / f"rank-{self.rank}"

    def device(self, device: str) -> str:
        """``cuda`` becomes this rank's GPU (``cuda:LOCAL_RANK``); ``cpu`` and an explicit ``cuda:N`` stay."""
        return f"cuda:{self.local_rank}" if device == "cuda" else device


def current_shard() -> Shard | None:
    """The shard torchrun's environment describes, or None for a single process (no torchrun, or one rank)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1:
        return None
    return Shard(int(os.environ["RANK"]), world_size, int(os.environ.get("LOCAL_RANK", "0")))


def start(shard: Shard, device: str) -> None:
    """Join the process group: nccl for CUDA ranks, gloo on CPU."""
    import torch.distributed as dist

    if not dist.is_initialized():
        if device.startswith("cuda"):
            torch.cuda.set_device(torch.device(device))
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo")


def stop() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    import torch.distributed as dist

    dist.barrier()


def broadcast(value: T) -> T:
    """Rank 0's ``value`` on every rank (any picklable object)."""
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gather(value: T, world_size: int) -> list[T]:
    """Every rank's ``value``, in rank order, on every rank."""
    import torch.distributed as dist

    values: list = [None] * world_size
    dist.all_gather_object(values, value)
    return values


def rank_record(shard: Shard, device: str) -> dict:
    """How the manifest describes one rank."""
    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else None
    return {"rank": shard.rank, "local_rank": shard.local_rank, "host": socket.gethostname(), "pid": os.getpid(),
            "device": device, "device_name": name}


def answer_files(out: Path, drafter: str) -> list[Path]:
    """Every file that may hold ``drafter``'s records in a run directory: the merged one, then each rank's."""
    from specbench.results import answers_path

    ranks = sorted((Path(out) / RANKS).glob("rank-*"), key=lambda folder: int(folder.name.split("-")[1]))
    return [path for path in [answers_path(out, drafter), *(answers_path(r, drafter) for r in ranks)] if path.exists()]


def merge_answers(out: Path, drafter: str, question_order: Sequence[object]) -> int:
    """Write ``answers/<drafter>.jsonl`` from the merged file and every rank's file: one record per question
    (the first found), the run's questions in order, then any others; written whole, then renamed.
    Returns the number of records."""
    import json

    from specbench.results import answers_path, read_answers

    records = {}
    for path in answer_files(out, drafter):
        for record in read_answers(path, drop_partial_tail=True, keep_file=True):
            records.setdefault(record.question_id, record)
    position = {question: i for i, question in enumerate(question_order)}
    ordered = sorted(records.values(), key=lambda r: (position.get(r.question_id, len(position)), str(r.question_id)))
    path = answers_path(out, drafter)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r.to_json(), separators=(",", ":")) + "\n" for r in ordered), encoding="utf-8")
    tmp.replace(path)
    return len(ordered)
