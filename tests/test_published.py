"""Published Medusa and Hydra checkpoints.

Synthetic checkpoints written the way the authors' code writes them (FasterDecoding/Medusa: ``torch.save``
of ``medusa_head.state_dict()``; zankner/Hydra: of ``hydra_head.state_dict()``, same key names, shapes and
dtypes, ``[ResBlock] * L`` stored as identical copies) for a tiny model load into specbench's drafters,
which then propose exactly what the authors' head formulas, computed here independently, give, and stay
lossless. A specbench checkpoint converted to the published layout and read back drafts identically.
Mismatched checkpoints are refused with one line naming the problem.
"""

from __future__ import annotations

import contextlib
import json

import pytest
import torch
from torch.nn.functional import linear, silu

from conftest import assert_imported_eagle_layer, distil_random_prompts, plain_greedy
from specbench.drafter import DraftContext
from specbench.drafters.hydra import HydraDrafter
from specbench.drafters.medusa import MedusaDrafter
from specbench.drafters.published import write_published
from specbench.drafters.static_tree import DEFAULT_CHOICES, StaticTree, load_choices
from specbench.drafters.training.heads import HeadTrainConfig, train_heads
from specbench.errors import SpecbenchError
from specbench.harness.loop import generate

PROMPTS = ([5, 17, 42, 8], [3, 4, 5, 6, 7, 3, 4], [60, 12, 88, 31, 29, 60, 12])


def write_medusa(folder, hidden: int, vocab: int, heads: int = 5, layers: int = 1, dtype=torch.float16,
                 lm_heads: bool = True, seed: int = 0) -> dict[str, torch.Tensor]:
    """A Medusa-1 checkpoint as FasterDecoding's train.py saves it; returns its state dict."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k in range(heads):
        weight, bias = torch.randn(hidden, hidden, generator=g) * 0.3, torch.randn(hidden, generator=g) * 0.1
        for l in range(layers):  # one ResBlock module listed L times: identical copies
            state[f"{k}.{l}.linear.weight"], state[f"{k}.{l}.linear.bias"] = weight.to(dtype), bias.to(dtype)
        if lm_heads:
            state[f"{k}.{layers}.weight"] = torch.randn(vocab, hidden, generator=g).to(dtype)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "medusa_lm_head.pt")
    # the released configs say 2 heads; Medusa's loader ignores that (it hardcodes 5), and so does ours
    (folder / "config.json").write_text(json.dumps({"medusa_num_heads": 2, "medusa_num_layers": layers,
                                                    "base_model_name_or_path": "tiny-llama"}))
    return state


def write_hydra(folder, hidden: int, vocab: int, heads: int = 4, layers: int = 2, dtype=torch.float32,
                seed: int = 1, prefix=None) -> dict[str, torch.Tensor]:
    """A grounded Hydra checkpoint as zankner/Hydra's train.py saves it: arch 'mlp', or with ``prefix`` (a
    one-layer transformers LlamaModel, as the authors build it) arch 'prefix-mlp', whose Sequential interleaves
    Dropout modules. Returned with the plain 'mlp' key names (the reference formulas below use those)."""
    g = torch.Generator().manual_seed(seed)
    state = {}
    for k in range(heads):
        width = hidden * (k + 2)
        for name in ("linear", "res_connection"):
            state[f"hydra_mlp.{k}.0.{name}.weight"] = (torch.randn(hidden, width, generator=g) * 0.2).to(dtype)
            state[f"hydra_mlp.{k}.0.{name}.bias"] = (torch.randn(hidden, generator=g) * 0.1).to(dtype)
        weight, bias = torch.randn(hidden, hidden, generator=g) * 0.3, torch.randn(hidden, generator=g) * 0.1
        for l in range(1, layers):
            state[f"hydra_mlp.{k}.{l}.linear.weight"], state[f"hydra_mlp.{k}.{l}.linear.bias"] = weight.to(dtype), bias.to(dtype)
        state[f"hydra_lm_head.{k}.weight"] = torch.randn(vocab, hidden, generator=g).to(dtype)
        state[f"hydra_lm_head.{k}.bias"] = torch.randn(vocab, generator=g).to(dtype)
    saved = dict(state)
    if prefix is not None:
        def renumber(key: str) -> str:  # hydra_mlp.k.l.* -> hydra_mlp.k.(2l+1).*, hydra_lm_head.k.* -> .k.1.*
            parts = key.split(".")
            if parts[0] == "hydra_mlp":
                parts[2] = str(2 * int(parts[2]) + 1)
            else:
                parts.insert(2, "1")
            return ".".join(parts)

        saved = {renumber(k): v for k, v in state.items()}
        saved |= {f"prefix_embeding_layer.{k}": v.to(dtype) for k, v in prefix.state_dict().items()}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(saved, folder / "hydra_lm_head.pt")
    (folder / "config.json").write_text(json.dumps({
        "hydra_num_heads": heads, "hydra_num_layers": layers, "hydra_head_arch": "prefix-mlp" if prefix else "mlp",
        "grounded_heads": True, "base_model_name_or_path": "tiny-llama", "hidden_state_offset": 0}))
    return state


def context(target, hidden: torch.Tensor, root: int, budget: int) -> DraftContext:
    """The first proposal of a sequence: hidden [H] (one prompt position) or [m, H] (m positions)."""
    hidden = hidden if hidden.dim() == 2 else hidden[None]
    tokens = torch.tensor([5] * hidden.shape[0] + [root])
    return DraftContext(tokens=tokens, root=root, hidden=hidden, target=target.handle, budget=budget,
                        span=lambda name: contextlib.nullcontext())


def medusa_reference(state, h: torch.Tensor, head: int, layers: int) -> torch.Tensor:
    """Medusa-1 head ``head`` on h [H] as the authors define it: [ResBlock] * L then the head's own Linear."""
    x = h
    for l in range(layers):
        x = x + silu(linear(x, state[f"{head}.{l}.linear.weight"].float(), state[f"{head}.{l}.linear.bias"].float()))
    return linear(x, state[f"{head}.{layers}.weight"].float())  # logits [V]


def hydra_reference(state, h: torch.Tensor, path_embeddings: list[torch.Tensor], head: int, layers: int) -> torch.Tensor:
    """Grounded Hydra head ``head`` reading [h; E(root); ...]: res_connection(x) + SiLU(linear(x)), then ResBlocks,
    then its biased lm_head."""
    joined = torch.cat([h, *path_embeddings])
    p = f"hydra_mlp.{head}.0"
    x = linear(joined, state[f"{p}.res_connection.weight"].float(), state[f"{p}.res_connection.bias"].float()) \
        + silu(linear(joined, state[f"{p}.linear.weight"].float(), state[f"{p}.linear.bias"].float()))
    for l in range(1, layers):
        weight, bias = state[f"hydra_mlp.{head}.{l}.linear.weight"], state[f"hydra_mlp.{head}.{l}.linear.bias"]
        x = x + silu(linear(x, weight.float(), bias.float()))
    return linear(x, state[f"hydra_lm_head.{head}.weight"].float(), state[f"hydra_lm_head.{head}.bias"].float())


def test_shipped_trees_are_ordered_best_first_with_parents_first():
    for name in ("mc_sim_7b_63", "vicuna_7b_stage2"):
        choices = load_choices(name)
        assert len(choices) == 63 and max(map(len, choices)) == 4
        for n in range(1, 64):  # every prefix is a tree: a budget keeps the first n - 1 paths
            assert len(StaticTree.from_paths(choices[: n - 1])) == n
    assert load_choices(DEFAULT_CHOICES)[:4] == [(0,), (0, 0), (1,), (0, 1)]


@pytest.mark.parametrize("dtype, layers", [(torch.float16, 1), (torch.float32, 2), (torch.bfloat16, 1)])
def test_published_medusa_proposes_what_the_authors_heads_give(llama_target, tmp_path, dtype, layers):
    hidden, vocab = llama_target.config.hidden_size, llama_target.config.vocab_size
    state = write_medusa(tmp_path / "medusa", hidden, vocab, layers=layers, dtype=dtype)
    drafter = MedusaDrafter(checkpoint=str(tmp_path / "medusa"))
    assert drafter.max_budget() == 64  # the published tree: 63 paths and the root
    drafter.reset(llama_target.handle)
    assert drafter.recipe["imported"]["layout"] == "medusa-1" and len(drafter.module.heads) == 5
    h = torch.randn(hidden, generator=torch.Generator().manual_seed(3))
    for budget in (64, 10):
        tree = drafter.propose(context(llama_target, h, root=7, budget=budget))
        shape = StaticTree.from_paths(load_choices(DEFAULT_CHOICES)[: budget - 1])
        assert len(tree.tokens) == budget and tree.parents.tolist() == list(shape.parents)
        top = [medusa_reference(state, h, k, layers).topk(10).indices for k in range(4)]
        expected = [7] + [int(top[len(path) - 1][path[-1]]) for path in shape.paths[1:]]
        assert tree.tokens.tolist() == expected
    for prompt in PROMPTS:
        for budget in (1, 6, 64):
            result = generate(llama_target, drafter, prompt, 16, budget)
            assert result.output_ids == plain_greedy(llama_target.model, prompt, 16, llama_target.eos_ids)


def test_medusa_2_layout_uses_the_targets_lm_head(llama_target, tmp_path):
    hidden, vocab = llama_target.config.hidden_size, llama_target.config.vocab_size
    state = write_medusa(tmp_path / "m2", hidden, vocab, heads=4, lm_heads=False)
    drafter = MedusaDrafter(checkpoint=str(tmp_path / "m2" / "medusa_lm_head.pt"))  # the weights file works too
    drafter.reset(llama_target.handle)
    assert drafter.recipe["imported"]["layout"] == "medusa-2" and drafter.module.lm_heads is None
    h = torch.randn(hidden, generator=torch.Generator().manual_seed(4))
    tree = drafter.propose(context(llama_target, h, root=9, budget=2))  # the path [0]: head 0's best token
    x = h + silu(linear(h, state["0.0.linear.weight"].float(), state["0.0.linear.bias"].float()))
    assert tree.tokens.tolist() == [9, int(llama_target.lm_head(x).argmax())]


def prefix_layer(target_config):
    """Hydra++'s prefix layer as the authors build it: a LlamaModel from the base config with one layer."""
    from transformers import LlamaModel

    config = target_config.__class__.from_dict(target_config.to_dict() | {"num_hidden_layers": 1})
    torch.manual_seed(7)
    model = LlamaModel(config).eval()
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "norm" in name:
                weight.normal_(1.0, 0.2)  # random norms catch a mixed-up norm
    return model


@pytest.mark.parametrize("arch", ["mlp", "prefix-mlp"])
def test_published_hydra_proposes_what_the_authors_heads_give(llama_target, tmp_path, arch):
    hidden, vocab = llama_target.config.hidden_size, llama_target.config.vocab_size
    prefix = prefix_layer(llama_target.config) if arch == "prefix-mlp" else None
    state = write_hydra(tmp_path / "hydra", hidden, vocab, prefix=prefix)
    drafter = HydraDrafter(checkpoint=str(tmp_path / "hydra"))
    drafter.reset(llama_target.handle)
    assert drafter.recipe["imported"]["layout"] == f"hydra-{arch}" and drafter.module.lm_heads[0].bias is not None
    context_hidden = torch.randn(6, hidden, generator=torch.Generator().manual_seed(5))  # six prompt positions
    if prefix is None:
        h = context_hidden[-1]
    else:  # the heads read the prefix layer's output at the last position
        assert drafter.module.prefix.num_kv_heads == 2  # the tiny target's grouped-query shape
        with torch.no_grad():
            h = prefix(inputs_embeds=context_hidden[None]).last_hidden_state[0, -1]
    embed = llama_target.handle.embed_tokens
    for budget in (64, 12):
        drafter.reset(llama_target.handle)
        tree = drafter.propose(context(llama_target, context_hidden, root=11, budget=budget))
        shape = StaticTree.from_paths(load_choices(DEFAULT_CHOICES)[: budget - 1])
        tokens = tree.tokens.tolist()
        for node in range(1, budget):
            chain, parent = [], shape.parents[node]
            while parent != -1:
                chain.insert(0, tokens[parent])
                parent = shape.parents[parent]
            path_embeddings = [embed(torch.tensor(t)) for t in chain]  # root first
            with torch.no_grad():
                logits = hydra_reference(state, h, path_embeddings, len(chain) - 1, layers=2)
            assert tokens[node] == int(logits.topk(shape.ranks[node] + 1).indices[-1])
    for prompt in PROMPTS:
        for budget in (1, 5, 64):
            result = generate(llama_target, drafter, prompt, 16, budget)
            assert result.output_ids == plain_greedy(llama_target.model, prompt, 16, llama_target.eos_ids)


@pytest.fixture(scope="module")
def cache(llama_target, tmp_path_factory):
    return distil_random_prompts(llama_target, tmp_path_factory.mktemp("distill"), seed=1)


@pytest.mark.parametrize("method, layers", [("medusa", 2), ("hydra", 2)])
def test_specbench_checkpoint_to_published_layout_and_back_drafts_identically(llama_target, cache, tmp_path, method, layers):
    drafters = {"medusa": MedusaDrafter, "hydra": HydraDrafter}
    train_heads(HeadTrainConfig(method=method, cache=str(cache), out=str(tmp_path / method), num_heads=3, epochs=1,
                                num_layers=layers, lr=3e-3, batch_size=32, warmup_steps=2, max_rank=4), llama_target,
                progress=False)
    native = drafters[method](checkpoint=str(tmp_path / method), tree="static")
    native.reset(llama_target.handle)
    files, notes = write_published(method, native.module, llama_target.lm_head.weight, tmp_path / "published", "tiny")
    assert [f.name for f in files] == [f"{method}_lm_head.pt", "config.json"]
    if method == "medusa":  # its two trained layers differ; hydra's second layer is its only shared block
        assert any("the authors' loader" in note for note in notes)
    written = torch.load(files[0], weights_only=True)
    if method == "medusa":
        assert torch.equal(written["1.2.weight"], llama_target.lm_head.weight.detach())  # each head's lm_head: a copy
    else:
        assert written["hydra_mlp.2.0.res_connection.weight"].shape == (32, 4 * 32)
    # the native tree at budget 8, as rank paths, so both sides draft the same shape
    choices = tmp_path / "tree.json"
    choices.write_text(json.dumps([list(p) for p in native.static_tree(8).paths[1:]]))
    imported = drafters[method](checkpoint=str(tmp_path / "published"), choices=str(choices))
    for prompt in PROMPTS:
        mine = generate(llama_target, native, prompt, 24, 8)
        theirs = generate(llama_target, imported, prompt, 24, 8)
        assert theirs.output_ids == mine.output_ids == plain_greedy(llama_target.model, prompt, 24, llama_target.eos_ids)
        assert [s.accepted for s in theirs.steps] == [s.accepted for s in mine.steps]


def test_a_hydra_checkpoint_with_prefix_attention_is_not_exportable(llama_target):
    from specbench.drafters.hydra import HydraHeads

    with pytest.raises(SpecbenchError, match="prefix attention layer"):
        write_published("hydra", HydraHeads(32, 2, 1, prefix_heads=4), llama_target.lm_head.weight, "unused", "tiny")


def refusal(llama_target, drafter) -> str:
    with pytest.raises(SpecbenchError) as error:
        drafter.reset(llama_target.handle)
    return str(error.value)


def test_mismatched_or_malformed_checkpoints_are_refused_with_the_reason(llama_target, tmp_path):
    hidden, vocab = llama_target.config.hidden_size, llama_target.config.vocab_size
    write_medusa(tmp_path / "wide", 2 * hidden, vocab)
    assert "hidden size 64, the target's is 32" in refusal(llama_target, MedusaDrafter(checkpoint=str(tmp_path / "wide")))
    write_medusa(tmp_path / "vocab", hidden, vocab + 3)
    assert f"vocabulary of {vocab + 3} tokens, the target has {vocab}" in refusal(
        llama_target, MedusaDrafter(checkpoint=str(tmp_path / "vocab")))
    write_hydra(tmp_path / "hydra", hidden, vocab)
    assert "holds published Hydra heads; load it with --drafter-option hydra.checkpoint" in refusal(
        llama_target, MedusaDrafter(checkpoint=str(tmp_path / "hydra")))
    write_medusa(tmp_path / "shallow", hidden, vocab, heads=3)
    shallow = MedusaDrafter(checkpoint=str(tmp_path / "shallow"))
    assert "reaches depth 4, the checkpoint has 3 heads" in refusal(llama_target, shallow)

    config = json.loads((tmp_path / "hydra" / "config.json").read_text())
    (tmp_path / "hydra" / "config.json").write_text(json.dumps(config | {"hydra_head_arch": "cross-attn"}))
    cross = HydraDrafter(checkpoint=str(tmp_path / "hydra"))
    assert "hydra_head_arch 'cross-attn' is not supported" in refusal(llama_target, cross)

    (tmp_path / "hydra" / "config.json").write_text(json.dumps(config | {"hidden_state_offset": 2}))
    assert "hidden_state_offset 2" in refusal(llama_target, HydraDrafter(checkpoint=str(tmp_path / "hydra")))
    (tmp_path / "hydra" / "config.json").write_text(json.dumps(config | {"grounded_heads": False}))
    assert "ungrounded Hydra heads" in refusal(llama_target, HydraDrafter(checkpoint=str(tmp_path / "hydra")))

    state = write_medusa(tmp_path / "missing", hidden, vocab)
    del state["2.1.weight"]
    torch.save(state, tmp_path / "missing" / "medusa_lm_head.pt")
    assert "key '2.1.weight' is missing" in refusal(llama_target, MedusaDrafter(checkpoint=str(tmp_path / "missing")))
    (tmp_path / "missing" / "medusa_lm_head.pt").write_bytes(b"not a checkpoint")
    assert "cannot read" in refusal(llama_target, MedusaDrafter(checkpoint=str(tmp_path / "missing")))

    bad = tmp_path / "bad-tree.json"
    bad.write_text("[[1, 0], [1]]")
    with pytest.raises(SpecbenchError, match=r"path \[1, 0\] comes before its parent \[1\]"):
        MedusaDrafter(choices=str(bad))
    with pytest.raises(SpecbenchError, match="neither a shipped tree"):
        MedusaDrafter(choices="no_such_tree")


def test_cli_converts_a_checkpoint_runs_it_and_refuses_mismatches_in_one_line(tiny_model_dir, tmp_path):
    from specbench.checkpoint import save_checkpoint, target_identity
    from specbench.drafters.medusa import MedusaHeads
    from specbench.model import load_target
    from test_cli import assert_one_line_error, run_cli

    target = load_target(str(tiny_model_dir))
    torch.manual_seed(2)
    heads = MedusaHeads(32, num_heads=4, num_layers=1)
    for parameter in heads.parameters():
        torch.nn.init.normal_(parameter, std=0.3)
    recipe = {"method": "medusa", "target": target_identity(target.handle),
              "hyperparameters": {"num_heads": 4, "num_layers": 1},
              "metrics": {"heldout_topk_accuracy": [[0.5, 0.2, 0.1]] * 4}}
    save_checkpoint(tmp_path / "mine", heads.state_dict(), recipe)

    converted = run_cli("convert", str(tmp_path / "mine"), "--model", str(tiny_model_dir), "--out", str(tmp_path / "pub"))
    assert converted.returncode == 0, converted.stderr
    assert (tmp_path / "pub" / "medusa_lm_head.pt").is_file() and (tmp_path / "pub" / "config.json").is_file()
    common = ["run", "--model", str(tiny_model_dir), "--categories", "writing", "--limit", "1", "--max-new-tokens", "8",
              "--bench", "mt_bench", "--no-progress", "--no-warmup", "--tree-budget", "12"]
    ran = run_cli(*common, "--drafters", "vanilla,medusa", "--drafter-option", f"medusa.checkpoint={tmp_path / 'pub'}",
                  "--out", str(tmp_path / "run"))
    assert ran.returncode == 0, ran.stderr
    from specbench.results import load_run

    answers = load_run(tmp_path / "run")
    assert answers["medusa"][0].equal_to_vanilla and answers["medusa"][0].tree_budget == 12

    write_medusa(tmp_path / "wide", 64, len(target.tokenizer))
    assert_one_line_error(run_cli(*common, "--drafters", "medusa", "--drafter-option", f"medusa.checkpoint={tmp_path / 'wide'}",
                                  "--out", str(tmp_path / "wide-run")), "hidden size 64, the target's is 32")
    assert not (tmp_path / "wide-run" / "answers").exists() or not any((tmp_path / "wide-run" / "answers").iterdir())
    assert_one_line_error(run_cli(*common, "--drafters", "hydra", "--drafter-option", f"hydra.checkpoint={tmp_path / 'pub'}",
                                  "--out", str(tmp_path / "hydra-run")), "holds published Medusa heads")
    assert_one_line_error(run_cli("convert", str(tmp_path / "missing"), "--out", str(tmp_path / "x")), "no checkpoint recipe")


def write_eagle(folder, target_config, seed: int = 3, hidden_override: int | None = None):
    """SafeAILab's EAGLE-1/2 weights for a tiny target: ``fc`` plus one LLaMA decoder layer without its input
    norm, saved with the draft's LLaMA-style config; returns (fc, reference layer) to compute with."""
    from transformers import LlamaModel

    values = target_config.to_dict() | {"num_hidden_layers": 1, "bias": True}
    if hidden_override:
        values |= {"hidden_size": hidden_override}
    config = target_config.__class__.from_dict(values)
    torch.manual_seed(seed)
    reference = LlamaModel(config).eval()
    reference.layers[0].input_layernorm = torch.nn.Identity()  # EAGLE's layer 0 has none
    reference.norm = torch.nn.Identity()  # and the draft has no final norm
    with torch.no_grad():
        reference.layers[0].post_attention_layernorm.weight.normal_(1.0, 0.2)
    fc = torch.nn.Linear(2 * config.hidden_size, config.hidden_size)
    state = {"fc.weight": fc.weight.detach(), "fc.bias": fc.bias.detach(),
             "embed_tokens.weight": reference.embed_tokens.weight.detach()}  # the target's copy, stored in fp32
    state |= {k: v for k, v in reference.state_dict().items() if k.startswith("layers.0.")}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / "pytorch_model.bin")
    (folder / "config.json").write_text(json.dumps(values))
    return fc, reference


def test_published_eagle_weights_predict_what_the_llama_layer_gives(llama_target, tmp_path):
    from specbench.drafters.eagle import EagleDrafter

    fc, reference = write_eagle(tmp_path / "eagle", llama_target.config)
    drafter = EagleDrafter(checkpoint=str(tmp_path / "eagle"), top_k=3, depth=2)
    drafter.reset(llama_target.handle)
    assert drafter.recipe["imported"]["layout"] == "eagle-1/2" and drafter.module.layer.num_kv_heads == 2
    assert_imported_eagle_layer(drafter, llama_target, fc, reference)


def test_eagle_weights_for_another_model_or_eagle_3_are_refused(llama_target, tmp_path):
    from specbench.drafters.eagle import EagleDrafter

    write_eagle(tmp_path / "wide", llama_target.config, hidden_override=64)
    assert "hidden size 64, the target's is 32" in refusal(llama_target, EagleDrafter(checkpoint=str(tmp_path / "wide")))
    write_eagle(tmp_path / "three", llama_target.config)
    state = torch.load(tmp_path / "three" / "pytorch_model.bin", weights_only=True)
    state["midlayer.hidden_norm.weight"] = torch.ones(32)
    torch.save(state, tmp_path / "three" / "pytorch_model.bin")
    assert "EAGLE-3 weights" in refusal(llama_target, EagleDrafter(checkpoint=str(tmp_path / "three")))
    assert "holds published Eagle heads" in refusal(llama_target, MedusaDrafter(checkpoint=str(tmp_path / "three")))


def test_own_projections_over_a_draft_vocabulary_export_over_every_token(llama_target, cache, tmp_path):
    """Heads trained with their own projections over the 24 most frequent tokens export as Medusa-1 heads over
    all V: each trained row at its token, the target's row elsewhere; the medusa-2 layout, which has no room
    for them, is refused."""
    train_heads(HeadTrainConfig(method="medusa", cache=str(cache), out=str(tmp_path / "own"), num_heads=2, epochs=1,
                                lr=3e-3, batch_size=32, warmup_steps=2, train_vocab=24, own_lm_heads=True), llama_target,
                progress=False)
    native = MedusaDrafter(checkpoint=str(tmp_path / "own"))
    native.reset(llama_target.handle)
    ids = native.head_vocabs[0].ids
    lm_head = llama_target.lm_head.weight.detach()
    files, notes = write_published("medusa", native.module, lm_head, tmp_path / "pub", "tiny", row_ids=ids)
    written = torch.load(files[0], weights_only=True)
    head = written["1.1.weight"]  # head 1's projection, after its one residual block
    assert head.shape == lm_head.shape and torch.equal(head[ids], native.module.lm_heads[1].weight.detach())
    others = torch.ones(len(lm_head), dtype=torch.bool)
    others[ids] = False
    assert torch.equal(head[others], lm_head[others]) and any("most frequent tokens" in note for note in notes)
    with pytest.raises(SpecbenchError, match="medusa-2 layout cannot"):
        write_published("medusa", native.module, lm_head, tmp_path / "m2", "tiny", with_lm_heads=False, row_ids=ids)
