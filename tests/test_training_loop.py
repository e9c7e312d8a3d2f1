"""The one training loop and the training configs' checks.

Every method (medusa, hydra, ctc, ctc-ce, eagle) trains through `common.train_loop`: it is the only place an
optimiser step happens, and what differs between methods is behind its `EpochBatches` seam. A run resumed
after an epoch ends with the weights of an uninterrupted one. Each config's `validate` refuses a bad value
with one line naming its flag, before any data is read."""

from __future__ import annotations

import math
import shutil

import pytest
import torch
from safetensors.torch import load_file
from torch.optim.optimizer import register_optimizer_step_pre_hook

from conftest import distil_random_prompts
from specbench.checkpoint import checkpoint_files
from specbench.drafters.speculators import default_layer_ids
from specbench.drafters.training import common, config_class, config_classes, ctc, eagle, eagle3, heads, refuse_others_options
from specbench.drafters.training.ctc import CTCTrainConfig, train_ctc
from specbench.drafters.training.eagle import EagleTrainConfig, train_eagle
from specbench.drafters.training.eagle3 import Eagle3TrainConfig, train_eagle3
from specbench.drafters.training.heads import HeadTrainConfig, train_heads
from specbench.errors import SpecbenchError


@pytest.fixture(scope="module")
def cache(llama_target, tmp_path_factory):
    layer_ids = default_layer_ids(llama_target.config.num_hidden_layers)  # eagle3's states too; others ignore them
    return distil_random_prompts(llama_target, tmp_path_factory.mktemp("distill"), seed=0, aux_layers=layer_ids)


def run(method: str, cache, out, epochs: int = 2, **options):
    """Train ``method`` briefly on ``cache`` into ``out``; returns (trainer, config)."""
    if method in ("medusa", "hydra"):
        config = HeadTrainConfig(method=method, cache=str(cache), out=str(out), num_heads=2, epochs=epochs, lr=3e-3,
                                 batch_size=64, warmup_steps=2, max_rank=3, **options)
        return train_heads, config
    if method == "eagle":
        return train_eagle, EagleTrainConfig(cache=str(cache), out=str(out), epochs=epochs, lr=3e-3, samples_per_step=3,
                                             warmup_steps=2, **options)
    if method == "eagle3":
        return train_eagle3, Eagle3TrainConfig(cache=str(cache), out=str(out), epochs=epochs, lr=3e-3, samples_per_step=3,
                                               warmup_steps=2, draft_vocab=50, **options)
    return train_ctc, CTCTrainConfig(method=method, cache=str(cache), out=str(out), epochs=epochs, lr=3e-3,
                                     samples_per_step=3, warmup_steps=2, eval_budgets=[4], **options)


METHODS = [("medusa", {}, heads.HeadBatches), ("hydra", {"loss": "teacher"}, heads.HeadBatches),
           ("hydra", {"prefix_heads": 2}, heads.HeadBatches), ("ctc", {"packed": False}, common.SampleBatches),
           ("ctc", {"packed": True}, common.SampleBatches), ("ctc-ce", {}, common.SampleBatches),
           ("eagle", {}, common.CurveBatches), ("eagle3", {"ttt_steps": 3}, common.CurveBatches)]


@pytest.mark.parametrize("method, options, seam", METHODS)
def test_every_method_steps_its_optimiser_only_inside_the_one_loop(method, options, seam, llama_target, cache,
                                                                   tmp_path, monkeypatch):
    """Wrap `train_loop` wherever a trainer can reach it and watch every optimiser step: each one happens
    inside the loop, one per batch of the method's seam, for every epoch."""
    real, inside, calls, steps = common.train_loop, [False], [], []

    def spy(module, data, target, config, progress=True):
        inside[0] = True
        try:
            return real(module, data, target, config, progress)
        finally:
            inside[0] = False
            calls.append((config.method, data))

    for module in (common, heads, ctc, eagle, eagle3):
        monkeypatch.setattr(module, "train_loop", spy)
    handle = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: steps.append(inside[0]))
    try:
        train, config = run(method, cache, tmp_path / method, **options)
        train(config, llama_target, progress=False)
    finally:
        handle.remove()
    assert [(m, type(data)) for m, data in calls] == [(method, seam)]
    data = calls[0][1]
    assert data.steps > 1 and steps == [True] * (data.steps * config.epochs)


@pytest.mark.parametrize("method, options", [("medusa", {}), ("hydra", {"prefix_heads": 2}), ("ctc", {}),
                                             ("eagle", {"unroll": 2}), ("eagle3", {"ttt_steps": 2})])
def test_a_run_resumed_after_an_epoch_ends_with_the_uninterrupted_weights(method, options, llama_target, cache,
                                                                           tmp_path):
    """The data order and the methods' own random draws depend on the epoch alone, and the optimiser and
    schedule are checkpointed: resuming after epoch 1 of 3 gives the same weights, bit for bit."""
    train, config = run(method, cache, tmp_path / method, epochs=3, **options)
    recipe = train(config, llama_target, progress=False)
    weights = checkpoint_files(tmp_path / method)[0]
    shutil.copy(weights, tmp_path / "uninterrupted.safetensors")
    for epoch in (2, 3):
        (tmp_path / f"{method}.epoch{epoch}.pt").unlink()
    resumed = train(config, llama_target, progress=False)
    first, again = load_file(tmp_path / "uninterrupted.safetensors"), load_file(weights)
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    assert resumed["history"] == recipe["history"] and len(recipe["history"]) == 3


@pytest.mark.parametrize("method, options", [("hydra", {}), ("ctc", {}), ("eagle", {}), ("eagle3", {"ttt_steps": 2})])
@pytest.mark.parametrize("stop_at", [(0, 1), (1, 2)])
def test_a_run_stopped_within_an_epoch_resumes_there_with_the_uninterrupted_weights(method, options, stop_at,
                                                                                     llama_target, cache, tmp_path,
                                                                                     monkeypatch):
    """A partial checkpoint every step (``checkpoint_steps=1``); the run is stopped right after the one
    ``stop_at`` = (epoch, steps) is written, in the first epoch or the second. The rerun resumes from it:
    the skipped steps are not trained again, the losses' own random draws (eagle's noise, ctc's anchors)
    go on from where they were, and the weights, history and learning curve equal an uninterrupted run's."""
    whole_steps, steps = [], []
    train, config = run(method, cache, tmp_path / "whole", checkpoint_steps=1, **options)
    handle = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: whole_steps.append(1))
    try:
        recipe = train(config, llama_target, progress=False)
    finally:
        handle.remove()
    assert not (tmp_path / "whole.partial.pt").exists()  # dropped at the epoch's end
    per_epoch = len(whole_steps) // config.epochs

    real = common.EpochCheckpoints.save_partial

    def stop_after(self, epoch, done, *args):
        real(self, epoch, done, *args)
        if (epoch, done) == stop_at:
            raise KeyboardInterrupt

    monkeypatch.setattr(common.EpochCheckpoints, "save_partial", stop_after)
    train, config = run(method, cache, tmp_path / "stopped", checkpoint_steps=1, **options)
    with pytest.raises(KeyboardInterrupt):
        train(config, llama_target, progress=False)
    monkeypatch.undo()
    assert (tmp_path / "stopped.partial.pt").exists()
    if method in ("eagle", "eagle3"):  # scripts/learning_curve.py reads the points so far from the newest checkpoint
        so_far, source = learning_curve.points(tmp_path / "stopped")
        assert source == "stopped.partial.pt" and so_far == recipe["metrics"]["curve"][1 : len(so_far) + 1]
        assert len(so_far) == stop_at[0] * per_epoch + stop_at[1]  # a point per step here: one per checkpoint
    handle = register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: steps.append(1))
    try:
        resumed = train(config, llama_target, progress=False)
    finally:
        handle.remove()
    # every step after the checkpoint is trained, none before it
    assert per_epoch > 2 and len(steps) == len(whole_steps) - (stop_at[0] * per_epoch + stop_at[1])
    first = load_file(checkpoint_files(tmp_path / "whole")[0])
    again = load_file(checkpoint_files(tmp_path / "stopped")[0])
    assert first.keys() == again.keys() and all(torch.equal(first[k], again[k]) for k in first)
    assert resumed["history"] == recipe["history"]
    if method in ("eagle", "eagle3"):
        curve = recipe["metrics"]["curve"]
        assert resumed["metrics"]["curve"] == curve and len(curve) > 1 + config.epochs  # points within epochs kept
        assert [point["tokens_seen"] for point in curve] == sorted(point["tokens_seen"] for point in curve)


def test_the_history_rows_keep_each_methods_keys(llama_target, cache, tmp_path):
    """Recipes written before the loop was shared read the same: per-head losses for the heads, per-step
    means for the sample-level methods."""
    train, config = run("hydra", cache, tmp_path / "h", epochs=1)
    row = train(config, llama_target, progress=False)["history"][0]
    assert set(row) == {"epoch", "train_loss_per_head", "first_batch_loss", "last_batch_loss"}
    assert len(row["train_loss_per_head"]) == len(row["first_batch_loss"]) == 2
    train, config = run("eagle", cache, tmp_path / "e", epochs=1)
    row = train(config, llama_target, progress=False)["history"][0]
    losses = {"epoch", "train_loss", "first_tenth_loss", "last_tenth_loss"}
    curve = {"tokens_seen", "heldout_depth_top1", "heldout_chain", "heldout_chain_tau", "heldout_chain_anchors"}
    assert set(row) == losses | curve  # and eagle's learning curve, as eagle3's
    assert all(math.isfinite(row[key]) for key in losses)


def _script(name: str):
    """A module of ``scripts/`` (not a package), loaded from its file."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


learning_curve = _script("learning_curve")
BASE = {"cache": "c", "out": "o"}
BAD = [
    (HeadTrainConfig, {"method": "medusa", "epochs": 0}, "--epochs must be at least 1, not 0"),
    (HeadTrainConfig, {"method": "medusa", "lr": -1e-3}, "--lr must be 0 or more, not -0.001"),
    (HeadTrainConfig, {"method": "medusa", "lr": float("nan")}, "--lr must be 0 or more, not nan"),
    (HeadTrainConfig, {"method": "medusa", "weight_decay": -1.0}, "--weight-decay must be 0 or more"),
    (HeadTrainConfig, {"method": "medusa", "warmup_steps": -1}, "--warmup-steps must be 0 or more"),
    (HeadTrainConfig, {"method": "medusa", "dtype": "float16"}, "--dtype must be one of float32, bfloat16, not 'float16'"),
    (HeadTrainConfig, {"method": "medusa", "train_vocab": -1}, "--train-vocab must be 0 (all tokens) or a token count"),
    (HeadTrainConfig, {"method": "eagle"}, "unknown head method 'eagle'; choose medusa, hydra"),
    (HeadTrainConfig, {"method": "medusa", "num_heads": 0}, "--num-heads must be at least 1, not 0"),
    (HeadTrainConfig, {"method": "hydra", "num_layers": 0}, "--num-layers must be at least 1, not 0"),
    (HeadTrainConfig, {"method": "medusa", "batch_size": 0}, "--batch-size must be at least 1, not 0"),
    (HeadTrainConfig, {"method": "medusa", "max_rank": 0}, "--max-rank must be at least 1, not 0"),
    (HeadTrainConfig, {"method": "medusa", "max_train_positions": 0}, "--max-train-positions must be at least 1"),
    (HeadTrainConfig, {"method": "hydra", "prefix_heads": -1}, "--prefix-heads must be 0 or more, not -1"),
    (HeadTrainConfig, {"method": "medusa", "head_decay": 0.0}, "--head-decay must be positive, not 0.0"),
    (HeadTrainConfig, {"method": "hydra", "loss": "soft"}, "--loss must be greedy or teacher, not 'soft'"),
    (HeadTrainConfig, {"method": "medusa", "prefix_heads": 2}, "prefix attention (--prefix-heads) is a hydra option"),
    (HeadTrainConfig, {"method": "hydra", "freeze_loaded": True}, "--freeze-loaded needs --init-from"),
    (CTCTrainConfig, {"method": "medusa"}, "unknown CTC method 'medusa'; choose ctc, ctc-ce"),
    (CTCTrainConfig, {"method": "ctc", "epochs": -2}, "--epochs must be at least 1, not -2"),
    (CTCTrainConfig, {"method": "ctc", "num_slots": 0}, "--num-slots must be at least 1, not 0"),
    (CTCTrainConfig, {"method": "ctc-ce", "num_labels": 0}, "--num-labels must be at least 1, not 0"),
    (CTCTrainConfig, {"method": "ctc", "samples_per_step": 0}, "--samples-per-step must be at least 1, not 0"),
    (CTCTrainConfig, {"method": "ctc", "max_train_samples": 0}, "--max-train-samples must be at least 1, not 0"),
    (CTCTrainConfig, {"method": "ctc", "anchors_per_sample": -1}, "--anchors-per-sample must be 0 (all) or more"),
    (CTCTrainConfig, {"method": "ctc", "num_labels": 4}, "--num-labels (4) must be below --num-slots (4) for CTC"),
    (CTCTrainConfig, {"method": "ctc", "top_k": 0}, "--top-k must be at least 1, not 0"),
    (CTCTrainConfig, {"method": "ctc", "beam": 0}, "--beam must be at least 1, not 0"),
    (CTCTrainConfig, {"method": "ctc", "min_prob": 1.0}, "--min-prob must be in [0, 1), not 1.0"),
    (CTCTrainConfig, {"method": "ctc", "eval_budgets": []}, "--eval-budgets must be tree budgets of at least 1"),
    (CTCTrainConfig, {"method": "ctc", "eval_budgets": [4, 0]}, "--eval-budgets must be tree budgets of at least 1"),
    (EagleTrainConfig, {"method": "ctc"}, "EagleTrainConfig trains eagle, not 'ctc'"),
    (EagleTrainConfig, {"unroll": 0}, "--unroll must be at least 1, not 0"),
    (EagleTrainConfig, {"noise": -1.0}, "--noise must be 0 (none) or positive, not -1.0"),
    (EagleTrainConfig, {"inner": 0}, "--inner must be at least 1, not 0"),
    (EagleTrainConfig, {"token_weight": -0.1}, "--token-weight must be 0 or more, not -0.1"),
    (EagleTrainConfig, {"samples_per_step": 0}, "--samples-per-step must be at least 1, not 0"),
    (EagleTrainConfig, {"train_vocab": -5}, "--train-vocab must be 0 (all tokens) or a token count"),
]


@pytest.mark.parametrize("cls, fields, message", BAD, ids=[f"{c.__name__}-{'-'.join(f)}" for c, f, _ in BAD])
def test_each_bad_value_gets_its_one_line_error(cls, fields, message):
    config = cls(**BASE | fields)
    with pytest.raises(SpecbenchError) as refused:
        config.validate()
    assert str(refused.value).startswith(message) and "\n" not in str(refused.value)


@pytest.mark.parametrize("cls, fields", [(HeadTrainConfig, {"method": "medusa"}), (HeadTrainConfig, {"method": "hydra"}),
                                         (CTCTrainConfig, {"method": "ctc"}), (CTCTrainConfig, {"method": "ctc-ce"}),
                                         (EagleTrainConfig, {}),
                                         (CTCTrainConfig, {"method": "ctc-ce", "num_labels": 4, "anchors_per_sample": 0,
                                                           "beam": None, "max_train_samples": None}),
                                         (HeadTrainConfig, {"method": "hydra", "prefix_heads": 4, "lr": 0.0,
                                                            "init_from": "x", "freeze_loaded": True, "warmup_steps": 0}),
                                         (EagleTrainConfig, {"noise": 0.0, "unroll": 3, "dtype": "bfloat16"})])
def test_defaults_and_edge_values_pass(cls, fields):
    cls(**BASE | fields).validate()


def test_the_configs_share_their_common_fields():
    shared = {"method", "cache", "out", "epochs", "lr", "weight_decay", "warmup_steps", "seed", "dtype", "train_vocab"}
    for cls in (HeadTrainConfig, CTCTrainConfig, EagleTrainConfig):
        assert issubclass(cls, common.TrainConfig) and shared <= set(cls.__dataclass_fields__)
    for cls in (CTCTrainConfig, EagleTrainConfig):
        assert issubclass(cls, common.SampleTrainConfig)
    assert (HeadTrainConfig(method="hydra", **BASE).epochs, CTCTrainConfig(method="ctc", **BASE).epochs,
            EagleTrainConfig(**BASE).epochs) == (2, 4, 4)


@pytest.mark.parametrize("train, config", [
    (train_heads, HeadTrainConfig(method="hydra", cache="missing", out="x", num_heads=0)),
    (train_ctc, CTCTrainConfig(method="ctc", cache="missing", out="x", num_slots=2, num_labels=2)),
    (train_eagle, EagleTrainConfig(cache="missing", out="x", unroll=0)),
])
def test_trainers_validate_before_reading_anything(train, config, llama_target):
    with pytest.raises(SpecbenchError, match="^--num-heads|^--num-labels|^--unroll"):
        train(config, llama_target, progress=False)


def test_methods_map_to_their_configs_and_others_options_are_refused():
    assert {m: c.__name__ for m, c in config_classes().items()} == {
        "medusa": "HeadTrainConfig", "hydra": "HeadTrainConfig", "ctc": "CTCTrainConfig", "ctc-ce": "CTCTrainConfig",
        "eagle": "EagleTrainConfig", "eagle3": "Eagle3TrainConfig"}
    with pytest.raises(SpecbenchError, match="^unknown method 'nosuch' for train; choose one of medusa, hydra, ctc, "
                                             "ctc-ce, eagle, eagle3$"):
        config_class("nosuch")
    refused = [("ctc", {"freeze_loaded": True}, "--freeze-loaded is a medusa and hydra option, not ctc's"),
               ("eagle", {"own_lm_heads": True}, "--own-lm-heads is a medusa and hydra option, not eagle's"),
               ("medusa", {"noise": 0.5}, "--noise is an eagle option, not medusa's")]
    for method, options, message in refused:
        with pytest.raises(SpecbenchError, match=f"^{message}$"):
            refuse_others_options(method, **options)
    refuse_others_options("ctc", init_from="x", freeze_loaded=False, own_lm_heads=False)  # its own, or unset
    refuse_others_options("eagle", init_from=None, freeze_loaded=False, own_lm_heads=False)


def test_the_learning_curve_table_replaces_only_its_block(tmp_path):
    """`scripts/learning_curve.py --write` rewrites what lies between the curve markers, keeps the rest, and
    refuses a file without them."""
    point = {"epoch": 0.5, "tokens_seen": 1234567, "heldout_chain_tau": 1.6789, "heldout_chain": [0.4, 0.2]}
    lines = learning_curve.table([point], "run.partial.pt")
    assert lines[-1] == "| 0.5 | 1,234,567 | 1.679 | 0.400 / 0.200 |" and "run.partial.pt" in lines[0]
    readme = tmp_path / "README.md"
    readme.write_text("before\n<!-- curve -->\nold table\n<!-- /curve -->\nafter\n")
    learning_curve.write_between_markers(readme, lines)
    text = readme.read_text()
    assert "old table" not in text and text.startswith("before\n<!-- curve -->\n(read from")
    assert text.endswith("| 0.5 | 1,234,567 | 1.679 | 0.400 / 0.200 |\n<!-- /curve -->\nafter\n")
    (tmp_path / "plain.md").write_text("no markers\n")
    with pytest.raises(SystemExit, match="no <!-- curve -->"):
        learning_curve.write_between_markers(tmp_path / "plain.md", lines)


@pytest.mark.parametrize("method", ["medusa", "hydra", "ctc", "ctc-ce", "eagle", "eagle3"])
def test_the_command_line_hands_init_from_to_every_method(method):
    """`--init-from` reaches each method's config (eagle's was once parsed and dropped: its run started afresh)."""
    from specbench.harness.cli import build_parser
    from specbench.harness.cli.train import _train_config

    args = build_parser().parse_args(["train", method, "--init-from", "STEM"])
    assert _train_config(args, cache="c", out="o").init_from == "STEM"
