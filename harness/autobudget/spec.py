"""Tree budgets per run entry: the ``--tree-budget`` spec and run entries ``NAME@N``.

Spec: comma-separated items, each ``N``, ``auto``, ``NAME=N`` or ``NAME=auto``. An unnamed item sets the
budget of every drafter not named; with none, that is ``auto``. Vanilla always runs at 1: it proposes the
root alone, so a budget changes nothing for it. A run entry ``NAME@N`` (``--drafters hydra,hydra@2,hydra@8``)
is drafter NAME pinned to budget N, so one run times a drafter at several budgets side by side,
interleaved per question like any other entries. ``auto`` budgets are chosen by `choose.resolve_budgets`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specbench.errors import SpecbenchError
from specbench.results import BASELINE

AUTO = "auto"
#: budgets `auto` chooses among (those above the largest profiled size are dropped)
DEFAULT_CANDIDATES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)


def split_entry(entry: str) -> tuple[str, int | None]:
    """A run entry as (registered drafter name, pinned budget or None): ``hydra@4`` -> (hydra, 4)."""
    name, at, budget = entry.partition("@")
    if not at:
        return entry, None
    if not budget.isdigit() or int(budget) < 1:
        raise SpecbenchError(f"--drafters entry {entry!r}: NAME@N pins a budget of at least 1 node")
    return name, int(budget)


def create_entry(entry: str, options: dict[str, dict]):
    """The drafter of a run entry (``hydra`` or ``hydra@4``), with its drafter's ``--drafter-option``s."""
    from specbench.registry import create_drafter  # loads torch: the command line parses specs without it

    name, _ = split_entry(entry)
    return create_drafter(name, **options.get(name, {}))


def parse_budget_spec(spec: str | int, drafters: list[str]) -> dict[str, int | str]:
    """``--tree-budget`` as a budget (an int, or ``"auto"``) per drafter; a bad spec is one line."""
    items = [item.strip() for item in str(spec).split(",") if item.strip()]
    if not items:
        raise SpecbenchError("--tree-budget is empty; give N, auto, or NAME=N,... (e.g. hydra=4,medusa=3)")

    def value(text: str, item: str) -> int | str:
        if text == AUTO:
            return AUTO
        try:
            budget = int(text)
        except ValueError:
            raise SpecbenchError(f"--tree-budget {item!r}: expected a node count or 'auto'") from None
        if budget < 1:
            raise SpecbenchError(f"--tree-budget must be at least 1, got {budget}")
        return budget

    default: int | str = AUTO
    named: dict[str, int | str] = {}
    unnamed = 0
    for item in items:
        if "=" in item:
            name, text = (part.strip() for part in item.split("=", 1))
            if name not in drafters:
                raise SpecbenchError(f"--tree-budget names {name!r}, which is not in --drafters ({', '.join(drafters)})")
            if name in named:
                raise SpecbenchError(f"--tree-budget names {name} more than once")
            named[name] = value(text, item)
        else:
            unnamed += 1
            if unnamed > 1:
                raise SpecbenchError("--tree-budget has more than one default (an item without NAME=)")
            default = value(item, item)
    pinned = {name: split_entry(name)[1] for name in drafters}
    return {name: 1 if split_entry(name)[0] == BASELINE else pinned[name] or named.get(name, default)
            for name in drafters}


@dataclass
class BudgetChoice:
    """The budget one drafter runs at and how it was chosen (what the manifest records)."""

    budget: int
    how: str  # "fixed" (given), "auto" (chosen), "baseline" (vanilla: always 1)
    predicted_speedup: float | None = None
    curve: list[dict] = field(default_factory=list)  # per candidate: budget, tau, draft_ms, predicted_speedup
    #: batch size B > 1 (a string, as JSON keys are) -> the choice at B: {budget, how, predicted_speedup, curve},
    #: the prediction a throughput speedup over vanilla at B. Absent for a size: the batch-1 budget.
    batches: dict[str, dict] = field(default_factory=dict)

    def at(self, batch_size: int) -> int:
        """The budget at batch size ``batch_size``."""
        chosen = self.batches.get(str(batch_size)) if batch_size > 1 else None
        return self.budget if chosen is None else int(chosen["budget"])

    def to_json(self) -> dict:
        return asdict(self)
