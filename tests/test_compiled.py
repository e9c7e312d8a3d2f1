"""The compiled regime (issue 42): static cache, trees padded to buckets, greedy acceptance on the device.

Most checks run the static code path without compiling it (``use_regime("compiled", compile=False)``: the
same cache, padding, masks and device rule, eagerly), which costs what the eager tests cost; a few tiny
cases go through ``torch.compile`` (inductor on the CPU), on one module-wide target so each bucket's graph
is compiled once for the module.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import EOS, PROMPTS, build_tiny_model, make_target, plain_greedy
from specbench import Drafter, DraftTree, static_cache
from specbench.errors import SpecbenchError
from specbench.harness.loop import generate
from specbench.registry import available_drafters
from specbench.static_cache import BUCKETS, TreeStaticCache, bucket_of, pad_tree, unpack_tree
from specbench.verify import greedy_path, greedy_select

pytestmark = [pytest.mark.usefixtures("single_thread"),  # inductor's import warns about torch.jit
              pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")]

REGISTERED = sorted(available_drafters())
BUDGETS = (1, 3, 16)  # 3 is padded to 4


@pytest.fixture
def static_regime(tiny_target):
    """``tiny_target`` in the compiled regime's static path (not compiled), put back to eager afterwards."""
    tiny_target.use_regime("compiled", compile=False, min_capacity=128)
    yield tiny_target
    tiny_target.use_regime("eager")


def random_tree(rng: random.Random, n: int, vocab: int = EOS) -> DraftTree:
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    return DraftTree(torch.tensor([rng.randrange(vocab) for _ in parents]), torch.tensor(parents))


# ---- the pieces ------------------------------------------------------------------------------------------
def test_buckets():
    assert [bucket_of(n) for n in (1, 2, 3, 4, 5, 16, 17, 64, 65)] == [1, 2, 4, 4, 8, 16, 32, 64, 128]
    assert BUCKETS == (1, 2, 4, 8, 16, 32, 64)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 20), seed=st.integers(0, 10**6), extra=st.integers(0, 12))
def test_device_rule_equals_the_greedy_rule(n, seed, extra):
    """`greedy_select` over a padded tree chooses `greedy_path`'s node and bonus, whatever the target's
    argmax (drawn from the tree's own tokens so that paths really get accepted); padding is never chosen."""
    rng = random.Random(seed)
    tree = random_tree(rng, n, vocab=4)
    bucket = n + extra
    tokens, parents, _, valid, ancestors = unpack_tree(pad_tree(tree, bucket))
    argmax = [rng.randrange(4) for _ in range(bucket)]
    best, bonus = greedy_select(tokens, parents, ancestors, valid, torch.tensor(argmax)).tolist()
    path = greedy_path(tree, argmax[:n])
    assert tree.path_to(best) == path and bonus == argmax[path[-1]]


def test_padding_is_unreachable():
    """No real node has a padding node among its ancestors, and padding nodes are not valid."""
    tree = random_tree(random.Random(0), 5)
    _, _, _, valid, ancestors = unpack_tree(pad_tree(tree, 8))
    assert valid.tolist() == [True] * 5 + [False] * 3
    assert not ancestors[:5, 5:].any()
    assert torch.equal(ancestors[:5, :5], tree.ancestor_mask())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10**6), steps=st.integers(1, 6))
def test_static_commit_equals_dynamic_commit(seed, steps):
    """Step for step, the same K/V rows written and the same path committed leave the static cache's
    prefix equal to the dynamic cache (`specbench.kv`) exactly."""
    from specbench import kv

    config = build_tiny_model("llama").config
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    layers, heads, dim = config.num_hidden_layers, config.num_key_value_heads, config.hidden_size // config.num_attention_heads
    dynamic, static = kv.new_cache(), TreeStaticCache(config, 64, "cpu", torch.float32)
    past = rng.randrange(1, 8)
    prefix = [(torch.randn(1, heads, past, dim, generator=gen), torch.randn(1, heads, past, dim, generator=gen))
              for _ in range(layers)]
    for i, (k, v) in enumerate(prefix):
        dynamic.update(k, v, i)
        static.layers[i].update(k, v)
    static.set_length(past)
    for _ in range(steps):
        n = rng.randrange(1, 12)
        tree, bucket = random_tree(rng, n), bucket_of(n)
        path = tree.path_to(rng.randrange(n))
        for i in range(layers):
            k, v = torch.randn(1, heads, bucket, dim, generator=gen), torch.randn(1, heads, bucket, dim, generator=gen)
            dynamic.update(k[:, :, :n], v[:, :, :n], i)  # the dynamic cache holds the real nodes only
            static.layers[i].update(k, v)  # the static one the whole bucket, padding included
        static.bucket = bucket
        kv.commit_path(dynamic, past, path, n)
        kv.commit_path(static, past, path, n)
        past += len(path)
        assert kv.cached_length(static) == kv.cached_length(dynamic) == past == int(static.length)
        for layer, (keys, values) in zip(dynamic.layers, static.committed()):
            assert torch.equal(layer.keys, keys) and torch.equal(layer.values, values)


# ---- the static path, every drafter ------------------------------------------------------------------------
@pytest.mark.parametrize("name", REGISTERED)
def test_every_drafter_in_the_static_path_equals_greedy(static_regime, reference, drafter_for, name):
    drafter = drafter_for(name, static_regime)
    for budget in BUDGETS:
        for prompt in PROMPTS[:2]:
            result = generate(static_regime, drafter, prompt, 24, budget)
            assert result.output_ids == reference(prompt, 24), (name, budget)


def test_a_planted_acceptable_padding_node_is_caught(static_regime, reference, monkeypatch):
    """Padding made acceptable (valid, under the root, carrying the true next token, at the root's
    position) is chosen by the device rule, and the step refuses the choice (a node the tree lacks)."""
    prompt = PROMPTS[0]
    ref = reference(prompt, 24)
    truth = {}

    class WrongSiblings(Drafter):  # two wrong children of the root: 3 nodes, padded to 4
        def propose(self, ctx):
            truth["next"] = ref[len(ctx.tokens) - len(prompt)] if len(ctx.tokens) - len(prompt) < len(ref) else 0
            return DraftTree(torch.tensor([ctx.root, (truth["next"] + 1) % EOS, (truth["next"] + 2) % EOS]),
                             torch.tensor([-1, 0, 0]))

    assert generate(static_regime, WrongSiblings(), prompt, 24, 3).output_ids == ref
    real_pad = static_cache.pad_tree

    def planted(tree, bucket):
        packed = real_pad(tree, bucket)
        for i in range(len(tree), bucket):
            packed[i, 0], packed[i, 3], packed[i, static_cache.PACKED_FIELDS] = truth["next"], 1, 1
        return packed

    monkeypatch.setattr(static_cache, "pad_tree", planted)
    with pytest.raises(SpecbenchError, match="a padding node was accepted"):
        generate(static_regime, WrongSiblings(), prompt, 24, 3)


def test_every_compiled_function_is_one_graph_without_breaks(drafter_for, monkeypatch):
    """What the compiled regime compiles (the tree step at batch 1 and at batch B, the commit's slot mover, and
    each capturable drafter's parts) traces as one graph: a graph break is a host readback inside the step
    (it was one: indexing with a 0-d tensor in `greedy_select`), and on a GPU it splits the CUDA graph and
    multiplies what compiles. dynamo's `explain` traces each on its first call; nothing is compiled."""
    from specbench.harness.loop import Job, generate_batch

    explained: dict[str, object] = {}

    def explaining(function, label=None):
        def run(*args, **kwargs):
            key = getattr(function, "__qualname__", repr(function))
            if key not in explained:
                explained[key] = torch._dynamo.explain(function)(*args, **kwargs)
            return function(*args, **kwargs)
        return run

    target = make_target(build_tiny_model("llama"))
    target.use_regime("compiled", min_capacity=128)
    monkeypatch.setattr(target, "_compiled", explaining)
    monkeypatch.setattr(target, "_compiled_part", explaining)
    for name in ("vanilla", "medusa", "hydra", "ctc", "eagle", "eagle3"):  # eagle3: the layer hooks traced too
        generate(target, drafter_for(name, target), PROMPTS[1], 12, 4)
    jobs = [Job(list(prompt), 8, key=i) for i, prompt in enumerate(PROMPTS[:2])]
    assert len(list(generate_batch(target, drafter_for("hydra", target), jobs, 4, 2))) == 2
    cache = target._static
    explaining(static_cache.move_slots)(cache, torch.tensor([0, 2, 1, 3]), cache.length)
    names = set(explained)
    assert {"TargetModel._static_step", "TargetModel._batch_step", "move_slots"} <= names
    assert len(names) >= 3 + 5  # and the drafters' parts (medusa's heads, hydra's, ctc's, eagle's, eagle3's)
    for name, explanation in explained.items():
        assert (explanation.graph_count, explanation.graph_break_count) == (1, 0), (name, explanation.break_reasons)


# ---- compiled (inductor), tiny cases -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def compiled_target():
    target = make_target(build_tiny_model("llama"))
    target.use_regime("compiled", min_capacity=128)
    return target


@pytest.fixture(scope="module")
def eager_twin():
    return make_target(build_tiny_model("llama"))


# every capturable built-in once (its parts compiled), plus vanilla and a training-free drafter; eagle3's parts run
# compiled on the layer taps the compiled step returns
COMPILED_CASES = [("vanilla", 1), ("ngram", 3), ("ngram", 16), ("medusa", 3), ("hydra", 3), ("ctc", 3), ("eagle", 3),
                  ("eagle3", 3)]


@pytest.mark.parametrize("name,budget", COMPILED_CASES, ids=[f"{n}@{b}" for n, b in COMPILED_CASES])
def test_compiled_ids_equal_greedy_and_eager(compiled_target, eager_twin, drafter_for, name, budget):
    drafter = drafter_for(name, compiled_target)
    twin = drafter_for(name, eager_twin)
    for prompt in PROMPTS[1:3]:
        compiled = generate(compiled_target, drafter, prompt, 16, budget)
        eager = generate(eager_twin, twin, prompt, 16, budget)
        assert compiled.output_ids == plain_greedy(compiled_target.model, prompt, 16, compiled_target.eos_ids)
        assert compiled.output_ids == eager.output_ids
        assert compiled.accept_lengths == eager.accept_lengths


def test_capturable_drafters_run_their_parts_compiled(compiled_target, drafter_for):
    """The manifest's per-drafter record: what each built-in compiled, and a plug-in (not capturable by
    default) left eager, exactly as written."""
    from specbench.harness.runner import drafters_regime

    class PlugIn(Drafter):
        pass

    drafters = {name: drafter_for(name, compiled_target)
                for name in ("medusa", "hydra", "ctc", "eagle", "eagle3", "ngram", "sps")}
    drafters["plug-in"] = PlugIn()
    for drafter in drafters.values():
        drafter.reset(compiled_target.handle)
    record = drafters_regime(compiled_target, drafters)["drafters"]
    assert record["medusa"]["compiled"] == ["heads"]
    assert record["hydra"]["compiled"][0] == "head 1"
    assert record["ctc"]["compiled"] == ["context features", "context keys/values", "slot layer"]
    assert record["eagle"]["compiled"] == record["eagle3"]["compiled"] == ["fc", "layer keys/values", "layer attention"]
    for name in ("ngram", "sps", "plug-in"):
        assert record[name]["compiled"] == [] and record[name]["eager"].startswith("not capturable")
    assert drafters_regime(make_target(build_tiny_model("llama")), drafters) == {}  # eager: nothing recorded


def test_compiled_drafter_parts_stay_bounded(compiled_target, drafter_for):
    """eagle's compiled parts see frontiers of several widths and a draft context that grows every step:
    once its shapes have turned symbolic, further sequences compile nothing."""
    from torch._dynamo.utils import counters

    drafter = drafter_for("eagle", compiled_target)
    for prompt in PROMPTS:  # prompts of 1-20 tokens: a 1-row context is its own graph (dynamo specialises 1)
        generate(compiled_target, drafter, prompt, 16, 8)
    before = counters["stats"]["unique_graphs"]
    for prompt in PROMPTS:  # longer sequences: contexts and frontiers of sizes not seen yet
        generate(compiled_target, drafter, prompt, 24, 8)
    assert counters["stats"]["unique_graphs"] == before


def test_recompiles_stay_bounded(compiled_target, drafter_for):
    """Once a bucket's graph exists, further sequences (other prompts, lengths, trees) compile nothing."""
    from torch._dynamo.utils import counters

    drafter = drafter_for("ngram", compiled_target)
    for prompt in PROMPTS:
        generate(compiled_target, drafter, prompt, 16, 3)
    before = counters["stats"]["unique_graphs"]
    for prompt in PROMPTS:
        generate(compiled_target, drafter, prompt, 20, 3)
    assert counters["stats"]["unique_graphs"] == before
    assert set(compiled_target._steps) <= {1, 2, 4, 8, 16}  # at most one graph per bucket up to 16 nodes


def test_compiled_batches_equal_batch_1(compiled_target, drafter_for):
    """Batch size 2 in the compiled regime (one graph per (batch size, bucket), one reused batch cache): every
    sequence's ids equal its own plain greedy decoding, with rows refilled as sequences end."""
    from specbench.harness.loop import Job, generate_batch

    drafter = drafter_for("medusa", compiled_target)
    jobs = [Job(list(prompt), 16, key=i) for i, prompt in enumerate(PROMPTS[:3])]
    for _ in range(2):  # a second pass reuses the cache and the graphs
        results = dict((job.key, result) for job, result in generate_batch(compiled_target, drafter, jobs, 3, 2))
        for i, prompt in enumerate(PROMPTS[:3]):
            assert results[i].output_ids == plain_greedy(compiled_target.model, prompt, 16, compiled_target.eos_ids)
    assert set(compiled_target._batch_steps) <= {(2, 1), (2, 2), (2, 4)} and len(compiled_target._batch_caches) == 1


def test_bad_regime_is_one_line_and_exit_2(capsys):
    from specbench.harness.cli import main

    assert main(["run", "--regime", "fast"]) == 2
    assert capsys.readouterr().err.strip() == ("specbench: error: argument --regime: invalid choice: 'fast' "
                                               "(choose from 'eager', 'compiled')")
    assert main(["run", "--regime", "compiled", "--compile-backend", "cudagraphs", "--drafters", "vanilla"]) == 2
    assert capsys.readouterr().err.strip() == (
        "specbench: error: --compile-backend cudagraphs needs --regime compiled and --device cuda (CUDA graphs exist "
        "on GPUs only; got --regime compiled --device cpu)")


def test_the_cudagraphs_backend_runs_the_same_steps(drafter_for):
    """``--compile-backend cudagraphs`` (eager kernels replayed as CUDA graphs, for short GPU leases): on a CPU
    the capture is `replay_capture` (each replay reruns the step on the captured buffers, so an input not copied
    into them would change the ids); ids equal plain greedy, the record names the backend, and a profile of it
    is keyed apart from inductor's."""
    from specbench.harness.autobudget.profile import cache_path, profile_key

    target = make_target(build_tiny_model("llama"))
    target.use_regime("compiled", min_capacity=128, backend="cudagraphs")
    for name, budget in (("vanilla", 1), ("medusa", 3)):
        result = generate(target, drafter_for(name, target), PROMPTS[1], 12, budget)
        assert result.output_ids == plain_greedy(target.model, PROMPTS[1], 12, target.eos_ids)
    assert target.regime_record()["backend"] == "cudagraphs" and "tree step, bucket 4" in target.compile_seconds
    assert target.regime_record()["mode"] == "eager kernels in CUDA graphs"
    from specbench.harness.runner import drafters_regime

    record = drafters_regime(target, {"hydra": drafter_for("hydra", target), "ngram": drafter_for("ngram", target)})
    assert record["drafters"]["hydra"]["eager"] == "the cudagraphs backend captures the target's fixed-shape steps only"
    assert record["drafters"]["ngram"]["eager"].startswith("not capturable")
    from specbench.harness.loop import Job, generate_batch

    jobs = [Job(list(prompt), 16, key=i) for i, prompt in enumerate(PROMPTS[:3])]  # rows refilled: inputs copied in
    for _ in range(2):
        results = dict((job.key, result) for job, result in generate_batch(target, drafter_for("hydra", target), jobs, 3, 2))
        for i, prompt in enumerate(PROMPTS[:3]):
            assert results[i].output_ids == plain_greedy(target.model, prompt, 16, target.eos_ids)
    keyed = cache_path(profile_key(target), Path("/p"))
    target.use_regime("compiled", min_capacity=128)
    assert keyed.name.endswith("-compiled-cudagraphs.json") and cache_path(profile_key(target), Path("/p")) != keyed
    with pytest.raises(SpecbenchError, match="--compile-backend must be one of inductor, cudagraphs"):
        target.use_regime("compiled", backend="tensorrt")


def test_eagle3_reads_its_features_from_captured_steps(tmp_path):
    """A CUDA graph's replay runs no Python, so no forward hook: the captured step returns the layer taps it read
    as outputs and the target records them as the step's. With replays that run no hook (as on a GPU), eagle3
    never falls back to running the target itself, alone or in a refilled batch, and its ids equal plain greedy."""
    import contextlib

    from specbench.drafters.eagle3 import Eagle3Drafter, untrained_checkpoint
    from specbench.harness.loop import Job, generate_batch

    target = make_target(build_tiny_model("llama"))
    target.use_regime("compiled", min_capacity=128, backend="cudagraphs")

    @contextlib.contextmanager
    def no_hooks():
        saved = [(m, dict(m._forward_pre_hooks), dict(m._forward_hooks)) for m in target.model.modules()]
        for module, _, _ in saved:
            module._forward_pre_hooks.clear()
            module._forward_hooks.clear()
        try:
            yield
        finally:
            for module, pre, post in saved:
                module._forward_pre_hooks.update(pre)
                module._forward_hooks.update(post)

    def hookless_capture(function, args):
        def replay():
            with no_hooks():
                return function(*args)
        return replay

    target._graph_capture = lambda: hookless_capture
    stem = untrained_checkpoint(tmp_path / "e3", target.handle, draft_vocab=60, seed=3)

    class Counting(Eagle3Drafter):
        own_forwards = [0]

        def own_forward(self, ctx):
            self.own_forwards[0] += 1
            return super().own_forward(ctx)

    for prompt in PROMPTS[:2]:
        result = generate(target, Counting(checkpoint=str(stem)), prompt, 12, 4)
        assert result.output_ids == plain_greedy(target.model, prompt, 12, target.eos_ids)
    jobs = [Job(list(prompt), 10, key=i) for i, prompt in enumerate(PROMPTS[:3])]
    results = dict((job.key, result) for job, result in generate_batch(target, Counting(checkpoint=str(stem)), jobs, 4, 2))
    for i, prompt in enumerate(PROMPTS[:3]):
        assert results[i].output_ids == plain_greedy(target.model, prompt, 10, target.eos_ids)
    assert Counting.own_forwards[0] == 0
