"""`specbench.cuda_graphs`: the cudagraphs backend's replay semantics, on a CPU through `replay_capture` (each
replay reruns the function on the captured arguments, as a CUDA graph reads its captured addresses)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from specbench.cuda_graphs import GraphedFunction, replay_capture
from specbench.static_cache import move_slots


def scaled(x: torch.Tensor, weights: list[torch.Tensor]) -> torch.Tensor:
    return x * weights[0]


def test_a_new_input_is_copied_into_the_captured_one_and_a_new_shape_captures_again():
    weights = [torch.tensor(3.0)]
    graphed = GraphedFunction(scaled, "scale", replay_capture)
    first = torch.tensor([1.0, 2.0])
    assert graphed(first, weights).tolist() == [3.0, 6.0]  # eager run, then capture
    assert graphed(torch.tensor([5.0, 7.0]), weights).tolist() == [15.0, 21.0]  # copied in, replayed
    assert first.tolist() == [5.0, 7.0]  # the captured input now holds the call's values
    assert graphed(torch.tensor([1.0, 1.0, 1.0]), weights).tolist() == [3.0, 3.0, 3.0]
    assert len(graphed.entries) == 2


def test_nested_tensors_elsewhere_get_their_own_graph_not_a_copy():
    """A cache's tensors are read and written in place: another tensor there is another graph."""
    graphed = GraphedFunction(scaled, "scale", replay_capture)
    x = torch.tensor([1.0])
    old, new = [torch.tensor(2.0)], [torch.tensor(10.0)]
    assert graphed(x, old).item() == 2.0 and graphed(x, new).item() == 10.0
    assert old[0].item() == 2.0 and len(graphed.entries) == 2


def layered(keys: list[torch.Tensor], values: list[torch.Tensor]) -> SimpleNamespace:
    """What `move_slots` reads of a `TreeStaticCache`: its layers' keys and values, and its capacity."""
    layers = [SimpleNamespace(keys=k, values=v) for k, v in zip(keys, values)]
    return SimpleNamespace(layers=layers, capacity=keys[0].shape[2])


def test_a_commit_replayed_moves_the_slots_of_each_call():
    """move_slots (the static cache's commit) graphed: every call's order is honoured, in place, as eager; one
    graph per cache and capacity (a cache grown to a new capacity has new tensors: a new graph)."""
    torch.manual_seed(0)
    keys = [torch.randn(1, 2, 12, 4) for _ in range(2)]
    values = [torch.randn(1, 2, 12, 4) for _ in range(2)]
    cache, twin = layered(keys, values), layered([k.clone() for k in keys], [v.clone() for v in values])
    order, length = torch.zeros(4, dtype=torch.long), torch.tensor(3)
    graphed = GraphedFunction(move_slots, "commit", replay_capture)
    for path in ([0, 2, 1, 3], [0, 3, 1, 2], [0, 1, 3, 2]):
        order.copy_(torch.tensor(path))
        graphed(cache, order, length)
        move_slots(twin, torch.tensor(path), length.clone())
        length += 1
        for got, want in zip(cache.layers, twin.layers):
            assert torch.equal(got.keys, want.keys) and torch.equal(got.values, want.values)
    assert len(graphed.entries) == 1
    cache.layers, cache.capacity = layered([torch.zeros(1, 2, 16, 4)], [torch.zeros(1, 2, 16, 4)]).layers, 16
    graphed(cache, order, length)
    assert len(graphed.entries) == 2


def test_a_failed_capture_leaves_that_key_eager(capsys):
    def refusing(function, args):
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    calls = []

    def counted(x):
        calls.append(x.clone())
        return x + 1

    graphed = GraphedFunction(counted, "tree step, bucket 4", refusing)
    assert graphed(torch.tensor([1])).item() == 2 and graphed(torch.tensor([5])).item() == 6
    assert len(calls) == 2  # each call ran once, eagerly
    assert capsys.readouterr().err.strip() == (
        "specbench: tree step, bucket 4 runs eagerly: its CUDA graph capture failed "
        "(RuntimeError: operation not permitted when stream is capturing)")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a GPU")
def test_a_cuda_graph_replays_a_cache_write():
    from specbench.cuda_graphs import cuda_capture

    device = torch.device("cuda")
    cache = torch.zeros(8, device=device)
    length = torch.zeros((), dtype=torch.long, device=device)

    def write(values: torch.Tensor, store: list[torch.Tensor]) -> torch.Tensor:
        store[0].index_copy_(0, length + torch.arange(values.shape[0], device=device), values)
        return store[0].sum()

    graphed = GraphedFunction(write, "write", cuda_capture(device))
    for step in range(3):
        total = graphed(torch.full((2,), float(step + 1), device=device), [cache]).item()
        length += 2
    assert cache.tolist() == [1, 1, 2, 2, 3, 3, 0, 0] and total == 12
