"""`LayerTap`: the hidden states entering chosen decoder layers of the target, recorded by forward hooks while
the harness runs it (what eagle3 drafts from)."""

from __future__ import annotations

import contextlib
import functools

import torch

from specbench.errors import SpecbenchError


class LayerTap:
    """The target's hidden states entering chosen decoder layers, recorded while the harness runs it.

    Layer id ``i`` is the hidden state entering decoder layer ``i`` (transformers' ``hidden_states[i]``: 0 is
    the embeddings, ``num_layers`` the last layer's output before the final norm), as EAGLE-3 reads its
    auxiliary features. Nothing is recorded until a drafter asks: ``request(ids)`` installs forward hooks on
    those layers once (they only keep a reference to the tensor the layer already has), after which every
    forward of the target's decoder (prefill, tree step, or anyone else's) counts one in ``forwards``.

    The last `HISTORY` forwards stay readable by number, each with the kind the target marked it with
    (``"prefill"``, ``"step"``: a verification forward, `mark`; None for anyone else's forward, such as a
    drafter's own), so that in a batch each row finds its own: its prefill (run alone, before other rows'
    prefills) and the step's forward, at its batch row. A drafter checks kind and number to know the rows
    belong to the forward it expects (replay runs no target forward at all)."""

    HISTORY = 64  # forwards kept: more than the prefills of one refill of a batch

    def __init__(self, model: torch.nn.Module) -> None:
        self._decoder = model.base_model
        self._layers = getattr(self._decoder, "layers", None)
        self._hooks: dict[int, object] = {}
        self._counter = None
        self._latest: dict[int, torch.Tensor] = {}
        self._history: dict[int, tuple[dict[int, torch.Tensor], list[str | None]]] = {}  # number -> (states, [kind])
        self.forwards = 0
        self.last_step = 0  # the number of the latest forward marked "step"
        self._aside = False  # `aside`: the forward running now is not numbered

    @property
    def num_layers(self) -> int:
        return len(self._layers) if self._layers is not None else 0

    def request(self, ids) -> None:
        """Record the hidden states entering layers ``ids`` from the next forward on."""
        if self._layers is None:
            raise SpecbenchError(f"{type(self._decoder).__name__} has no .layers to read auxiliary hidden states from")
        for i in ids:
            if not 0 <= i <= self.num_layers:
                raise SpecbenchError(f"auxiliary hidden-state layer {i} is outside the target's 0..{self.num_layers}")
        if self._counter is None:
            self._counter = self._decoder.register_forward_pre_hook(self._count)
        for i in ids:
            if i in self._hooks:
                continue
            if i < self.num_layers:
                self._hooks[i] = self._layers[i].register_forward_pre_hook(self._entering(i), with_kwargs=True)
            else:
                self._hooks[i] = self._layers[i - 1].register_forward_hook(self._leaving(i))

    @property
    def requested(self) -> list[int]:
        """The layer ids recorded from every forward (all that any drafter has asked for)."""
        return sorted(self._hooks)

    def _count(self, module, args) -> None:
        self._latest = {}
        if self._aside:
            return
        self.forwards += 1
        self._history[self.forwards] = (self._latest, [None])
        self._history.pop(self.forwards - self.HISTORY, None)

    @contextlib.contextmanager
    def unnumbered(self):
        """Forwards run inside are not numbered: their states land in a scratch dict, read by `latest` or `aside`.
        A compiled or captured step runs this way and hands what it read to `record` as its outputs: a CUDA graph's
        replay runs no Python, so no hook would fire (and a compiled trace must not count its own calls)."""
        self._aside = True
        try:
            yield
        finally:
            self._aside = False
            self._latest = self._history.get(self.forwards, ({}, None))[0]

    def latest(self) -> dict[int, torch.Tensor]:
        """{layer id: Tensor[B, n, H]} the forward running now has recorded so far (read inside a step)."""
        return {i: self._latest[i] for i in self._hooks if i in self._latest}

    def aside(self, forward) -> dict[int, torch.Tensor]:
        """Run ``forward()`` (one forward of the decoder) unnumbered, so no drafter mistakes it for a prefill
        or a step, and return what it recorded: {layer id: Tensor[B, n, H]}. Replay computes a whole trajectory's
        taps at once this way, then hands each of its stand-in forwards to `record`."""
        with self.unnumbered():
            forward()
            recorded = self._latest
        return recorded

    def record(self, states: dict[int, torch.Tensor], kind: str) -> None:
        """A forward the target did not run, stood in for (replay): numbered and marked ``kind`` as if it had,
        with ``states`` {layer id: Tensor[B, n, H]} as its recorded states."""
        self._count(None, None)
        self._latest.update(states)
        self.mark(kind)

    def mark(self, kind: str) -> None:
        """The target says what its latest forward was: ``"prefill"`` (one sequence's prompt) or ``"step"`` (a
        verification forward, every row of the batch)."""
        if self.forwards in self._history:
            self._history[self.forwards][1][0] = kind
        if kind == "step":
            self.last_step = self.forwards

    # hooks are partials of bound methods, so a deep copy of the model (sps's int8 draft) records into its own tap
    def _entering(self, i: int):
        return functools.partial(self._enter, i)

    def _enter(self, i: int, module, args, kwargs) -> None:
        self._latest[i] = args[0] if args else kwargs["hidden_states"]

    def _leaving(self, i: int):
        return functools.partial(self._leave, i)

    def _leave(self, i: int, module, args, output) -> None:
        self._latest[i] = output[0] if isinstance(output, tuple) else output

    def states(self, ids, row: int = 0, forward: int | None = None, kind: str | None = None) -> torch.Tensor | None:
        """Tensor[n, len(ids) * H]: the hidden states entering layers ``ids``, concatenated in that order, of
        forward number ``forward`` (default: the latest) at batch row ``row`` (a one-row forward is every row's
        own: a row's prefill runs alone); None if that forward is gone, was not marked ``kind`` (when given),
        did not record them all or has no such row."""
        recorded, kinds = self._history.get(self.forwards if forward is None else forward, ({}, [None]))
        if (kind is not None and kinds[0] != kind) or any(i not in recorded for i in ids):
            return None
        batch = recorded[ids[0]].shape[0]
        row = row if batch > 1 else 0
        return torch.cat([recorded[i][row] for i in ids], dim=-1) if row < batch else None

    def batch_states(self, ids) -> torch.Tensor | None:
        """Tensor[B, n, len(ids) * H]: as `states`, every batch row of the latest forward (distillation's batches)."""
        if any(i not in self._latest for i in ids):
            return None
        return torch.cat([self._latest[i] for i in ids], dim=-1)
