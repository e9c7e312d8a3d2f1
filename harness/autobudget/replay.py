"""Replay: any drafter at any tree budget against a recorded greedy trajectory, without the target.

Under greedy verification the accepted path depends only on the target's greedy continuation: a node is
accepted when it and all its ancestors match the continuation. So once a prompt's *trajectory* is known
(its greedy continuation and the target's hidden state at every position), the target's answers to any
tree are known too. `TrajectoryTarget` gives them, and the one decode loop (`harness.loop.generate`) runs
unchanged: a drafter cannot tell replay from a real run. Tau and acceptance by depth come out as in a
timed run, up to fp rounding. The replayed hidden states come from one sequential forward, a real run's
from tree forwards, and a drafter's near-tie can fall the other way. The draft stage's time is the
drafter's own cost; the verify stage costs nothing here (predict it from a `VerifyProfile`).

A drafter that reads the target's layer taps (eagle3's low/middle/high features) finds them as in a real run:
`TrajectoryTarget` computes the trajectory's states entering the requested layers in one forward (the first
time a drafter asks for them) and hands each stand-in prefill and step its rows through `LayerTap.record`.

Replay is for greedy decoding only: under sampling the accepted path depends on random draws.

Terms: *trajectory* = prompt ids, greedy continuation ids (the root first), hidden states
[prompt + continuation, H]; *on-trajectory node* = a tree node whose path from the root spells the
continuation.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import torch

from specbench import kv
from specbench.drafter import DraftContext, Drafter, propose_together, row_copy
from specbench.errors import SpecbenchError
from specbench.harness.autobudget.predict import BudgetPoint, predicted_speedup
from specbench.harness.autobudget.trajectories import Trajectory
from specbench.harness.loop import generate
from specbench.progress import phase
from specbench.results import first_divergence
from specbench.tree import DraftTree
from specbench.verify import greedy_path

if TYPE_CHECKING:
    import pandas as pd


class TrajectoryTarget:
    """Stands in for the target in `generate`, answering from a `Trajectory` (see the module docstring).

    Off-trajectory nodes get a logits row whose argmax is token 0 and zero hidden states: neither can
    matter, since such a node is never accepted and neither is anything below it."""

    def __init__(self, target, trajectory: Trajectory) -> None:
        self.target, self.trajectory = target, trajectory
        self.device, self.eos_ids, self.handle, self.name = target.device, target.eos_ids, target.handle, target.name
        self.vocab_size = target.lm_head.weight.shape[0]
        self._ids = trajectory.ids.tolist()
        self._past = 0

    def new_cache(self):
        return kv.new_cache()  # stays empty: nothing is computed, so nothing is cached

    def prepare_drafter(self, drafter):
        """The real target's: in the compiled regime a capturable drafter replays compiled, as it will run."""
        return self.target.prepare_drafter(drafter)

    def _logits(self, next_tokens: list[int]) -> torch.Tensor:
        """[n, V]: row i's argmax is next_tokens[i] (token 0 where unknown)."""
        logits = torch.zeros(len(next_tokens), self.vocab_size, device=self.device)
        logits[torch.arange(len(next_tokens)), torch.tensor(next_tokens)] = 1.0
        return logits

    @torch.inference_mode()
    def _layer_states(self) -> dict[int, torch.Tensor]:
        """{layer id: Tensor[P + N, H]} along the trajectory for every layer the target's taps record (none if
        no drafter asked), from one unnumbered forward over the trajectory's ids, kept on the trajectory."""
        taps = self.handle.taps
        wanted = taps.requested if taps is not None else []
        if any(i not in self.trajectory.taps for i in wanted):
            ids = self.trajectory.ids[None].to(self.device)
            recorded = taps.aside(lambda: self.target.decoder(input_ids=ids))
            self.trajectory.taps.update({i: states[0] for i, states in recorded.items()})
        return {i: self.trajectory.taps[i] for i in wanted}

    @staticmethod
    def _rows_at(along: torch.Tensor, positions: list[int | None]) -> torch.Tensor:
        """[n, H]: ``along``'s rows [L, H] at ``positions``, zeros where a position is None (off the trajectory)."""
        at = along.new_zeros(len(positions), along.shape[-1])
        rows = [i for i, p in enumerate(positions) if p is not None]
        if rows:
            at[rows] = along[[positions[i] for i in rows]]
        return at

    def _record_taps(self, kind: str, positions: list[int | None]) -> None:
        """Stand in for a forward over ``positions`` (None: an off-trajectory node, zero states) in the taps."""
        layers = self._layer_states()
        if layers:  # each layer as a one-row forward's [1, n, H]
            self.handle.taps.record({layer: self._rows_at(along, positions)[None] for layer, along in layers.items()},
                                    kind)

    def prefill(self, input_ids: torch.Tensor, cache) -> tuple[torch.Tensor, torch.Tensor]:
        prompt = self.trajectory.prompt
        if input_ids.shape != prompt.shape or not torch.equal(input_ids.cpu(), prompt):
            raise SpecbenchError("replay: the prompt differs from the recorded trajectory's")
        self._past = len(prompt)
        self._record_taps("prefill", list(range(self._past)))
        return self._logits([self._ids[self._past]])[0], self.trajectory.hidden[: self._past]

    def forward_tree(self, tree: DraftTree, cache) -> tuple[torch.Tensor, torch.Tensor]:
        """logits [n, V] and hidden [n, H] for the tree rooted at position ``past`` (the root's)."""
        tokens, parents, depths = tree.tokens.tolist(), tree.parents.tolist(), tree.depths()
        on = [False] * len(tokens)
        for i, (token, parent, depth) in enumerate(zip(tokens, parents, depths)):
            position = self._past + depth
            on[i] = (parent < 0 or on[parent]) and position < len(self._ids) and self._ids[position] == token
        positions = [self._past + d for d in depths]
        next_tokens = [self._ids[p + 1] if on[i] and p + 1 < len(self._ids) else 0 for i, p in enumerate(positions)]
        known = [p if on[i] and p < self.trajectory.hidden.shape[0] else None for i, p in enumerate(positions)]
        hidden = self._rows_at(self.trajectory.hidden, known)  # [n, H]
        self._record_taps("step", known)
        # the loop commits what greedy verification accepts from these answers: the next root follows it
        self._past += len(greedy_path(tree, next_tokens))
        return self._logits(next_tokens), hidden


class RowsTogether(Drafter):
    """``size`` rows of one drafter proposing together (`Drafter.propose_rows`), every row fed the same
    context and outcome: replayed, its draft stage is the drafter's propose cost at batch size ``size``
    (row by row, or its own batched propose), while the tree verified, and so tau, is row 0's."""

    def __init__(self, drafter: Drafter, size: int) -> None:
        super().__init__()
        self.drafter, self.size, self.rows = drafter, size, [drafter]

    def reset(self, target) -> None:
        self.drafter.reset(target)  # loads a trained drafter's weights first: the copies share them
        if len(self.rows) != self.size:
            self.rows = [self.drafter] + [row_copy(self.drafter) for _ in range(self.size - 1)]
        for row in self.rows[1:]:
            row.reset(target)

    def propose(self, ctx: DraftContext) -> DraftTree:
        return propose_together(self.drafter, [(row, ctx) for row in self.rows])[0]

    def accept(self, outcome) -> None:
        for row in self.rows:
            row.accept(outcome)

    def max_budget(self) -> int | None:
        return self.drafter.max_budget()


def replay(target, drafter: Drafter, trajectory: Trajectory, max_new_tokens: int, budget: int):
    """`generate` with ``drafter`` at ``budget`` against ``trajectory``; returns the `TurnResult` (stage
    times on, so ``step.stage_ms['draft']`` is the drafter's own cost). Its output must be the trajectory's
    continuation; anything else is a bug in the drafter or the replay, and is raised."""
    stand_in = TrajectoryTarget(target, trajectory)
    result = generate(stand_in, drafter, trajectory.prompt.tolist(), max_new_tokens, budget, breakdown=True)
    divergence = first_divergence(result.output_ids, trajectory.continuation.tolist()[:max_new_tokens])
    if divergence is not None:
        raise SpecbenchError(f"replay of {type(drafter).__name__} left the recorded trajectory at token {divergence}")
    return result


def sweep(target, drafters: dict[str, Drafter], turns: list[tuple[str, Trajectory]], budgets: list[int],
          max_new_tokens: int, progress: bool | None = None, label: str = "replay") -> "pd.DataFrame":
    """Replay every drafter at every budget over ``turns`` ((category, trajectory) pairs); one row per
    drafter, budget and category (plus ``overall``): tau, steps, mean draft ms per step (the drafter's own
    propose cost, transform included), mean tree size, unconditional acceptance by depth, and the trees
    proposed ("nodes:depth x steps" ...; `budget_point` reads them). ``label`` names the progress phase;
    ``progress`` None follows the enclosing `specbench.progress.enabled` block."""
    import pandas as pd

    from specbench import metrics

    rows = []
    bar = phase(label, len(drafters) * len(budgets) * len(turns), "turn", show=progress)
    for name, drafter in drafters.items():
        for budget in budgets:
            steps_by_category: dict[str, list] = {}
            for category, trajectory in turns:
                result = replay(target, drafter, trajectory, max_new_tokens, budget)
                steps_by_category.setdefault(category, []).extend(result.steps)
                bar.update(1)
            groups = dict(sorted(steps_by_category.items()))
            groups["overall"] = [step for steps in steps_by_category.values() for step in steps]
            for category, steps in groups.items():
                lengths = [s.accepted for s in steps]
                draft = [s.draft_ms for s in steps]
                by_depth, _ = metrics.acceptance_by_depth(lengths, proposed_depths=[s.depth for s in steps])
                trees = Counter(f"{s.nodes}:{s.depth}" for s in steps)
                rows.append({"drafter": name, "budget": budget, "category": category, "tau": metrics.tau(lengths),
                             "steps": len(steps), "tokens": sum(lengths), "draft_ms": sum(draft) / max(len(draft), 1),
                             "mean_nodes": sum(s.nodes for s in steps) / max(len(steps), 1),
                             "acceptance_by_depth": " ".join(f"{a:.3f}" for a in by_depth),
                             "trees": " ".join(f"{key}x{count}" for key, count in sorted(trees.items()))})
    bar.close()
    return pd.DataFrame(rows)


def budget_point(row) -> BudgetPoint:
    """A `sweep` row (a namedtuple or a mapping) as the `BudgetPoint` the speedup prediction takes."""
    get = row.get if isinstance(row, dict) else lambda key: getattr(row, key)
    trees = dict((key, int(count)) for key, count in (item.split("x") for item in str(get("trees")).split()))
    return BudgetPoint(int(get("budget")), float(get("tau")), float(get("draft_ms")), trees)


def with_predictions(table: "pd.DataFrame", profile) -> "pd.DataFrame":
    """A `sweep` table with each row's predicted speedup from a `VerifyProfile` (loop overhead left out:
    `choose` adds the measured loop when it picks a budget)."""
    return table.assign(predicted_speedup=[predicted_speedup(budget_point(row), profile) for row in table.itertuples()])
