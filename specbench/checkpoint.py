"""Drafter checkpoints: ``<stem>.safetensors`` (weights) + ``<stem>.json`` (the recipe).

The recipe records the target the weights were trained for (name and hash), the data slice, seed,
hyper-parameters and held-out metrics. Loading a checkpoint for another target is refused with a clear
message: heads trained on one model's hidden states mean nothing on another's.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from specbench.drafter import TargetHandle
from specbench.errors import SpecbenchError


def checkpoint_files(stem: Path) -> tuple[Path, Path]:
    """(weights, recipe) paths of a checkpoint stem; the stem may contain dots (``model.Q4_1-<sha>``)."""
    stem = Path(stem)
    return stem.with_name(stem.name + ".safetensors"), stem.with_name(stem.name + ".json")


def save_checkpoint(stem: Path, state: dict[str, torch.Tensor], recipe: dict,
                    dtype: torch.dtype = torch.float16) -> None:
    """Write weights (float16 by default: shipped checkpoints stay a few MB; loading casts them to the
    run dtype) and the recipe."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous() for k, v in state.items()}
    weights, recipe_path = checkpoint_files(stem)
    save_file(tensors, str(weights))
    recipe = recipe | {"stored_dtype": str(dtype).removeprefix("torch.")}
    recipe_path.write_text(json.dumps(recipe, indent=2, default=str) + "\n", encoding="utf-8")


def target_identity(target: TargetHandle) -> dict:
    """What a recipe records about the target it was trained for."""
    return {"name": target.name, "sha256": target.sha256, "fingerprint": target.fingerprint,
            "hidden_size": target.config.hidden_size, "vocab_size": target.config.vocab_size}


def trained_for(recipe: dict, target: TargetHandle) -> bool:
    """Whether a recipe's target is ``target``: same shapes, and the same source hash when both sides have
    one, else the same weights fingerprint (an in-memory model has no source file to hash)."""
    recorded, mine = recipe.get("target", {}), target_identity(target)
    if any(recorded.get(key) != mine[key] for key in ("hidden_size", "vocab_size")):
        return False
    if recorded.get("sha256") and mine["sha256"]:
        return recorded["sha256"] == mine["sha256"]
    return bool(recorded.get("fingerprint")) and recorded.get("fingerprint") == mine["fingerprint"]


def load_checkpoint(stem: Path, target: TargetHandle) -> tuple[dict, dict]:
    """(state dict, recipe); raises `SpecbenchError` if missing or trained for another target."""
    stem = Path(stem)
    weights, recipe_path = checkpoint_files(stem)
    if not weights.exists() or not recipe_path.exists():
        raise SpecbenchError(f"checkpoint {stem} needs both {weights.name} and {recipe_path.name}")
    recipe = json.loads(recipe_path.read_text(encoding="utf-8"))
    if not trained_for(recipe, target):
        recorded, mine = recipe.get("target", {}), target_identity(target)
        raise SpecbenchError(
            f"checkpoint {stem.name} was trained for target {recorded.get('name')} "
            f"(sha256 {str(recorded.get('sha256'))[:12]}), not {mine['name']} "
            f"(sha256 {str(mine['sha256'])[:12]}, weights {str(mine['fingerprint'])[:12]}); "
            f"train one for this model with `specbench train`"
        )
    return load_file(str(weights)), recipe
