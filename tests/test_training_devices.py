"""The training pipeline on every device this machine has (CPU always; CUDA where torch sees one): distil a
tiny cache with generation batches that span shards, train medusa, hydra and ctc one epoch in bf16
autocast there, and check the checkpoints load and draft losslessly on CPU, as shipped ones must."""

from __future__ import annotations

import copy

import pytest
import torch

from conftest import build_tiny_model, make_target, plain_greedy
from specbench.drafters.ctc import CTCDrafter
from specbench.drafters.hydra import HydraDrafter
from specbench.drafters.medusa import MedusaDrafter
from specbench.drafters.training.ctc import CTCTrainConfig, train_ctc
from specbench.drafters.training.distill import DistillConfig, iter_samples, run_distill
from specbench.drafters.training.heads import HeadTrainConfig, train_heads
from specbench.harness.loop import generate
from specbench.model import TargetModel

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
PROMPTS = [[5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4], [60, 12], [42, 9, 9, 9, 1, 2], [7], [8, 8, 1], [30, 31, 2, 9, 5]]


@pytest.mark.parametrize("device", DEVICES)
def test_distil_and_train_on_the_device_then_draft_on_cpu(device, tmp_path):
    cpu_model = build_tiny_model("llama")
    cpu_target = make_target(cpu_model)
    on_device = make_target(copy.deepcopy(cpu_model).to(device)) if device != "cpu" else cpu_target
    assert isinstance(on_device, TargetModel) and on_device.device.type == device
    cache = tmp_path / "cache"
    run_distill(DistillConfig(out=str(cache), max_new_tokens=16, batch_size=6, shard_size=2), on_device,
                {"train": PROMPTS[:6], "heldout": PROMPTS[6:]}, progress=False)
    for sample in iter_samples(cache, "train"):
        prompt = sample.input_ids[: sample.prompt_len].tolist()
        # the device's greedy answer is the CPU's (the tiny model's margins are far above rounding)
        assert sample.input_ids[sample.prompt_len:].tolist() == plain_greedy(cpu_model, prompt, 16, cpu_target.eos_ids)
    drafters = []
    for method, drafter_class in (("medusa", MedusaDrafter), ("hydra", HydraDrafter)):
        train_heads(HeadTrainConfig(method=method, cache=str(cache), out=str(tmp_path / method), num_heads=2, epochs=1,
                                    batch_size=16, warmup_steps=1, max_rank=3, dtype="bfloat16", train_vocab=40),
                    on_device, progress=False)
        drafters.append(drafter_class(checkpoint=str(tmp_path / method)))
    train_ctc(CTCTrainConfig(method="ctc", cache=str(cache), out=str(tmp_path / "ctc"), epochs=1, samples_per_step=2,
                             warmup_steps=1, eval_budgets=[4], dtype="bfloat16", train_vocab=40), on_device, progress=False)
    drafters.append(CTCDrafter(checkpoint=str(tmp_path / "ctc")))
    for drafter in drafters:
        result = generate(cpu_target, drafter, PROMPTS[0], 20, 6)
        assert result.output_ids == plain_greedy(cpu_model, PROMPTS[0], 20, cpu_target.eos_ids)
