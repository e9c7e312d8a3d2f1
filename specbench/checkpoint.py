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

#: a matrix stored as int8 rows (``int8_rows`` in the recipe) keeps its float16 scale per row under this suffix
ROW_SCALE_SUFFIX = ".row_scale"


def checkpoint_files(stem: Path) -> tuple[Path, Path]:
    """(weights, recipe) paths of a checkpoint stem; the stem may contain dots (``model.Q4_1-<sha>``)."""
    stem = Path(stem)
    return stem.with_name(stem.name + ".safetensors"), stem.with_name(stem.name + ".json")


def save_checkpoint(stem: Path, state: dict[str, torch.Tensor], recipe: dict,
                    dtype: torch.dtype = torch.float16) -> None:
    """Write weights (float16 by default: shipped checkpoints stay a few MB; loading casts them to the
    run dtype) and the recipe."""
    tensors = {k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype) for k, v in state.items()}
    write_checkpoint_files(stem, tensors, recipe | {"stored_dtype": str(dtype).removeprefix("torch.")})


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """weight [R, C] -> (int8 [R, C], float16 scale [R]) with weight ~= int8 * scale[:, None]: symmetric per row,
    the scale each row's largest magnitude over 127, so an element moves by at most half its row's scale step
    (1/254 of the row's largest magnitude)."""
    scale = (weight.float().abs().amax(dim=1) / 127).clamp_min(2.0**-24).half()  # [R]; >= float16's smallest step
    quantized = torch.round(weight.float() / scale.float()[:, None]).clamp(-127, 127).to(torch.int8)  # [R, C]
    return quantized, scale


def int8_rows(state: dict[str, torch.Tensor], recipe: dict) -> tuple[dict[str, torch.Tensor], dict]:
    """A stored checkpoint's (tensors, recipe) with every float matrix (2-D: projections and layers; biases and
    norms stay as they are) as int8 rows plus float16 scales (named in the recipe's ``int8_rows``): shipped
    checkpoints at about half their float16 size. Drafts change only by that rounding; verification, and so
    exactness, never sees it."""
    if recipe.get("int8_rows"):
        raise SpecbenchError("the checkpoint is stored as int8 rows already")
    tensors, names = {}, []
    for name, tensor in state.items():
        if tensor.is_floating_point() and tensor.dim() == 2:
            tensors[name], tensors[name + ROW_SCALE_SUFFIX] = quantize_rows(tensor)
            names.append(name)
        else:
            tensors[name] = tensor
    return tensors, recipe | {"int8_rows": sorted(names)}


def restore_rows(tensors: dict[str, torch.Tensor], recipe: dict) -> dict[str, torch.Tensor]:
    """The state dict of stored ``tensors``: int8 rows (the recipe's ``int8_rows``) times their scales, in float32
    (where int8 times a float16 scale is exact); a missing scale or a non-int8 tensor named there is refused."""
    state = dict(tensors)
    for name in recipe.get("int8_rows", []):
        quantized, scale = state.get(name), state.pop(name + ROW_SCALE_SUFFIX, None)
        if quantized is None or scale is None or quantized.dtype != torch.int8:
            raise SpecbenchError(f"the recipe stores {name} as int8 rows, but the weights lack it or its "
                                 f"{ROW_SCALE_SUFFIX}")
        state[name] = quantized.float() * scale.float()[:, None]  # [R, C]
    return state


def write_checkpoint_files(stem: Path, tensors: dict[str, torch.Tensor], recipe: dict) -> None:
    """Write ``tensors`` as stored (no cast) and ``recipe`` under ``stem``."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    weights, recipe_path = checkpoint_files(stem)
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(weights))
    recipe_path.write_text(json.dumps(recipe, indent=2, default=str) + "\n", encoding="utf-8")


def read_recipe(recipe_path: Path) -> dict:
    """A checkpoint's recipe; a file that is not JSON is a one-line `SpecbenchError`."""
    try:
        return json.loads(Path(recipe_path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise SpecbenchError(f"{recipe_path}: not JSON ({error.msg})") from None


def read_checkpoint_files(stem: Path) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors as stored, recipe) of a checkpoint stem, without checking its target."""
    weights, recipe_path = checkpoint_files(Path(stem))
    if not weights.exists() or not recipe_path.exists():
        raise SpecbenchError(f"checkpoint {stem} needs both {weights.name} and {recipe_path.name}")
    return load_file(str(weights)), read_recipe(recipe_path)


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
    """(state dict, recipe), int8 rows restored; raises `SpecbenchError` if missing or trained for another target."""
    stem = Path(stem)
    tensors, recipe = read_checkpoint_files(stem)
    if not trained_for(recipe, target):
        recorded, mine = recipe.get("target", {}), target_identity(target)
        raise SpecbenchError(
            f"checkpoint {stem.name} was trained for target {recorded.get('name')} "
            f"(sha256 {str(recorded.get('sha256'))[:12]}), not {mine['name']} "
            f"(sha256 {str(mine['sha256'])[:12]}, weights {str(mine['fingerprint'])[:12]}); "
            f"train one for this model with `specbench train`"
        )
    return restore_rows(tensors, recipe), recipe
