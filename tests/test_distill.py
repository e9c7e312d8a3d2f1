"""Self-distillation data on a tiny model: labels are the target's own greedy output, hidden states are
the target's, shards round-trip, and a resumed run skips finished shards and gives the same data."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import build_tiny_model, make_target, plain_greedy
from specbench.drafters.training.distill import DistillConfig, iter_samples, prompts_in_tokens, run_distill
from specbench.drafters.training.sharegpt import conversations_by_first_turn, first_human_turn, iter_items
from specbench.errors import SpecbenchError

PROMPTS = [[5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4], [60, 12], [42, 9, 9, 9, 1, 2], [7]]


@pytest.fixture(scope="module")
def target():
    # an EOS the model does emit, so responses of different lengths are batched together
    return make_target(build_tiny_model("llama"), eos_token_id=11)


def test_samples_are_greedy_and_hidden_matches(target, tmp_path):
    config = DistillConfig(out=str(tmp_path / "d"), max_new_tokens=12, batch_size=3, shard_size=2)
    run_distill(config, target, {"train": PROMPTS[:4], "heldout": PROMPTS[4:]}, progress=False)
    samples = list(iter_samples(tmp_path / "d", "train"))
    assert [s.prompt_len for s in samples] == [4, 7, 2, 6]
    for sample, prompt in zip(samples, PROMPTS):
        assert sample.input_ids[: len(prompt)].tolist() == prompt
        response = sample.input_ids[len(prompt):].tolist()
        assert response == plain_greedy(target.model, prompt, 12, target.eos_ids)
        with torch.inference_mode():
            expected = target.decoder(input_ids=sample.input_ids[None]).last_hidden_state[0]
        assert sample.hidden.shape == expected.shape
        torch.testing.assert_close(sample.hidden.float(), expected, atol=2e-3, rtol=2e-3)  # stored as fp16
    assert len(list(iter_samples(tmp_path / "d", "heldout"))) == 1
    manifest = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert manifest["shards"]["train"] == ["train/shard-00000.safetensors", "train/shard-00001.safetensors"]
    assert manifest["counts"]["train"]["samples"] == 4


def test_resume_skips_finished_shards_and_refuses_other_settings(target, tmp_path):
    config = DistillConfig(out=str(tmp_path / "d"), max_new_tokens=8, batch_size=2, shard_size=2)
    run_distill(config, target, {"train": PROMPTS}, progress=False)
    first = [s.input_ids.tolist() for s in iter_samples(tmp_path / "d", "train")]
    manifest_path = tmp_path / "d" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    finished = tmp_path / "d" / manifest["shards"]["train"][0]
    stamp = finished.stat().st_mtime_ns
    manifest["shards"]["train"] = manifest["shards"]["train"][:1]  # as if killed after the first shard
    manifest_path.write_text(json.dumps(manifest))
    run_distill(config, target, {"train": PROMPTS}, progress=False)
    assert finished.stat().st_mtime_ns == stamp
    assert [s.input_ids.tolist() for s in iter_samples(tmp_path / "d", "train")] == first
    with pytest.raises(SpecbenchError, match="other settings"):
        run_distill(DistillConfig(out=str(tmp_path / "d"), max_new_tokens=9, batch_size=2, shard_size=2), target,
                    {"train": PROMPTS}, progress=False)


def test_a_cache_grows_with_more_training_prompts(target, tmp_path):
    def config(train: int, out: str) -> DistillConfig:
        return DistillConfig(out=str(tmp_path / out), train=train, max_new_tokens=8, batch_size=2, shard_size=2)

    run_distill(config(3, "d"), target, {"train": PROMPTS[:3]}, progress=False)  # shards of 2 and 1 samples
    full_shard = tmp_path / "d" / "train" / "shard-00000.safetensors"
    stamp = full_shard.stat().st_mtime_ns
    run_distill(config(5, "d"), target, {"train": PROMPTS}, progress=False)
    run_distill(config(5, "fresh"), target, {"train": PROMPTS}, progress=False)
    assert full_shard.stat().st_mtime_ns == stamp  # the full shard is kept, the partial one redone
    grown = [s.input_ids.tolist() for s in iter_samples(tmp_path / "d", "train")]
    assert grown == [s.input_ids.tolist() for s in iter_samples(tmp_path / "fresh", "train")]
    manifests = [json.loads((tmp_path / out / "manifest.json").read_text()) for out in ("d", "fresh")]
    assert manifests[0]["config"]["train"] == 5
    for key in ("samples", "tokens", "response_tokens"):
        assert manifests[0]["counts"]["train"][key] == manifests[1]["counts"]["train"][key]
    with pytest.raises(SpecbenchError, match="only --train may grow"):
        run_distill(config(4, "d"), target, {"train": PROMPTS[:4]}, progress=False)


def test_sharegpt_parser_stops_at_the_cut():
    text = ('[{"conversations": [{"from": "human", "value": " hi "}]}, {"conversations": [{"from": "gpt", "value": "x"}]},'
            '\n {"conversations": [{"from": "hum')
    items = list(iter_items(text))
    assert len(items) == 2
    assert first_human_turn(items[0]) == "hi" and first_human_turn(items[1]) is None


def test_conversations_keep_every_human_turn_and_the_first_of_a_repeated_first_turn(tmp_path):
    def conversation(*turns):
        return {"conversations": [{"from": speaker, "value": text} for turn in turns
                                  for speaker, text in (("human", turn), ("gpt", "ok"))]}

    items = [conversation("a", " b ", "c"), conversation("a", "other"), conversation("d", "", "e"), {"conversations": []}]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(items)[:-1] + ', {"conversations": [{"from": "hu')  # cut, as the packaged file is
    assert conversations_by_first_turn(path) == {"a": ["a", "b", "c"], "d": ["d"]}


def test_tokens_only_cache_seeds_a_full_cache(target, tmp_path):
    """A tokens-only cache (the committable half) holds the same responses; a full cache made from it
    generates nothing and equals one made from scratch; prompts that differ are generated, not reused."""
    def config(out: str) -> DistillConfig:
        return DistillConfig(out=str(tmp_path / out), max_new_tokens=8, batch_size=2, shard_size=2)

    prompts = {"train": PROMPTS[:4], "heldout": PROMPTS[4:]}
    run_distill(config("tokens"), target, prompts, progress=False, tokens_only=True)
    tokens_manifest = json.loads((tmp_path / "tokens" / "manifest.json").read_text())
    assert tokens_manifest["shards"]["train"] == [] and len(tokens_manifest["token_shards"]["train"]) == 2
    assert not list((tmp_path / "tokens").rglob("shard-*"))
    run_distill(config("full"), target, prompts, progress=False)
    run_distill(config("seeded"), target, prompts, progress=False, tokens_from=tmp_path / "tokens")
    seeded = json.loads((tmp_path / "seeded" / "manifest.json").read_text())
    assert seeded["counts"]["train"]["generate_seconds"] == 0.0  # nothing generated
    for split in ("train", "heldout"):
        full = list(iter_samples(tmp_path / "full", split))
        reused = list(iter_samples(tmp_path / "seeded", split))
        assert [s.input_ids.tolist() for s in full] == [s.input_ids.tolist() for s in reused]
        for a, b in zip(full, reused):
            torch.testing.assert_close(a.hidden, b.hidden)
    other = {"train": [PROMPTS[1], PROMPTS[0], *PROMPTS[2:4]]}  # first shard's prompts differ: regenerated
    run_distill(config("other"), target, other, progress=False, tokens_from=tmp_path / "tokens")
    assert json.loads((tmp_path / "other" / "manifest.json").read_text())["counts"]["train"]["generate_seconds"] > 0
    with pytest.raises(SpecbenchError, match="other settings"):
        run_distill(DistillConfig(out=str(tmp_path / "x"), max_new_tokens=9, batch_size=2, shard_size=2), target,
                    prompts, progress=False, tokens_from=tmp_path / "tokens")


def test_a_token_cache_gives_back_its_prompts(target, tmp_path):
    """`--tokens-from` reads the prompts from the token cache (no ShareGPT needed): the same prompts in the
    same order, so the hidden-state cache made from them reuses every token shard; asking for more
    training prompts than it holds is refused with one line, not generated."""
    prompts = {"train": PROMPTS[:4], "heldout": PROMPTS[4:]}
    made = DistillConfig(out=str(tmp_path / "tokens"), max_new_tokens=8, batch_size=2, shard_size=2)
    run_distill(made, target, prompts, progress=False, tokens_only=True)
    assert prompts_in_tokens(tmp_path / "tokens", None, len(PROMPTS[4:])) == prompts
    assert prompts_in_tokens(tmp_path / "tokens", 3, 1) == {"train": PROMPTS[:3], "heldout": PROMPTS[4:5]}
    read_back = prompts_in_tokens(tmp_path / "tokens", None, len(PROMPTS[4:]))
    config = DistillConfig(out=str(tmp_path / "full"), max_new_tokens=8, batch_size=2, shard_size=2)
    run_distill(config, target, read_back, progress=False, tokens_from=tmp_path / "tokens")
    assert json.loads((tmp_path / "full" / "manifest.json").read_text())["counts"]["train"]["generate_seconds"] == 0.0
    with pytest.raises(SpecbenchError, match="holds 4 train prompts, fewer than the 5"):
        prompts_in_tokens(tmp_path / "tokens", 5, 1)
    with pytest.raises(SpecbenchError, match="not a distillation cache"):
        prompts_in_tokens(tmp_path, None, 1)


def test_batches_spanning_shards_make_the_same_cache(target, tmp_path):
    """A GPU-sized batch (several shards per generation batch) makes the same token files as one shard at
    a time; the batch size may change when a cache is resumed, and each sitting is recorded."""
    def config(out: str, batch_size: int) -> DistillConfig:
        return DistillConfig(out=str(tmp_path / out), max_new_tokens=10, batch_size=batch_size, shard_size=2)

    prompts = {"train": PROMPTS, "heldout": PROMPTS[:1]}
    run_distill(config("small", 1), target, prompts, progress=False, tokens_only=True)
    run_distill(config("wide", 5), target, {"train": PROMPTS[:2]}, progress=False, tokens_only=True)
    run_distill(config("wide", 5), target, prompts, progress=False, tokens_only=True)  # resumed, batches of 2 shards
    small, wide = (json.loads((tmp_path / out / "manifest.json").read_text()) for out in ("small", "wide"))
    assert wide["token_shards"] == small["token_shards"]
    assert wide["counts"]["train"]["response_tokens"] == small["counts"]["train"]["response_tokens"]
    for name in small["token_shards"]["train"] + small["token_shards"]["heldout"]:
        a, b = (load_file(str(tmp_path / out / name)) for out in ("small", "wide"))
        assert all(torch.equal(a[key], b[key]) for key in a)
    assert [s["token_shards_made"] for s in wide["sittings"]] == [1, 3]  # shard 0, then 1-2 and the held-out one
    assert wide["sittings"][0]["device"] == "cpu" and wide["sittings"][0]["batch_size"] == 5
    finished = (tmp_path / "wide" / "manifest.json").read_bytes()
    run_distill(config("wide", 3), target, prompts, progress=False, tokens_only=True)  # nothing left to make
    assert (tmp_path / "wide" / "manifest.json").read_bytes() == finished
