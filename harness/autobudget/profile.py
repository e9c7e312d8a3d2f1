"""Verify-cost profiles: what one verification forward costs, by tree size, on one machine.

A speedup is tau times the ratio of a 1-node step's cost to a b-node step's cost, so the tree budget a
drafter should run at depends on the hardware: on a 2-core CPU a 16-node verify costs ~2x a 1-node step,
on a GPU ~64 nodes cost what one does. A profile records t_verify(n) for a grid of tree sizes and two
shapes (a chain, as ngram and CTC beams draft, and a bushy tree, as Medusa/Hydra static trees do),
each the median of repeats against a fixed cached prefix.

A profile is keyed by everything that changes the numbers (model hash, device name, dtype, torch threads,
torch version, linear and attention kernels, regime: eager or compiled, `TargetModel.use_regime`), cached under
``$SPECBENCH_CACHE/profiles/`` and written into each run's manifest. It is a
small JSON file, so one measured elsewhere can be passed with ``--profile FILE`` to predict speedups on
hardware the reader does not have.

**The batch axis.** At batch size B > 1 a verification forward scores B trees at once (`TargetModel.forward_trees`,
every tree padded to the bucket of the largest, `specbench.static_cache.BUCKETS`). A profile at B times B rows of a
``prefix``-token batch cache, each row scoring the same tree, at the bucket sizes; its key holds ``batch``, so it is
cached beside the batch-1 profile, and `VerifyProfile.cost_ms` reads a batch profile at the bucket a tree pads to.
"""

from __future__ import annotations

import bisect
import json
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from specbench import kv
from specbench.errors import SpecbenchError
from specbench.model_source import cache_root
from specbench.placement import placement_summary
from specbench.progress import phase
from specbench.static_cache import BUCKETS, bucket_of
from specbench.timing import wall_clock
from specbench.tree import DraftTree

PROFILE_FORMAT = 1
DEFAULT_SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
#: Tree shapes: "chain" = root then n - 1 nodes in one line (ngram, CTC beams); "bushy" = breadth-first
#: complete tree with `BUSHY_FANOUT` children per node (static Medusa/Hydra-like trees: wide and shallow).
TREE_SHAPES = ("chain", "bushy")
BUSHY_FANOUT = 4
#: a batch profile's sizes: the buckets every batched forward pads its trees to
BATCH_SIZES = BUCKETS
ROOT_TOKEN = 5  # the synthetic trees' root; the other nodes are ids 10, 11, ... (the cost ignores ids)
#: A forward over n > 1 nodes does the one-node forward's work and more (the weight-left kernel pads one row to
#: two, `specbench.linear`), so a size whose median lands this far below one node's is a timing artefact; one
#: such cell (2 nodes at 0.84x one node, a start-of-machine sitting) priced every budget-2 tree below a plain
#: step and put six drafters of a main job 14-21% under their predictions (docs/decisions.md, "A profile that
#: times a tree below one node").
IMPLAUSIBLE_BELOW_ONE_NODE = 0.9
#: how many more sets of ``repeats`` rounds a profile times (and pools) while a size stays implausible
EXTRA_ROUND_SETS = 2


def tree_of_size(n: int, shape: str = "chain", root: int = ROOT_TOKEN) -> DraftTree:
    """A verification tree of ``n`` nodes (root included) in ``shape`` (see `TREE_SHAPES`)."""
    if n < 1:
        raise ValueError("a tree has at least its root")
    drafts = list(range(10, 9 + n))
    if shape == "chain":
        return DraftTree.chain(root, drafts)
    if shape == "bushy":
        parents = [-1] + [(i - 1) // BUSHY_FANOUT for i in range(1, n)]  # node i's parent precedes it
        return DraftTree(torch.tensor([root, *drafts], dtype=torch.long), torch.tensor(parents, dtype=torch.long))
    raise ValueError(f"unknown tree shape {shape!r}; choose one of {', '.join(TREE_SHAPES)}")


def synthetic_prefix(length: int) -> torch.Tensor:
    """Token ids LongTensor[length] (100, 101, ...): a prefix whose content does not matter, only its length
    (a dense forward costs the same for any ids)."""
    return torch.arange(100, 100 + length, dtype=torch.long)


def prefilled_cache(target, prefix: torch.Tensor):
    """A fresh KV cache holding ``prefix`` (LongTensor[L]): L positions, as after the loop's prefill."""
    cache = target.new_cache()
    target.prefill(prefix, cache)
    return cache


def rewind(cache, past: int) -> None:
    """Drop every slot after the first ``past`` from ``cache`` (what a verification step appended), so the
    next forward sees the same prefix. `kv.commit_path` with an empty path keeps none of the tree's slots."""
    extra = kv.cached_length(cache) - past
    if extra < 0:
        raise ValueError(f"cache holds {kv.cached_length(cache)} positions, fewer than {past}")
    if extra:
        kv.commit_path(cache, past, [], extra)


@dataclass
class VerifyProfile:
    """t_verify(n) in milliseconds per tree shape, for the machine and model in ``key``."""

    key: dict  # model, model_sha256, device, device_name, dtype, threads, torch
    sizes: list[int]
    ms: dict[str, list[float]]  # shape -> median ms per size, aligned with ``sizes``
    prefix: int = 300
    repeats: int = 7
    measured: str = ""
    host: str = field(default_factory=platform.node)
    format: int = PROFILE_FORMAT
    batch: int = 1  # rows scored per forward (the module docstring's batch axis)

    def cost_ms(self, n: int, shape: str | None = None) -> float:
        """t_verify(n): linear between measured sizes, the mean over shapes unless one is named; beyond
        the grid the last segment's slope is kept. At batch > 1, the cost of the bucket ``n`` pads to."""
        if n < 1:
            raise ValueError("a tree has at least its root")
        if self.batch > 1 and n <= BUCKETS[-1]:
            n = bucket_of(n)
        rows = [self.ms[shape]] if shape else list(self.ms.values())
        values = [statistics.fmean(column) for column in zip(*rows)]
        if len(self.sizes) == 1:
            return values[0]
        i = min(max(bisect.bisect_left(self.sizes, n), 1), len(self.sizes) - 1)  # the segment [i - 1, i]
        a, b = self.sizes[i - 1], self.sizes[i]
        return values[i - 1] + (values[i] - values[i - 1]) * (n - a) / (b - a)

    def relative(self, n: int, shape: str | None = None) -> float:
        """t_verify(n) / t_verify(1)."""
        return self.cost_ms(n, shape) / self.cost_ms(1, shape)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object, source: str) -> "VerifyProfile":
        """Check a profile read from ``source``; a bad one is a one-line `SpecbenchError`."""
        def bad(why: str) -> SpecbenchError:
            return SpecbenchError(f"{source} is not a verify-cost profile: {why}")

        if not isinstance(data, dict):
            raise bad("expected a JSON object")
        if data.get("format") != PROFILE_FORMAT:
            raise bad(f"format {data.get('format')!r}, expected {PROFILE_FORMAT}")
        sizes, ms, key = data.get("sizes"), data.get("ms"), data.get("key")
        if not isinstance(key, dict):
            raise bad("no 'key' object")
        if not isinstance(sizes, list) or not sizes or not all(isinstance(n, int) and n >= 1 for n in sizes):
            raise bad("'sizes' must be a non-empty list of tree sizes >= 1")
        if sizes != sorted(set(sizes)):
            raise bad("'sizes' must be increasing")
        if not isinstance(ms, dict) or not ms:
            raise bad("'ms' must map tree shapes to times")
        for shape, values in ms.items():
            if not isinstance(values, list) or len(values) != len(sizes):
                raise bad(f"'ms.{shape}' must hold one time per size ({len(sizes)})")
            if not all(isinstance(v, (int, float)) and v > 0 for v in values):
                raise bad(f"'ms.{shape}' must hold positive milliseconds")
        if not isinstance(data.get("batch", 1), int) or data.get("batch", 1) < 1:
            raise bad("'batch' must be a batch size >= 1")
        fields = {name: data[name] for name in ("prefix", "repeats", "measured", "host", "batch") if name in data}
        return cls(key=key, sizes=sizes, ms={s: [float(v) for v in vs] for s, vs in ms.items()}, **fields)

    def table(self) -> str:
        """Markdown table: ms per shape and the ratio to one node."""
        shapes = list(self.ms)
        lines = ["| nodes | " + " | ".join(f"{s} ms | {s} x1" for s in shapes) + " |",
                 "| ---: | " + " | ".join("---: | ---:" for _ in shapes) + " |"]
        for i, n in enumerate(self.sizes):
            cells = " | ".join(f"{self.ms[s][i]:.2f} | {self.ms[s][i] / self.ms[s][0]:.2f}" for s in shapes)
            lines.append(f"| {n} | {cells} |")
        return "\n".join(lines)


def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def batch_width(target, batch: int) -> dict:
    """``{"width": "active"}`` for an eager batch (B > 1) step, which attends over its rows' active width
    (`specbench.batch_cache.BatchTreeCache.set_width`), else nothing: in a cache key, so that timings made when
    every step attended over the whole capacity are never reused."""
    return {"width": "active"} if batch > 1 and getattr(target, "regime", "eager") == "eager" else {}


def profile_key(target, threads: int | None = None, batch: int = 1) -> dict:
    """What a profile's numbers depend on (``batch`` named only above 1, so batch-1 keys stay as they were; an
    eager batch profile also names its attention width, `specbench.batch_cache.BatchTreeCache.set_width`, so one
    measured over the whole capacity is never read as one over the active width)."""
    device = target.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    spread = len(placement_summary(target))  # devices holding parameters: > 1 under --device-map
    return {"model": target.name, "model_sha256": target.handle.sha256 or target.handle.fingerprint,
            "device": device.type if spread == 1 else f"{device.type}x{spread}", "device_name": name,
            "dtype": str(target.dtype).removeprefix("torch."),
            "threads": threads or torch.get_num_threads(), "torch": torch.__version__,
            "linear": getattr(target, "linear_kernel", "torch"), "regime": getattr(target, "regime", "eager")
            } | attention_key(target) | backend_key(target) | ({"batch": batch} | batch_width(target, batch) if batch > 1 else {})


def attention_key(target) -> dict:
    """The attention kernel where it is not transformers' own (`specbench.attention`; profiles timed before the
    grouped kernel keep their names and keys, and are never read for a target that runs it)."""
    kernel = getattr(target, "attention_kernel", "repeat")
    return {"attention": kernel} if kernel != "repeat" else {}


def backend_key(target) -> dict:
    """The compiled regime's backend where it is not inductor (inductor profiles keep their names)."""
    backend = getattr(target, "backend", "inductor")
    return {"backend": backend} if getattr(target, "regime", "eager") == "compiled" and backend != "inductor" else {}


def cache_path(key: dict, root: Path) -> Path:
    """``<root>/profiles/<model>-<sha12>-<device>-<dtype>-t<threads>-torch<version>[-<linear kernel>][-<attention>]``
    ``[-<regime>][-<backend>][-b<batch>].json`` (the kernel named unless it is torch's own, `specbench.linear`; the
    attention kernel unless it is transformers', `specbench.attention`; the regime
    unless it is eager, the backend unless it is inductor, the batch size unless it is 1, so eager batch-1
    profiles keep their names; ``-active``: an eager batch profile's width)."""
    safe = "".join(c if c.isalnum() or c in ".-" else "_" for c in
                   f"{key['model']}-{str(key['model_sha256'])[:12]}-{key['device']}-{key['dtype']}-t{key['threads']}"
                   f"-torch{key['torch']}" + (f"-{key['linear']}" if key.get("linear", "torch") != "torch" else "")
                   + (f"-{key['attention']}" if key.get("attention", "repeat") != "repeat" else "")
                   + (f"-{key['regime']}" if key.get("regime", "eager") != "eager" else "")
                   + (f"-{key['backend']}" if "backend" in key else "")
                   + (f"-b{key['batch']}" if key.get("batch", 1) > 1 else "")
                   + (f"-{key['width']}" if "width" in key else ""))
    return root / "profiles" / f"{safe}.json"


@torch.inference_mode()
def measure_profile(target, sizes=None, shapes=TREE_SHAPES, prefix: int = 300, repeats: int = 7,
                    warmup: int = 2, batch: int = 1) -> VerifyProfile:
    """Time one verification forward per (shape, size): median of ``repeats`` after ``warmup`` untimed
    ones, each against the same ``prefix``-token cache (the tree's slots are dropped after each). ``sizes``
    defaults to `DEFAULT_SIZES` (`BATCH_SIZES` at ``batch`` > 1, where B rows score the tree in one forward).

    The sizes are timed in rounds (every shape and size once per round, the order rotating) rather than
    one size after another, so slow drift of the machine (clock, cache, a neighbour's load) lands on all
    sizes alike instead of on whichever size was being timed: the ratios to one node are what predictions
    use.

    While some size's median is more than `IMPLAUSIBLE_BELOW_ONE_NODE` below one node's, up to
    `EXTRA_ROUND_SETS` more sets of ``repeats`` rounds are timed and pooled with the first (the profile's
    ``repeats`` then counts every timed round): a transient slow or fast stretch is outvoted, and a kernel
    that really is cheaper at more rows keeps its measured shape."""
    sizes = sizes or (DEFAULT_SIZES if batch == 1 else BATCH_SIZES)
    if repeats < 1 or prefix < 1 or not sizes or batch < 1:
        raise SpecbenchError("a profile needs at least one size, one repeat, a prefix of one token and one row")
    forward = _batch_forward(target, batch, prefix, max(sizes)) if batch > 1 else single_forward(target, prefix)
    cells = [(shape, n, tree_of_size(n, shape)) for shape in shapes for n in sizes]
    # Samples are keyed by the tree's structure, not its shape's name: 1 and 2 nodes are one forward in every
    # shape, so their samples pool and the shapes share one denominator (unpooled, a noisy 2026-11-26 CPU
    # profile had the 1-node chain at 43 ms and the 1-node bushy tree at 34 ms, moving every chain ratio).
    structure = {(shape, n): tuple(tree.parents.tolist()) for shape, n, tree in cells}
    times: dict[tuple[int, ...], list[float]] = {key: [] for key in structure.values()}
    name = "verify-cost profile" + (f" (batch {batch})" if batch > 1 else "")

    def timed_rounds(first: int, count: int, label: str) -> None:
        """Rounds ``first`` .. ``first + count - 1``; the first ``warmup`` rounds of the profile go untimed."""
        with phase(label, count * len(cells), "forward") as bar:
            for round_number in range(first, first + count):
                shift = round_number % len(cells)
                for shape, n, tree in cells[shift:] + cells[:shift]:
                    elapsed = forward(tree)
                    if round_number >= warmup:
                        times[structure[shape, n]].append(elapsed)
                    bar.update(1)  # after the clock stopped

    def medians() -> dict[str, list[float]]:
        return {shape: [statistics.median(times[structure[shape, n]]) for n in sizes] for shape in shapes}

    timed_rounds(0, warmup + repeats, name)
    ms, timed = medians(), repeats
    for _ in range(EXTRA_ROUND_SETS):
        if not below_one_node(ms):
            break
        timed_rounds(warmup + timed, repeats, f"{name}, again: a tree timed below one node")
        ms, timed = medians(), timed + repeats
    return VerifyProfile(key=profile_key(target, batch=batch), sizes=list(sizes), ms=ms, prefix=prefix,
                         repeats=timed, measured=time.strftime("%Y-%m-%dT%H:%M:%S%z"), batch=batch)


def below_one_node(ms: dict[str, list[float]]) -> list[tuple[str, int]]:
    """(shape, index) of every size after the first whose median is under `IMPLAUSIBLE_BELOW_ONE_NODE` of the
    first size's (one node, where the grid starts at 1)."""
    return [(shape, i) for shape, row in ms.items() for i, value in enumerate(row[1:], start=1)
            if value < IMPLAUSIBLE_BELOW_ONE_NODE * row[0]]


def single_forward(target, prefix: int):
    """ms of one `TargetModel.forward_tree` against a ``prefix``-token cache, the tree's slots dropped after."""
    cache = prefilled_cache(target, synthetic_prefix(prefix) % target.lm_head.weight.shape[0])

    def forward(tree: DraftTree) -> float:
        start = wall_clock(target.device)
        target.forward_tree(tree, cache)
        elapsed = (wall_clock(target.device) - start) * 1000
        rewind(cache, prefix)
        return elapsed

    return forward


def _batch_forward(target, batch: int, prefix: int, largest: int):
    """ms of one `TargetModel.forward_trees` of ``batch`` rows, each a ``prefix``-token sequence scoring the
    tree (a forward writes the rows' scratch tails and commits nothing, so every forward sees the same prefix)."""
    cache = target.new_batch_cache(batch, prefix + bucket_of(largest))
    ids = synthetic_prefix(prefix) % target.lm_head.weight.shape[0]
    for row in range(batch):
        target.prefill_row(ids, cache, row)  # the loop's own row prefill

    def forward(tree: DraftTree) -> float:
        start = wall_clock(target.device)
        target.forward_trees([tree] * batch, cache)
        return (wall_clock(target.device) - start) * 1000

    return forward


def load_profile(path: Path) -> VerifyProfile:
    """Read a profile file; any problem is a one-line `SpecbenchError` naming the file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecbenchError(f"cannot read profile {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SpecbenchError(f"{path} is not a verify-cost profile: not JSON ({exc.msg}, line {exc.lineno})") from None
    return VerifyProfile.from_json(data, str(path))


def save_profile(profile: VerifyProfile, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(profile.to_json(), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return path


def measure_and_cache(target, root: Path, **options) -> tuple[VerifyProfile, Path]:
    """`measure_profile` (``options`` passed on) saved where `cached_profile` finds it; (profile, path)."""
    profile = measure_profile(target, **options)
    return profile, save_profile(profile, cache_path(profile_key(target, batch=profile.batch), root))


def cached_profile(target, root: Path, batch: int = 1) -> VerifyProfile | None:
    """The cached profile for this target, device, dtype, threads, torch version and batch size, if one was
    measured."""
    path = cache_path(profile_key(target, batch=batch), root)
    return load_profile(path) if path.exists() else None


def batch_profile(target, batch: int, root: Path) -> tuple[VerifyProfile, str]:
    """(the profile at batch size ``batch`` > 1, where it came from): cached, else measured now and cached."""
    profile = cached_profile(target, root, batch)
    if profile is not None:
        return profile, str(cache_path(profile_key(target, batch=batch), root))
    profile, path = measure_and_cache(target, root, batch=batch)
    return profile, str(path)


def implausible_note(profile: VerifyProfile, source: str) -> str | None:
    """A one-line warning when a profile that was read (cached, or given with ``--profile``) times some tree
    below one node (`below_one_node`), else None. `measure_profile` times such a cell again before it saves,
    but a profile measured before that check, or on another machine, is read as it is: its cheap cell prices
    every tree of that size below a plain step (docs/decisions.md, "A profile that times a tree below one
    node")."""
    cells = below_one_node(profile.ms)
    if not cells:
        return None
    worst = min(cells, key=lambda cell: profile.ms[cell[0]][cell[1]] / profile.ms[cell[0]][0])
    shape, i = worst
    ratio = profile.ms[shape][i] / profile.ms[shape][0]
    sizes = sorted({profile.sizes[i] for _, i in cells})
    return (f"specbench: warning: profile {source} times {'/'.join(map(str, sizes))}-node trees below one node "
            f"({profile.sizes[i]} nodes {shape} at {ratio:.2f}x, under {IMPLAUSIBLE_BELOW_ONE_NODE}x: a timing "
            f"artefact), so predictions at those sizes are optimistic; `specbench profile --force` measures again")


_WARNED: set[str] = set()  # sources already warned about in this process (a run reads its profile twice)


def resolve_profile(profile_file: str | None, target):
    """(the verify-cost profile a run or replay uses, where it came from): ``profile_file`` when given
    (``--profile``), else the one `specbench profile` cached for this model, device, dtype, threads and torch
    version, else (None, None). A read profile with a tree timed below one node is used, with one warning
    (`implausible_note`) per source and process."""
    if profile_file:
        profile, source, where = load_profile(Path(profile_file)), profile_file, profile_file
    else:
        profile = cached_profile(target, cache_root())
        source, where = ("cache" if profile is not None else None), str(cache_path(profile_key(target), cache_root()))
    note = implausible_note(profile, where) if profile is not None else None
    if note and where not in _WARNED:
        _WARNED.add(where)
        print(note, file=sys.stderr)
    return profile, source
