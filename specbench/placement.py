"""Placing a target too large for one GPU across the visible GPUs (``--device-map auto``).

accelerate plans which layers go where and moves activations between devices with its hooks; the KV
cache then holds each layer's keys and values on that layer's device (``kv.commit`` indexes each on its
own). One thing is ours: the modules the harness and the drafters touch directly -- the input
embeddings, the final norm and the ``lm_head`` -- are pinned to the *primary* device (the first GPU), so
every logit and hidden state a verify step returns, and every drafter head, lives on one device. Timing
stays correct with one device's events: the step's outputs are copied to the primary device, and that
copy is stream-ordered after the work on the other GPUs.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from specbench.errors import SpecbenchError

if TYPE_CHECKING:  # torch is imported where it is used: `specbench report` imports this module without torch
    import torch

STRATEGIES = ("auto", "balanced", "sequential")  # auto = balanced, as in accelerate


def check_device_map(device_map: str | None, device: str, distributed: bool = False) -> None:
    """Reject a strategy we do not know, a single-GPU ``--device``, or sharding on top (one line each)."""
    if device_map is None:
        return
    if device_map not in STRATEGIES:
        raise SpecbenchError(f"--device-map must be one of {', '.join(STRATEGIES)}, got {device_map!r}")
    if device not in ("cpu", "cuda"):
        raise SpecbenchError(f"--device-map spreads the target over every visible GPU: give --device cuda (choose the "
                             f"GPUs with CUDA_VISIBLE_DEVICES), not --device {device}")
    if distributed:
        raise SpecbenchError("--device-map with torchrun is not supported yet: run one process per group of GPUs")
    try:
        import accelerate  # noqa: F401
    except ImportError:
        raise SpecbenchError("--device-map needs the accelerate package: pip install accelerate") from None


def placement_plan(folder: Path | str, strategy: str, dtype: torch.dtype,
                   max_memory: dict[int | str, int | str] | None = None, device: str = "cuda") -> dict[str, int | str]:
    """accelerate's device map for the model in ``folder``, with everything but the decoder layers (embeddings,
    final norm, rotary embeddings, ``lm_head``) pinned to the primary device (the one the embeddings land on).

    ``max_memory`` (device -> bytes) defaults to what the visible GPUs (``device="cuda"``) or the host
    (``device="cpu"``) have; tests pass it to plan for GPUs this machine lacks.
    """
    import torch
    from accelerate import infer_auto_device_map, init_empty_weights
    from accelerate.utils import get_balanced_memory, get_max_memory
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with init_empty_weights():
        empty = AutoModelForCausalLM.from_config(config, dtype=dtype)
    empty.tie_weights()
    no_split = list(getattr(empty, "_no_split_modules", None) or [])
    if max_memory is None:
        available = get_max_memory()
        max_memory = {"cpu": available["cpu"]} if device == "cpu" else {k: v for k, v in available.items() if k != "cpu"}
        if not max_memory:
            raise SpecbenchError("--device-map: torch sees no CUDA device")
    if strategy in ("auto", "balanced"):
        max_memory = get_balanced_memory(empty, max_memory=max_memory, no_split_module_classes=no_split, dtype=dtype)
    plan = infer_auto_device_map(empty, max_memory=max_memory, no_split_module_classes=no_split, dtype=dtype)
    names = {id(module): name for name, module in empty.named_modules()}
    pinned = [names[id(empty.get_input_embeddings())], names[id(empty.get_output_embeddings())]]
    body = names[id(empty.base_model)]
    pinned += [f"{body}.{child}" if body else child for child, module in empty.base_model.named_children()
               if not isinstance(module, torch.nn.ModuleList)]  # final norm, rotary embeddings: all but the layers
    primary = _device_of(plan, pinned[0])
    for name in pinned:
        _assign(plan, empty, name, primary)
    return plan


def placement_summary(target) -> dict[str, int]:
    """Parameters per device of a loaded target, for the manifest: ``{"cuda:0": 3.4e9, "cuda:1": 3.3e9}``
    (one entry when it sits on one device)."""
    counts: dict[str, int] = {}
    for parameter in target.model.parameters():
        key = str(parameter.device)
        counts[key] = counts.get(key, 0) + parameter.numel()
    return counts


def _device_of(plan: dict[str, int | str], name: str) -> int | str:
    """The device of the plan entry covering module ``name`` (the longest key that is it or a parent)."""
    covering = [key for key in plan if key == "" or name == key or name.startswith(key + ".")]
    return plan[max(covering, key=len)]


def _assign(plan: dict[str, int | str], model: torch.nn.Module, name: str, device: int | str) -> None:
    """Put module ``name`` on ``device``, splitting a coarser entry into its children first so that no
    key in the plan is the parent of another."""
    if _device_of(plan, name) == device:
        return
    while name not in plan:
        covering = max((key for key in plan if key == "" or name.startswith(key + ".")), key=len)
        parent = model.get_submodule(covering)
        if any(True for _ in parent.named_parameters(recurse=False)):  # its own parameters cannot be split off
            raise SpecbenchError(f"--device-map: cannot place {name} apart from {covering or 'the model'}")
        parent_device = plan.pop(covering)
        for child, _ in parent.named_children():
            plan[f"{covering}.{child}" if covering else child] = parent_device
    plan[name] = device
