"""The Drafter protocol: the small seam every speculative method plugs into.

A drafter sees a `DraftContext` each step and returns a `DraftTree`; the harness verifies it against
the target and tells the drafter what was accepted. Drafters never touch the target's KV cache and
never time themselves (except sub-stages through ``ctx.span("transform")``), so every method is measured
by the same loop, cache and clock.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Sequence

import torch

from specbench.errors import DrafterOptionError
from specbench.tree import DraftTree
from specbench.verify import VerifyOutcome


@dataclass(frozen=True)
class TargetHandle:
    """Read-only view of the target model for drafters.

    embed_tokens: the target's input embedding module (token ids -> Tensor[..., H])
    lm_head:      the target's output projection (Tensor[..., H] -> logits[..., V]), shared, not copied
    """

    embed_tokens: torch.nn.Module
    lm_head: torch.nn.Module
    config: Any
    device: torch.device
    dtype: torch.dtype
    name: str = ""
    sha256: str | None = None  # identity of the weights' source (GGUF file hash or directory fingerprint)
    fingerprint: str | None = None  # identity of the weights themselves (`specbench.model_source.weights_fingerprint`)
    # The whole model and its tokenizer, read-only: for drafters that build a draft model from the target
    # (sps's self-draft) or check a tokenizer against it. Never run the model on the harness's cache.
    model: Any = None
    tokenizer: Any = None
    # `specbench.layer_tap.LayerTap`: the hidden states entering chosen decoder layers, recorded as the harness runs
    # the target (EAGLE-3's auxiliary features); None where the target is not a `TargetModel`
    taps: Any = None


@dataclass
class DraftContext:
    """What a drafter may read when proposing.

    tokens: LongTensor[L] (CPU): every token so far, prompt included, root last. A view into the
            harness's buffer: copy it if you keep it past this call.
    root:   the target's chosen next token (== tokens[-1]), not yet in the KV cache
    hidden: Tensor[m, H]: target last-layer hidden states (after the final norm) of the positions
            accepted since the previous call; the last row produced the root. At the first call after
            prefill, m is the prompt length.
    budget: the maximum number of tree nodes, root included
    span:   ``with ctx.span("transform"): ...`` times a sub-stage of drafting
    sampling: the run's sampling settings (None or temperature 0: greedy). A drafter that samples its
            proposals draws from its own distribution (warped the same way if it likes), fills
            ``DraftTree.probs`` and uses ``generator``
    generator: a CPU random stream for the drafter's own draws, seeded per sequence (None when greedy)
    row:    the sequence's row in the batch (0 at batch size 1): where its part of a batched verification
            forward is, for a drafter that reads the target's per-forward state (eagle3's layer taps)
    """

    tokens: torch.Tensor
    root: int
    hidden: torch.Tensor
    target: TargetHandle
    budget: int
    span: Callable[[str], AbstractContextManager]
    sampling: Any = None
    generator: torch.Generator | None = None
    row: int = 0

    @property
    def first_new_position(self) -> int:
        """Sequence position of ``hidden[0]``: drafters that cache per-position state start there."""
        return len(self.tokens) - 1 - self.hidden.shape[0]


class Drafter:
    """Base class with no-op defaults. Subclass it and register it (see docs/writing-a-drafter.md).

    Lifecycle per generated sequence (one turn): ``reset(target)`` once, then alternately
    ``propose(ctx)`` and ``accept(outcome)`` until the sequence ends.
    """

    #: the registry name, set by `register_drafter` or the entry-point loader
    name: ClassVar[str] = ""
    #: the largest batch (`--batch-size`) this drafter can run at, or None for any (every built-in): a plug-in
    #: that cannot follow its batch row (`DraftContext.row`) says 1, and `run` refuses a larger batch before
    #: the model loads
    max_batch_size: ClassVar[int | None] = None
    #: whether the compiled regime (`--regime compiled`) may compile this drafter's per-step forwards through
    #: `compile_parts`. False, the default, leaves a plug-in exactly as it is: it runs eagerly beside the
    #: compiled target, and the manifest says so
    capturable: ClassVar[bool] = False

    def __init__(self, **options: Any) -> None:
        if options:
            unknown = ", ".join(sorted(options))
            raise DrafterOptionError(f"{type(self).__name__} takes no options, got: {unknown}")

    def reset(self, target: TargetHandle) -> None:
        """Forget per-sequence state; called before each sequence."""

    def propose(self, ctx: DraftContext) -> DraftTree:
        """Return a draft tree rooted at ``ctx.root`` with at most ``ctx.budget`` nodes."""
        return DraftTree.root_only(ctx.root)

    def propose_rows(self, rows: "Sequence[tuple[Drafter, DraftContext]]") -> list[DraftTree]:
        """Every live row's tree for this step (`--batch-size` > 1; batch 1 passes one row): ``rows`` pairs each
        row's drafter (this one or a `row_copy` of it) with its context. The default proposes row by row, so
        every drafter batches unchanged; one whose module can score the rows together overrides it (one
        forward for the batch instead of one per row) and must give the trees ``propose`` gives."""
        return [drafter.propose(ctx) for drafter, ctx in rows]

    def accept(self, outcome: VerifyOutcome) -> None:
        """Learn what the verifier accepted (``outcome.path``, ``outcome.bonus``, ``outcome.hidden``)."""

    def num_parameters(self) -> int:
        """Trainable parameters the drafter adds on top of the target (0 for training-free methods)."""
        return 0

    def max_budget(self) -> int | None:
        """The most tree nodes (root included) this drafter can ever propose, or None for no limit. ``auto``
        replays only budgets up to it (larger ones would give the same trees)."""
        return None

    def unavailable(self, target: TargetHandle) -> str | None:
        """Why this drafter cannot run on ``target`` (None: it can), e.g. no trained weights for it.
        ``--drafters all`` leaves such a drafter out with this reason; one named explicitly stops the run."""
        return None

    def compile_parts(self, compile: Callable[[Callable], Callable]) -> list[str]:
        """Replace the forwards this drafter runs every step by ``compile(forward)`` and return their names
        (the manifest records them). Called once per loaded set of weights, after ``reset``, in the compiled
        regime, only when ``capturable``; ``compile`` is the target's (torch.compile with its mode)."""
        return []

    def identity(self) -> str:
        """What the proposals depend on beyond the class and its options, e.g. a checkpoint's hash (called
        after ``reset``). Cached calibration results (``--tree-budget auto``) are keyed by it; a drafter
        whose weights can change under the same options must say so here."""
        return ""


def _shared_objects(obj: Any, memo: dict[int, Any], seen: set[int], depth: int = 0) -> None:
    """Record in ``memo`` (a deepcopy memo) every module, tensor, target handle and library object reachable
    from ``obj`` through containers and plain objects' attributes, so a deep copy shares them."""
    if id(obj) in seen or depth > 8:
        return
    seen.add(id(obj))
    if isinstance(obj, (torch.nn.Module, torch.Tensor, TargetHandle, torch.Generator)) or (
        type(obj).__module__.split(".")[0] in ("transformers", "tokenizers", "torch")
    ):
        memo[id(obj)] = obj
        return
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
    for child in children:
        _shared_objects(child, memo, seen, depth + 1)


@torch.inference_mode()
def propose_together(drafter: Drafter, rows: "Sequence[tuple[Drafter, DraftContext]]") -> list[DraftTree]:
    """`Drafter.propose_rows` of ``drafter``, or row by row for a drafter that implements the protocol
    without subclassing `Drafter` (a plug-in, a test's wrapper)."""
    batched = getattr(drafter, "propose_rows", None)
    return batched(rows) if batched is not None else [row.propose(ctx) for row, ctx in rows]


def row_copy(drafter: Drafter) -> Drafter:
    """A second drafter for another row of a batch: its own per-sequence state (a deep copy of everything
    else), the same modules, tensors, target handle and tokenizer (shared, so no weights are copied)."""
    import copy

    memo: dict[int, Any] = {}
    _shared_objects(drafter, memo, set())
    return copy.deepcopy(drafter, memo)
