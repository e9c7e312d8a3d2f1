"""The compiled regime's CUDA graphs: a fixed-shape step captured once as a CUDA graph and replayed, the way vLLM's
and SGLang's graph runners run a model. Under ``--compile-backend cudagraphs`` the captured function is the eager
one (no compiler: a graph costs one eager run plus its capture, well under a second); under inductor it is
inductor's compiled function (fused kernels, tens of seconds to compile per shape), captured the same way.

Why not ``torch.compile(backend="cudagraphs")``: that backend treats only parameters as static inputs, so a step
that writes the static KV cache (an input it mutates) is never captured: it runs eagerly after the trace (measured
on an H100 with torch 2.11: "skipping cudagraphs due to mutated inputs"). A captured graph reads and writes fixed
addresses, which is what the static cache is for.

Terms: an *entry* is one captured graph for one *key*, the shapes of the call's top-level tensor arguments plus
the identity (and ``capacity``) of every other argument and the address of every nested tensor (a cache's tensors
are read and written in place, so a different tensor needs a different graph, never a copy). Top-level tensor
arguments are *inputs*: a call whose input sits elsewhere is copied into the captured one before the replay.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree

#: capture(function, args) -> replay: runs nothing; ``replay()`` runs the captured call and returns its outputs
Capture = Callable[[Callable, tuple], Callable[[], Any]]


def cuda_capture(device: torch.device, pool=None) -> Capture:
    """The CUDA capture: ``function(*args)`` recorded on a side stream into a graph (memory from ``pool``)."""

    def capture(function: Callable, args: tuple):
        graph = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream(device)
        stream.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.graph(graph, pool=pool, stream=stream):
            outputs = function(*args)
        torch.cuda.current_stream(device).wait_stream(stream)
        torch.cuda.synchronize(device)

        def replay():
            graph.replay()
            return outputs

        return replay

    return capture


def replay_capture(function: Callable, args: tuple):
    """A stand-in for `cuda_capture` where there are no CUDA graphs (tests on a CPU): the replay calls the
    function again on the captured arguments, so a call whose inputs were not copied into them is caught."""
    return lambda: function(*args)


@dataclass
class _Entry:
    args: tuple  # the captured call's arguments, kept alive (a key holds their identities)
    inputs: list[torch.Tensor | None]  # per top-level argument: the captured tensor, None for other arguments
    replay: Callable[[], Any] | None  # None: capture failed, the function runs eagerly for this key


class GraphedFunction:
    """``function`` replayed as one graph per key (module docstring). The first call of a key runs the function
    eagerly (its result is that call's, so a function that mutates state runs exactly once per call) and then
    captures it; later calls copy their inputs in and replay. A capture that fails (a host sync inside the
    function) is reported once on stderr and that key runs eagerly from then on. Outputs are the graph's own
    buffers, overwritten by the next replay: callers copy what they keep."""

    def __init__(self, function: Callable, label: str, capture: Capture) -> None:
        self.function, self.label, self.capture = function, label, capture
        self.entries: dict[tuple, _Entry] = {}

    def __call__(self, *args):
        key = tuple(_key_of(arg) for arg in args)
        entry = self.entries.get(key)
        if entry is None:
            out = self.function(*args)
            self.entries[key] = self._capture(args)
            return out
        if entry.replay is None:
            return self.function(*args)
        for captured, arg in zip(entry.inputs, args):
            if captured is not None and captured.data_ptr() != arg.data_ptr():
                captured.copy_(arg)
        return entry.replay()

    def _capture(self, args: tuple) -> _Entry:
        inputs = [arg if isinstance(arg, torch.Tensor) else None for arg in args]
        try:
            replay = self.capture(self.function, args)
        except Exception as error:  # noqa: BLE001 - any capture failure leaves the eager function, which is correct
            print(f"specbench: {self.label} runs eagerly: its CUDA graph capture failed "
                  f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})", file=sys.stderr)
            return _Entry(args, inputs, None)
        return _Entry(args, inputs, replay)


def _key_of(arg) -> tuple:
    """What a captured graph is specific to, for one top-level argument (module docstring)."""
    if isinstance(arg, torch.Tensor):
        return ("input", tuple(arg.shape), arg.dtype, arg.device)
    leaves = _pytree.tree_leaves(arg)
    if len(leaves) == 1 and leaves[0] is arg:  # an object: a cache, read and written through its own tensors
        return ("object", id(arg), getattr(arg, "capacity", None))
    return ("nested", tuple((t.data_ptr(), tuple(t.shape)) if isinstance(t, torch.Tensor) else _key_of(t)
                            for t in leaves))
