"""The decode loop. It exists once: every drafter, vanilla included, runs through `generate`.

prefill -> root; then repeat: drafter.propose -> DraftTree; target.forward_tree (verify);
the acceptance rule + KV commit + drafter.accept (accept); emit accepted tokens + bonus; until EOS or
``max_new_tokens``. The rule (`specbench.verify.make_rule`) is greedy at temperature 0 and otherwise
samples from one seeded CPU generator per sequence, so a sampled turn is reproduced from its seed.
Tokens are counted from ids, the same way for every drafter: up to and including EOS, capped at
``max_new_tokens``; the root chosen at prefill is the first new token.

Batches (docs/decisions.md, "Batching"): `generate_batch` decodes up to ``batch_size`` sequences together, each
a *row* with its own drafter (`specbench.drafter.row_copy`), acceptance stream, EOS and ``max_new_tokens``; a
finished row is refilled with the next job. `generate` is `generate_batch` over one job at batch size 1: the
loop below is the only one. It reaches the target through `SingleRows` (batch 1: the target's own cache,
dynamic or static) or `BatchRows` (`specbench.batch_cache.BatchTreeCache`, every row's tree in one forward).

The regime (`TargetModel.use_regime`) picks the target's verify forward and cache, not the loop: in the
compiled regime the cache is static (room reserved for the turn), the tree step also computes the greedy
choice on the device, and `verify_step` reads it back instead of walking the tree.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field

import torch

from specbench import kv, static_cache
from specbench.drafter import DraftContext, Drafter, propose_together, row_copy
from specbench.model import TargetModel
from specbench.results import Step
from specbench.sampling import Sampling
from specbench.timing import StageTimer, wall_clock
from specbench.tree import DraftTree
from specbench.verify import AcceptanceRule, make_rule, verify_step


@dataclass
class TurnResult:
    """Everything one generated sequence (one turn of one question) records."""

    output_ids: list[int]
    steps: list[Step]
    wall_s: float
    prefill_ms: float | None = None
    stopped_at_eos: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def new_tokens(self) -> int:
        return len(self.output_ids)

    @property
    def accept_lengths(self) -> list[int]:
        return [step.accepted for step in self.steps]


@dataclass
class Job:
    """One sequence to generate: its prompt, length cap and sampling seed; ``key`` is the caller's tag."""

    prompt_ids: list[int]
    max_new_tokens: int
    seed: int | None = None
    key: object = None


class SingleRows:
    """Batch size 1: the target's own cache (`TargetModel.new_cache`: dynamic in the eager regime, the
    static `TreeStaticCache` compiled), reached through `specbench.kv` exactly as one sequence always was."""

    size = 1

    def __init__(self, target: TargetModel, budget: int) -> None:
        self.target, self.budget, self.cache = target, budget, None

    def start(self, row: int, prompt: torch.Tensor, max_new_tokens: int):
        """A new sequence in ``row``: a fresh cache and its prefill -> (logits [V], hidden [L, H])."""
        self.cache = self.target.new_cache()
        kv.reserve(self.cache, len(prompt) + max_new_tokens, self.budget)  # a static cache's storage for the turn
        return self.target.prefill(prompt, self.cache)

    def verify(self, trees: list[DraftTree | None]) -> list[tuple | None]:
        """Per row (logits [n, V], hidden [n, H], device selection or None), None for an idle row."""
        logits, hidden = self.target.forward_tree(trees[0], self.cache)
        return [(logits, hidden, kv.selection(self.cache))]

    def commit(self, pasts: list[int], paths: list[list[int] | None], sizes: list[int]) -> None:
        kv.commit_path(self.cache, pasts[0], paths[0], sizes[0])


class BatchRows:
    """Batch size B > 1: one `BatchTreeCache`; every active row's tree scored in one forward (padded to the
    bucket of the largest), every row's path committed in one move."""

    def __init__(self, target: TargetModel, size: int, capacity: int) -> None:
        self.target, self.size = target, size
        self.cache = target.new_batch_cache(size, capacity)
        self.bucket = 1

    def start(self, row: int, prompt: torch.Tensor, max_new_tokens: int):
        self.cache.clear_row(row)
        return self.target.prefill_row(prompt, self.cache, row)

    def verify(self, trees: list[DraftTree | None]) -> list[tuple | None]:
        logits, hidden = self.target.forward_trees(trees, self.cache)  # [B, T, V], [B, T, H]
        self.bucket = logits.shape[1]
        return [None if tree is None else (logits[b, : len(tree)], hidden[b, : len(tree)], None)
                for b, tree in enumerate(trees)]

    def commit(self, pasts: list[int], paths: list[list[int] | None], sizes: list[int]) -> None:
        orders = torch.arange(self.bucket).repeat(self.size, 1)  # [B, T]: idle rows keep their order, commit 0
        kept = torch.zeros(self.size, dtype=torch.long)  # [B]
        for b, path in enumerate(paths):
            if path is not None:
                chosen = set(path)
                orders[b] = torch.tensor(path + [i for i in range(self.bucket) if i not in chosen])
                kept[b] = len(path)
        self.cache.commit(orders.to(self.cache.device), kept.to(self.cache.device))


@dataclass
class _Row:
    """One live sequence of the batch: what `generate` kept in locals for its one sequence."""

    job: Job
    drafter: Drafter
    rule: AcceptanceRule
    generator: torch.Generator | None
    timer: StageTimer
    buffer: torch.Tensor  # LongTensor[prompt + max_new_tokens + 1]: every token so far
    start: float
    output: list[int]
    past: int  # positions in the row's cache; the root is not among them
    root: int
    hidden: torch.Tensor  # [k, H] the target's hidden states for the positions accepted last
    steps: list[Step] = field(default_factory=list)
    done: bool = False


def _open_row(rows, b: int, job: Job, drafter: Drafter, target: TargetModel, budget: int, breakdown: bool,
              sampling: Sampling | None) -> _Row:
    """Row ``b`` takes ``job``: drafter reset, prefill, the root chosen by the row's rule."""
    if job.max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    timer = StageTimer(target.device, enabled=breakdown)
    prompt_len = len(job.prompt_ids)
    buffer = torch.empty(prompt_len + job.max_new_tokens + 1, dtype=torch.long)
    buffer[:prompt_len] = torch.tensor(job.prompt_ids, dtype=torch.long)
    rule = make_rule(sampling or Sampling(), job.seed)
    generator = None  # the drafter's own stream, apart from the verifier's
    if sampling is not None and not sampling.greedy:
        generator = torch.Generator().manual_seed((0 if job.seed is None else job.seed) ^ 0x5EED)
    drafter.reset(target.handle)
    target.prepare_drafter(drafter)  # the compiled regime: a capturable drafter's forwards compiled once
    start = wall_clock(target.device)
    with timer.stage("prefill"):
        logits, hidden = rows.start(b, buffer[:prompt_len], job.max_new_tokens)  # logits [V], hidden [L, H]
        root = rule.first_token(logits)
    buffer[prompt_len] = root
    return _Row(job, drafter, rule, generator, timer, buffer, start, [root], prompt_len, root, hidden,
                done=root in target.eos_ids or job.max_new_tokens == 1)


def _close_row(row: _Row, target: TargetModel, breakdown: bool) -> TurnResult:
    wall_s = wall_clock(target.device) - row.start
    prefill_ms = None
    if breakdown:
        prefill_ms, per_step = row.timer.per_step_ms()
        for record, times in zip(row.steps, per_step):
            record.stage_ms = times
    return TurnResult(output_ids=row.output, steps=row.steps, wall_s=wall_s, prefill_ms=prefill_ms,
                      stopped_at_eos=row.output[-1] in target.eos_ids)


def generate_batch(
    target: TargetModel,
    drafter: Drafter,
    jobs: Sequence[Job],
    budget: int,
    batch_size: int = 1,
    breakdown: bool = False,
    sampling: Sampling | None = None,
) -> Iterator[tuple[Job, TurnResult]]:
    """Speculative generation of ``jobs``, up to ``batch_size`` at once; yields (job, result) as each
    sequence ends (not in job order when rows end at different steps). Row 0 runs ``drafter`` itself, the
    others `row_copy`s of it. Each result is what batch 1 gives for that job: at temperature 0 the ids equal
    plain greedy decoding of that prompt."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    pending = list(jobs)
    size = min(batch_size, len(pending)) or 1
    if size == 1:
        rows = SingleRows(target, budget)
    else:
        capacity = max(len(job.prompt_ids) + job.max_new_tokens for job in pending) + static_cache.bucket_of(budget)
        rows = BatchRows(target, size, capacity)
    drafters = [drafter] + [row_copy(drafter) for _ in range(size - 1)]
    live: list[_Row | None] = [None] * size
    eos = target.eos_ids

    def refill() -> Iterator[tuple[Job, TurnResult]]:
        """Finished rows handed back; each empty row takes the next pending job (continuous batching)."""
        for b in range(size):
            while live[b] is None or live[b].done:
                if live[b] is not None:
                    yield live[b].job, _close_row(live[b], target, breakdown)
                    live[b] = None
                if not pending:
                    break
                live[b] = _open_row(rows, b, pending.pop(0), drafters[b], target, budget, breakdown, sampling)

    yield from refill()
    while any(row is not None for row in live):
        trees: list[DraftTree | None] = [None] * size
        active = [b for b, row in enumerate(live) if row is not None]
        contexts = []
        for b in active:
            row = live[b]
            row.timer.next_step()
            contexts.append(DraftContext(
                tokens=row.buffer[: row.past + 1], root=row.root, hidden=row.hidden, target=target.handle,
                budget=budget, span=row.timer.span, sampling=sampling, generator=row.generator, row=b,
            ))
        with ExitStack() as stages:  # one propose for the batch (`Drafter.propose_rows`): each row's draft spans it
            for b in active:
                stages.enter_context(live[b].timer.stage("draft"))
            proposed = propose_together(drafters[0], [(live[b].drafter, ctx) for b, ctx in zip(active, contexts)])
        for b, tree in zip(active, proposed):
            tree.validate(live[b].root, budget)
            trees[b] = tree
        with ExitStack() as stages:  # one forward for the batch: each row's verify stage spans it
            for row in live:
                if row is not None:
                    stages.enter_context(row.timer.stage("verify"))
            scored = rows.verify(trees)  # per row: logits [n, V], hidden [n, H], selection
        outcomes = [None] * size
        with ExitStack() as stages:
            for b, row in enumerate(live):
                if row is not None:
                    stages.enter_context(row.timer.stage("accept"))
                    outcomes[b] = verify_step(row.rule, trees[b], *scored[b])
            rows.commit([row.past if row else 0 for row in live], [o.path if o else None for o in outcomes],
                        [len(tree) if tree is not None else 1 for tree in trees])
            for b, row in enumerate(live):
                if row is not None:
                    row.drafter.accept(outcomes[b])
        for b, row in enumerate(live):
            if row is None:
                continue
            outcome, tree = outcomes[b], trees[b]
            emitted = outcome.tokens[1:] + [outcome.bonus]
            for i, token in enumerate(emitted):
                if token in eos or len(row.output) + i + 1 >= row.job.max_new_tokens:
                    emitted = emitted[: i + 1]
                    row.done = True
                    break
            row.buffer[row.past + 1 : row.past + 1 + len(emitted)] = torch.tensor(emitted, dtype=torch.long)
            row.output.extend(emitted)
            row.steps.append(Step(nodes=len(tree), depth=tree.max_depth(), accepted=len(emitted)))
            row.past += len(outcome.path)
            row.root, row.hidden = outcome.bonus, outcome.hidden
        yield from refill()


def generate(
    target: TargetModel,
    drafter: Drafter,
    prompt_ids: list[int],
    max_new_tokens: int,
    budget: int,
    breakdown: bool = False,
    sampling: Sampling | None = None,
    seed: int | None = None,
) -> TurnResult:
    """Speculative generation of one sequence (`generate_batch` at batch size 1). Greedy (the default): output
    ids equal plain greedy decoding. Sampling (``sampling.temperature > 0``, random stream seeded by
    ``seed``): lossless rules give output distributed as sampling from the target alone."""
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    job = Job(list(prompt_ids), max_new_tokens, seed)
    ((_, result),) = generate_batch(target, drafter, [job], budget, 1, breakdown, sampling)
    return result
