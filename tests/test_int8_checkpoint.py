"""Checkpoints stored as int8 rows (`specbench convert STEM --to int8`): what the rounding may move, that a
converted checkpoint loads and drafts losslessly, the own-projection cut, and the one-line refusals."""

from __future__ import annotations

import json
import subprocess

import pytest
import torch
from safetensors.torch import load_file

from conftest import distil_random_prompts, plain_greedy
from specbench.checkpoint import ROW_SCALE_SUFFIX, checkpoint_files, int8_rows, quantize_rows, read_checkpoint_files, restore_rows
from specbench.drafters.medusa import MedusaDrafter
from specbench.drafters.training.heads import HeadTrainConfig, train_heads
from specbench.errors import SpecbenchError
from specbench.harness.loop import generate
from test_cli import assert_one_line_error, cli_in_process, run_cli

PROMPTS = [[5, 9, 14, 3], [40, 2, 2, 2, 17, 61]]
MiB = 1 << 20
#: the largest file the repository tracks (shipped checkpoints included)
TRACKED_FILE_LIMIT = 20 * MiB


def test_each_element_moves_by_at_most_half_its_rows_step():
    generator = torch.Generator().manual_seed(7)
    weight = torch.randn(64, 300, generator=generator) * torch.logspace(-3, 1, 64)[:, None]  # [R, C], rows 1e-3..10
    weight[5] = 0.0  # an all-zero row keeps a usable scale
    quantized, scale = quantize_rows(weight)
    assert quantized.dtype == torch.int8 and scale.dtype == torch.float16 and scale.shape == (64,)
    restored = quantized.float() * scale.float()[:, None]
    step = scale.float()[:, None]
    assert ((restored - weight).abs() <= step / 2 + 1e-7).all()
    # the step is the row's largest magnitude over 127 (to float16's precision), so the bound is about 1/254 of it
    assert torch.allclose(scale.float(), weight.abs().amax(dim=1) / 127, rtol=1e-3, atol=2.0**-24)
    assert quantized.abs().max() == 127 and torch.equal(restored[5], torch.zeros(300))


def test_only_float_matrices_are_stored_as_int8_and_restore_exactly_in_float32():
    state = {"big.weight": torch.randn(300, 256).half(), "bias": torch.randn(300).half(),
             "small.weight": torch.randn(8, 8).half(), "ranking": torch.arange(300, dtype=torch.int32)}
    tensors, recipe = int8_rows(state, {"stored_dtype": "float16"})
    assert recipe["int8_rows"] == ["big.weight", "small.weight"]
    assert tensors["big.weight"].dtype == torch.int8 and tensors["big.weight" + ROW_SCALE_SUFFIX].shape == (300,)
    assert all(torch.equal(tensors[k], state[k]) for k in ("bias", "ranking"))
    restored = restore_rows(tensors, recipe)
    assert sorted(restored) == sorted(state) and restored["big.weight"].dtype == torch.float32
    assert (restored["big.weight"].float() - state["big.weight"].float()).abs().max() < state["big.weight"].abs().max() / 200
    with pytest.raises(SpecbenchError, match="int8 rows already"):
        int8_rows(tensors, recipe)
    del tensors["big.weight" + ROW_SCALE_SUFFIX]
    with pytest.raises(SpecbenchError, match="weights lack it or its"):
        restore_rows(tensors, recipe)


@pytest.fixture(scope="module")
def own_heads(llama_target, tmp_path_factory):
    """A medusa checkpoint whose 2 heads have their own projections over the 24 most frequent tokens."""
    folder = tmp_path_factory.mktemp("own-heads")
    cache = distil_random_prompts(llama_target, folder / "cache", seed=1)
    train_heads(HeadTrainConfig(method="medusa", cache=str(cache), out=str(folder / "own"), num_heads=2, epochs=1,
                                lr=3e-3, batch_size=32, warmup_steps=2, train_vocab=24, own_lm_heads=True), llama_target,
                progress=False)
    return folder / "own"


def test_a_converted_checkpoint_is_smaller_drafts_from_its_rounded_rows_and_stays_exact(llama_target, own_heads, tmp_path):
    converted = run_cli("convert", str(own_heads), "--to", "int8", "--own-vocab", "16", "--out", str(tmp_path / "int8"))
    assert converted.returncode == 0, converted.stderr
    stem = tmp_path / "int8" / own_heads.name
    assert converted.stdout.split() == [str(path) for path in checkpoint_files(stem)]
    tensors, recipe = read_checkpoint_files(stem)
    assert recipe["hyperparameters"]["own_vocab"] == 16 and "lm_heads.0.weight" in recipe["int8_rows"]
    assert recipe["converted_from"]["own_vocab"] == 16 and len(recipe["converted_from"]["weights_sha256"]) == 64
    assert tensors["lm_heads.0.weight"].dtype == torch.int8 and tensors["lm_heads.0.weight"].shape[0] == 16

    native, small = MedusaDrafter(checkpoint=str(own_heads)), MedusaDrafter(checkpoint=str(stem))
    native.reset(llama_target.handle)
    small.reset(llama_target.handle)
    original = load_file(str(checkpoint_files(own_heads)[0]))
    # the cut keeps the 16 most frequent of the 24 tokens (rows in ascending id order, as before)
    ranking = original["vocab_ranking"].long()
    assert torch.equal(small.head_vocabs[1].ids, ranking[:16].sort().values)
    assert torch.equal(native.head_vocabs[1].ids, ranking[:24].sort().values)
    # a projection's rows score its tokens in ascending id order: the kept rows are those of the kept tokens
    kept_rows = torch.searchsorted(native.head_vocabs[0].ids, small.head_vocabs[0].ids)
    for name in recipe["int8_rows"]:
        weight = original[name].float()  # [R, C]
        weight = weight[kept_rows] if name.startswith("lm_heads.") else weight
        step = tensors[name + ROW_SCALE_SUFFIX].float()[:, None]
        loaded = dict(small.module.named_parameters())[name].detach()  # float32, the target's dtype
        assert torch.equal(loaded, tensors[name].float() * step), name  # exactly the stored rows times their scales
        assert ((loaded - weight).abs() <= step / 2).all(), name  # at most half a step from the float16 original
        assert not torch.equal(loaded, weight), name  # the rounding is real: the file holds no float copy
    for prompt in PROMPTS:
        assert generate(llama_target, small, prompt, 16, 8).output_ids == plain_greedy(
            llama_target.model, prompt, 16, llama_target.eos_ids)


def test_conversion_refusals_are_one_line(own_heads, tmp_path):
    assert cli_in_process("convert", str(own_heads), "--to", "int8", "--out", str(tmp_path / "a")).returncode == 0
    assert_one_line_error(cli_in_process("convert", str(tmp_path / "a" / own_heads.name), "--to", "int8", "--out",
                                  str(tmp_path / "b")), "int8 rows already")
    assert_one_line_error(cli_in_process("convert", str(own_heads), "--to", "int8", "--own-vocab", "25", "--out",
                                  str(tmp_path / "c")), "between 1 and the heads' 24 rows")
    assert_one_line_error(cli_in_process("convert", str(own_heads), "--own-vocab", "8", "--out", str(tmp_path / "d")),
                          "--own-vocab goes with --to int8")
    recipe_path = checkpoint_files(tmp_path / "plain")[1]
    checkpoint_files(tmp_path / "plain")[0].write_bytes(checkpoint_files(own_heads)[0].read_bytes())
    recipe = json.loads(checkpoint_files(own_heads)[1].read_text())
    recipe["hyperparameters"]["own_vocab"] = 0
    recipe_path.write_text(json.dumps(recipe))
    assert_one_line_error(cli_in_process("convert", str(tmp_path / "plain"), "--to", "int8", "--own-vocab", "8", "--out",
                                  str(tmp_path / "e")), "no output projections of their own")


def test_no_tracked_file_is_over_20_mib():
    """Shipped checkpoints included (`specbench convert --to int8` keeps the large ones under it)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    sizes = {name.decode(): (root / name.decode()).stat().st_size for name in listed if name and (root / name.decode()).is_file()}
    assert len(sizes) > 100 and any(name.startswith("drafters/checkpoints/") for name in sizes)
    assert {name: size for name, size in sizes.items() if size > TRACKED_FILE_LIMIT} == {}
