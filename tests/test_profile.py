"""Verify-cost profiles: measured on a tiny model, cached per machine key, loaded from a file, checked
(one-line errors for bad files), interpolated, and recorded in a run's manifest."""

from __future__ import annotations

import json

import pytest

from conftest import build_tiny_model, make_target
from specbench.errors import SpecbenchError
from specbench.harness.autobudget.profile import (
    VerifyProfile,
    cache_path,
    cached_profile,
    load_profile,
    measure_profile,
    profile_key,
    save_profile,
)
from test_cli import assert_one_line_error, cli_in_process


def synthetic(ms_chain, ms_bushy=None, sizes=(1, 2, 4, 8)) -> VerifyProfile:
    ms = {"chain": list(ms_chain)} | ({"bushy": list(ms_bushy)} if ms_bushy else {})
    return VerifyProfile(key={"model": "m", "model_sha256": "0" * 64, "device": "cpu", "device_name": "x",
                              "dtype": "float32", "threads": 2, "torch": "2"}, sizes=list(sizes), ms=ms)


def test_measured_on_a_tiny_model_round_trips_and_is_cached_by_key(tmp_path):
    target = make_target(build_tiny_model("llama"))
    profile = measure_profile(target, sizes=[1, 3, 8], shapes=["chain", "bushy"], prefix=20, repeats=2, warmup=1)
    assert profile.sizes == [1, 3, 8] and set(profile.ms) == {"chain", "bushy"}
    assert all(len(v) == 3 and min(v) > 0 for v in profile.ms.values())
    assert profile.key == profile_key(target) and profile.key["device"] == "cpu"
    assert cached_profile(target, tmp_path) is None
    path = save_profile(profile, cache_path(profile.key, tmp_path))
    assert cached_profile(target, tmp_path) == load_profile(path) == profile
    other_threads = profile.key | {"threads": profile.key["threads"] + 1}
    assert cache_path(other_threads, tmp_path) != path
    assert "| 8 |" in profile.table()


def test_shapes_that_build_the_same_tree_share_one_median():
    """1 and 2 nodes are the same forward in every shape: their samples are pooled, so the shapes' ratios
    to one node share a denominator; different trees keep their own timings."""
    target = make_target(build_tiny_model("llama"))
    profile = measure_profile(target, sizes=[1, 2, 3, 8], shapes=["chain", "bushy"], prefix=20, repeats=3, warmup=1)
    chain, bushy = profile.ms["chain"], profile.ms["bushy"]
    assert chain[:2] == bushy[:2]
    assert chain[2:] != bushy[2:]


class ScriptedForwards:
    """A stand-in for `profile.single_forward`: each tree's ms by node count (``ms_by_nodes``), one node costing
    ``slow_one`` for its first ``slow_calls`` forwards (a slow stretch at the start of a sitting) and
    ``ms_by_nodes[1]`` after."""

    def __init__(self, ms_by_nodes: dict[int, float], slow_one: float, slow_calls: int) -> None:
        self.ms_by_nodes, self.slow_one, self.slow_calls, self.one_calls = ms_by_nodes, slow_one, slow_calls, 0

    def __call__(self, target, prefix):
        def forward(tree) -> float:
            if len(tree) > 1:
                return self.ms_by_nodes[len(tree)]
            self.one_calls += 1
            return self.slow_one if self.one_calls <= self.slow_calls else self.ms_by_nodes[1]
        return forward


def test_a_tree_timed_below_one_node_is_timed_again_and_pooled(monkeypatch):
    """One node timed slow for the first rounds (2 nodes at 0.6x it): more rounds are timed and pooled until no
    size is under 0.9x one node, so the 1-node median is the machine's settled one and 2 nodes cost 1.1x it."""
    from specbench.harness.autobudget import profile as module

    scripted = ScriptedForwards({1: 10.0, 2: 11.0, 4: 14.0}, slow_one=20.0, slow_calls=1 + 3)
    monkeypatch.setattr(module, "single_forward", scripted)
    profile = measure_profile(make_target(build_tiny_model("llama")), sizes=[1, 2, 4], shapes=["chain"],
                              prefix=4, repeats=3, warmup=1)
    assert module.below_one_node({"chain": [20.0, 11.0, 14.0]}) == [("chain", 1), ("chain", 2)]
    assert profile.repeats == 9  # the first 3 rounds, then two more sets of 3: 3 slow and 6 settled samples
    assert profile.ms["chain"] == [10.0, 11.0, 14.0]
    assert profile.relative(2) == pytest.approx(1.1)


def test_a_kernel_really_cheaper_at_more_rows_keeps_its_shape_after_the_extra_rounds(monkeypatch):
    """When a size stays below one node (a kernel's path switch, not noise), the extra rounds stop after
    `EXTRA_ROUND_SETS` and the profile keeps what was measured; a plausible profile takes no extra round."""
    from specbench.harness.autobudget import profile as module

    monkeypatch.setattr(module, "single_forward", ScriptedForwards({1: 10.0, 2: 6.0}, slow_one=10.0, slow_calls=0))
    target = make_target(build_tiny_model("llama"))
    cheaper = measure_profile(target, sizes=[1, 2], shapes=["chain"], prefix=4, repeats=2, warmup=1)
    assert cheaper.repeats == 2 * (1 + module.EXTRA_ROUND_SETS) and cheaper.ms["chain"] == [10.0, 6.0]
    monkeypatch.setattr(module, "single_forward", ScriptedForwards({1: 10.0, 2: 9.5}, slow_one=10.0, slow_calls=0))
    plausible = measure_profile(target, sizes=[1, 2], shapes=["chain"], prefix=4, repeats=2, warmup=1)
    assert plausible.repeats == 2 and plausible.ms["chain"] == [10.0, 9.5]


def test_cost_is_interpolated_between_sizes_and_averaged_over_shapes():
    profile = synthetic([10, 12, 16, 24], [10, 14, 18, 30])
    assert profile.cost_ms(1, "chain") == 10 and profile.cost_ms(4, "bushy") == 18
    assert profile.cost_ms(3, "chain") == pytest.approx(14)  # halfway between 2 (12) and 4 (16)
    assert profile.cost_ms(16, "chain") == pytest.approx(40)  # the last segment's slope, extended
    assert profile.cost_ms(2) == pytest.approx(13)  # mean of the shapes
    assert profile.relative(8, "chain") == pytest.approx(2.4)
    with pytest.raises(ValueError):
        profile.cost_ms(0)


@pytest.mark.parametrize("content, fragment", [
    ("not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    (json.dumps(synthetic([1, 2, 3, 4]).to_json() | {"format": 99}), "format 99"),
    (json.dumps(synthetic([1, 2, 3, 4]).to_json() | {"sizes": [2, 1, 4, 8]}), "increasing"),
    (json.dumps(synthetic([1, 2, 3, 4]).to_json() | {"sizes": [0, 1, 4, 8]}), "tree sizes >= 1"),
    (json.dumps(synthetic([1, 2, 3, 4]).to_json() | {"ms": {"chain": [1, 2]}}), "one time per size"),
    (json.dumps(synthetic([1, 2, 3, 4]).to_json() | {"ms": {"chain": [1, -2, 3, 4]}}), "positive milliseconds"),
    (json.dumps({k: v for k, v in synthetic([1, 2, 3, 4]).to_json().items() if k != "key"}), "no 'key'"),
])
def test_bad_profile_files_are_one_line_errors(content, fragment, tmp_path):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(SpecbenchError, match=fragment):
        load_profile(path)
    assert_one_line_error(cli_in_process("run", "--drafters", "vanilla", "--profile", str(path), "--out", str(tmp_path / "o")),
                          "is not a verify-cost profile", fragment)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("args, fragment", [
    (["--sizes", "0,2"], "--sizes must be tree sizes"),
    (["--sizes", "1,x"], "--sizes must be comma-separated integers"),
    (["--shapes", "star"], "--shapes must be from chain, bushy"),
    (["--repeats", "0"], "--repeats must be at least 1"),
])
def test_bad_profile_command_input_is_one_line(args, fragment):
    assert_one_line_error(cli_in_process("profile", *args), fragment)


def test_a_run_records_the_profile_it_was_given(tmp_path):
    from specbench.harness.runner import Run, RunConfig
    from specbench.model import TargetModel
    from test_export import char_bpe_tokenizer

    given = save_profile(synthetic([5, 6, 7, 9]), tmp_path / "gpu.json")
    target = TargetModel(build_tiny_model("llama"), char_bpe_tokenizer(tmp_path / "tok"))
    config = RunConfig(out=str(tmp_path / "run"), drafters=["vanilla"], bench="demo", categories=["math"], limit=1,
                       max_new_tokens=4, warmup=False, profile=str(given))
    Run(config, progress=False, target=target).execute()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["profile"]["source"] == str(given) and manifest["profile"]["ms"]["chain"] == [5, 6, 7, 9]
    assert manifest["config"]["profile"] == str(given)
    assert "below_one_node" not in manifest["profile"]


def test_a_read_profile_with_a_tree_below_one_node_is_used_with_one_warning_and_recorded(tmp_path, capsys):
    """A profile that is read, not measured (``--profile`` here; a cached one the same way), and times 2 nodes at
    0.84x one node (the EPYC main job's profile) is still used, but `resolve_profile` warns once per source and
    process, naming the file, the size and its ratio, and the run's manifest records the cell."""
    from specbench.harness.autobudget.profile import implausible_note, resolve_profile
    from specbench.harness.runner import Run, RunConfig
    from specbench.model import TargetModel
    from test_export import char_bpe_tokenizer

    assert implausible_note(synthetic([10.0, 9.5, 12.0, 15.0]), "x.json") is None
    cheap = save_profile(synthetic([54.5, 45.8, 50.0, 60.0], [54.5, 45.8, 52.0, 70.0]), tmp_path / "cheap.json")
    profile, source = resolve_profile(str(cheap), target=None)
    assert source == str(cheap) and profile.ms["chain"][1] == 45.8
    warning = capsys.readouterr().err.strip().splitlines()
    assert len(warning) == 1 and str(cheap) in warning[0] and "2-node trees below one node" in warning[0]
    assert "2 nodes chain at 0.84x" in warning[0] and "specbench profile --force" in warning[0]
    resolve_profile(str(cheap), target=None)
    assert capsys.readouterr().err == ""  # once per source

    target = TargetModel(build_tiny_model("llama"), char_bpe_tokenizer(tmp_path / "tok"))
    config = RunConfig(out=str(tmp_path / "run"), drafters=["vanilla"], bench="demo", categories=["math"], limit=1,
                       max_new_tokens=4, warmup=False, profile=str(cheap))
    Run(config, progress=False, target=target).execute()
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["profile"]["below_one_node"] == [["chain", 2, 0.84], ["bushy", 2, 0.84]]
