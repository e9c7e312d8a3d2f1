"""The decode loop. It exists once: every drafter, vanilla included, runs through `generate`.

prefill -> root; then repeat: drafter.propose -> DraftTree; target.forward_tree (verify);
the acceptance rule + KV commit + drafter.accept (accept); emit accepted tokens + bonus; until EOS or
``max_new_tokens``. The rule (`specbench.verify.make_rule`) is greedy at temperature 0 and otherwise
samples from one seeded CPU generator per sequence, so a sampled turn is reproduced from its seed.
Tokens are counted from ids, the same way for every drafter: up to and including EOS, capped at
``max_new_tokens``; the root chosen at prefill is the first new token.

The regime (`TargetModel.use_regime`) picks the target's verify forward and cache, not the loop: in the
compiled regime the cache is static (room reserved for the turn), the tree step also computes the greedy
choice on the device, and `verify_step` reads it back instead of walking the tree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specbench import kv
from specbench.drafter import DraftContext, Drafter
from specbench.model import TargetModel
from specbench.results import Step
from specbench.sampling import Sampling
from specbench.timing import StageTimer, wall_clock
from specbench.verify import make_rule, verify_step


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


@torch.inference_mode()
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
    """Speculative generation of one sequence. Greedy (the default): output ids equal plain greedy
    decoding. Sampling (``sampling.temperature > 0``, random stream seeded by ``seed``): lossless rules
    give output distributed as sampling from the target alone."""
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    timer = StageTimer(target.device, enabled=breakdown)
    eos = target.eos_ids
    prompt_len = len(prompt_ids)
    buffer = torch.empty(prompt_len + max_new_tokens + 1, dtype=torch.long)  # every token so far
    buffer[:prompt_len] = torch.tensor(prompt_ids, dtype=torch.long)
    rule = make_rule(sampling or Sampling(), seed)
    drafter_generator = None  # the drafter's own stream, apart from the verifier's
    if sampling is not None and not sampling.greedy:
        drafter_generator = torch.Generator().manual_seed((0 if seed is None else seed) ^ 0x5EED)
    drafter.reset(target.handle)

    start = wall_clock(target.device)
    cache = target.new_cache()
    kv.reserve(cache, prompt_len + max_new_tokens, budget)  # a static cache's storage for the whole turn
    with timer.stage("prefill"):
        logits, hidden = target.prefill(buffer[:prompt_len], cache)  # logits [V], hidden [L, H]
        root = rule.first_token(logits)
    output = [root]
    buffer[prompt_len] = root
    past = prompt_len  # positions in the KV cache; the root is not among them
    steps: list[Step] = []
    done = root in eos or max_new_tokens == 1

    while not done:
        timer.next_step()
        ctx = DraftContext(
            tokens=buffer[: past + 1], root=root, hidden=hidden, target=target.handle, budget=budget, span=timer.span,
            sampling=sampling, generator=drafter_generator,
        )
        with timer.stage("draft"):
            tree = drafter.propose(ctx)
        tree.validate(root, budget)
        with timer.stage("verify"):
            logits, hidden_nodes = target.forward_tree(tree, cache)  # [n, V], [n, H]
        with timer.stage("accept"):
            outcome = verify_step(rule, tree, logits, hidden_nodes, kv.selection(cache))
            kv.commit_path(cache, past, outcome.path, len(tree))
            drafter.accept(outcome)

        emitted = outcome.tokens[1:] + [outcome.bonus]
        for i, token in enumerate(emitted):
            if token in eos or len(output) + i + 1 >= max_new_tokens:
                emitted = emitted[: i + 1]
                done = True
                break
        buffer[past + 1 : past + 1 + len(emitted)] = torch.tensor(emitted, dtype=torch.long)
        output.extend(emitted)
        steps.append(Step(nodes=len(tree), depth=tree.max_depth(), accepted=len(emitted)))
        past += len(outcome.path)
        root, hidden = outcome.bonus, outcome.hidden

    wall_s = wall_clock(target.device) - start
    prefill_ms = None
    if breakdown:
        prefill_ms, per_step = timer.per_step_ms()
        for record, times in zip(steps, per_step):
            record.stage_ms = times
    return TurnResult(
        output_ids=output, steps=steps, wall_s=wall_s, prefill_ms=prefill_ms, stopped_at_eos=output[-1] in eos
    )
