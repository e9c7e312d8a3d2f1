"""Batches (issue 43; docs/decisions.md, "Batching"): every sequence of a batch decodes exactly as it would
alone. At temperature 0 in fp32 each row's ids equal plain greedy decoding of its own prompt, with random
trees of different sizes per row (padded to one bucket per step), ragged prompts, rows ending at different
steps (EOS, max_new_tokens) and finished rows refilled with the next job; a commit applied to the wrong row
is caught; drafter row copies share weights but not per-sequence state."""

from __future__ import annotations

import contextlib
import random
import zlib

import pytest
import torch

from conftest import EOS, PROMPTS, build_tiny_model, make_target, plain_greedy
from specbench import DraftContext, Drafter, DraftTree, kv
from specbench.batch_cache import BatchTreeCache
from specbench.drafter import row_copy
from specbench.harness.loop import Job, generate, generate_batch

pytestmark = pytest.mark.usefixtures("single_thread")

#: max_new_tokens per job: rows end at different steps (and job 3 after its first token)
MAX_NEW = (20, 7, 13, 1, 30, 9)


class KnowsSome(Drafter):
    """Random trees (1..budget nodes, random shape) that hold the true continuation on a random branch half
    the time; it finds its sequence's reference from the prompt, so one instance serves any row. Its
    per-sequence state (``prompt``, ``emitted``) is checked every step against the context: rows sharing
    state would fail the check."""

    def __init__(self, references: dict[tuple[int, ...], list[int]]) -> None:
        super().__init__()
        self.references = references
        self.layer = torch.nn.Linear(4, 4)  # stands for a drafter's weights: row copies must share it

    def reset(self, target) -> None:
        self.prompt, self.emitted, self.rng = None, 1, None

    def propose(self, ctx: DraftContext) -> DraftTree:
        tokens = ctx.tokens.tolist()
        if self.prompt is None:  # the first step of a sequence: which job is this?
            self.prompt = next(p for p in self.references if tokens[: len(p)] == list(p) and len(tokens) == len(p) + 1)
            self.rng = random.Random(zlib.crc32(bytes(str(self.prompt), "ascii")))
        assert len(tokens) == len(self.prompt) + self.emitted, "a row's drafter state belongs to another sequence"
        truth = self.references[self.prompt][self.emitted :]
        rng, n = self.rng, self.rng.randint(1, ctx.budget)
        parents = [-1] + [rng.randrange(i) for i in range(1, n)]
        nodes = [ctx.root] + [rng.randrange(EOS) for _ in range(1, n)]
        if n > 1 and rng.random() < 0.5:
            path = DraftTree(torch.tensor(nodes), torch.tensor(parents)).path_to(rng.randrange(1, n))
            for node, token in zip(path[1:], truth):
                nodes[node] = token
        return DraftTree(torch.tensor(nodes), torch.tensor(parents))

    def accept(self, outcome) -> None:
        self.emitted += len(outcome.path)


def references(target, jobs: list[Job]) -> dict[tuple[int, ...], list[int]]:
    return {tuple(job.prompt_ids): plain_greedy(target.model, job.prompt_ids, job.max_new_tokens, target.eos_ids)
            for job in jobs}


def jobs_of(prompts=PROMPTS, max_new=MAX_NEW) -> list[Job]:
    return [Job(list(p), m, key=i) for i, (p, m) in enumerate(zip(prompts, max_new))]


def run_batch(target, drafter, jobs, batch_size, budget=8) -> dict[object, list[int]]:
    out = {}
    for job, result in generate_batch(target, drafter, jobs, budget, batch_size):
        assert sum(result.accept_lengths) + 1 == len(result.output_ids)
        assert all(step.nodes <= budget for step in result.steps)
        out[job.key] = result.output_ids
    assert sorted(out) == sorted(job.key for job in jobs)
    return out


def mismatches(outputs: dict[object, list[int]], jobs: list[Job], refs) -> list[object]:
    return [job.key for job in jobs if outputs[job.key] != refs[tuple(job.prompt_ids)]]


@pytest.mark.parametrize("batch_size", [2, 3, 4])
def test_every_row_equals_its_own_greedy(tiny_target, batch_size):
    """Six ragged jobs (prompts of 1-20 tokens, 1-30 new tokens) through batches of 2-4 (so rows are
    refilled), random trees of different sizes per row: each job's ids equal its plain greedy decoding,
    and equal what batch 1 (`generate`) gives."""
    jobs = jobs_of()
    refs = references(tiny_target, jobs)
    outputs = run_batch(tiny_target, KnowsSome(refs), jobs, batch_size)
    assert mismatches(outputs, jobs, refs) == []
    for job in jobs[:2]:
        assert generate(tiny_target, KnowsSome(refs), job.prompt_ids, job.max_new_tokens, 8).output_ids == outputs[job.key]


def test_rows_ending_at_eos():
    """An EOS that greedy decoding reaches early in some sequences and not others: those rows stop at EOS
    (included), the others run to max_new_tokens; the refilled rows still equal their references."""
    model = build_tiny_model("llama")
    probe = plain_greedy(model, list(PROMPTS[0]), 30, {EOS})
    target = make_target(model, eos_token_id=probe[4])  # the fifth token of job 0 ends it
    jobs = jobs_of(max_new=(30,) * len(PROMPTS))
    refs = references(target, jobs)
    assert any(len(r) < 30 for r in refs.values()) and any(len(r) == 30 for r in refs.values())
    assert refs[tuple(PROMPTS[0])][-1] in target.eos_ids
    outputs = run_batch(target, KnowsSome(refs), jobs, 3)
    assert mismatches(outputs, jobs, refs) == []


def test_a_commit_into_the_wrong_row_is_caught(monkeypatch):
    """The planted bug: each row's accepted path and length applied to the next row. The same comparison
    as above must report mismatches (or the run fails outright); the honest commit passes it."""
    target = make_target(build_tiny_model("llama"))
    jobs = jobs_of()
    refs = references(target, jobs)
    assert mismatches(run_batch(target, KnowsSome(refs), jobs, 3), jobs, refs) == []
    honest = BatchTreeCache.commit

    def swapped(self, orders, kept):
        honest(self, orders.roll(1, 0), kept.roll(1, 0))

    monkeypatch.setattr(BatchTreeCache, "commit", swapped)
    try:
        wrong = mismatches(run_batch(target, KnowsSome(refs), jobs, 3), jobs, refs)
    except (AssertionError, ValueError, RuntimeError, IndexError):
        return  # caught: a row's drafter or the cache noticed
    assert wrong, "a commit applied to the wrong row went unnoticed"


def test_an_eager_step_attends_over_the_active_width_with_the_same_logits(llama_target):
    """An eager batched forward attends over the longest row plus the tree, rounded up to `WIDTH_STEP`, not
    the whole capacity, and scores every node as over the whole capacity; a width that cuts a row's prefix
    (the planted bug) changes the logits."""
    from specbench.batch_cache import WIDTH_STEP

    target = llama_target
    cache = target.new_batch_cache(2, 4 * WIDTH_STEP + 300)
    assert cache.capacity >= 5 * WIDTH_STEP
    prompts = [torch.arange(5) % EOS + 1, torch.arange(WIDTH_STEP + 10) % EOS + 1]  # ragged: 5 and 74 positions
    for row, prompt in enumerate(prompts):
        target.prefill_row(prompt, cache, row)
    trees = [DraftTree(torch.tensor([3, 4, 5]), torch.tensor([-1, 0, 0])), None]  # row 1 idle: a root-only tree
    active, _ = target.forward_trees(trees, cache)  # [2, 4, V]: a 3-node tree pads to bucket 4
    assert cache.width == 2 * WIDTH_STEP and cache.columns.shape == (2 * WIDTH_STEP,)
    set_width = BatchTreeCache.set_width

    def whole(self, needed):
        set_width(self, None)

    def cut(self, needed):  # row 1's prefix does not fit
        set_width(self, WIDTH_STEP)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BatchTreeCache, "set_width", whole)
        full, _ = target.forward_trees(trees, cache)
        assert cache.width == cache.capacity
        patch.setattr(BatchTreeCache, "set_width", cut)
        wrong, _ = target.forward_trees(trees, cache)
    torch.testing.assert_close(active, full, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(wrong[1, :1], full[1, :1], atol=1e-3)


def test_row_copies_share_weights_not_state():
    """`row_copy`: the same modules and parameters (no weights copied), its own per-sequence state."""
    drafter = KnowsSome({(1, 2): [3]})
    drafter.reset(None)
    drafter.prompt, drafter.emitted = (1, 2), 5
    copy = row_copy(drafter)
    assert copy.layer is drafter.layer and copy.layer.weight.data_ptr() == drafter.layer.weight.data_ptr()
    assert copy.references is not drafter.references or copy.references == drafter.references
    copy.reset(None)
    assert (drafter.prompt, drafter.emitted) == ((1, 2), 5)
    assert (copy.prompt, copy.emitted) == (None, 1)


def test_builtin_drafter_row_copies_keep_their_own_state(tiny_target):
    """ngram keeps its table per sequence: two rows of ngram, refilled, still equal greedy decoding."""
    from specbench.registry import create_drafter

    jobs = jobs_of()
    refs = references(tiny_target, jobs)
    outputs = run_batch(tiny_target, create_drafter("ngram"), jobs, 2)
    assert mismatches(outputs, jobs, refs) == []


@pytest.mark.parametrize("name", ["medusa", "hydra", "eagle", "eagle3", "ctc", "ctc-ce"])
def test_batched_proposes_give_the_row_by_row_trees(tiny_target, drafter_for, name, monkeypatch):
    """The trained drafters' `propose_rows` (every row's tree grown in step; medusa: its heads once for every
    row; hydra: each depth's head once for every row's frontier; eagle, eagle3: each level's draft layer once
    for every row's frontier, a block-diagonal mask keeping rows apart; ctc, ctc-ce: every row's slots in one
    forward of the slot layer, each over its own context) proposes the trees each row's own
    `propose` gives, and a batch of their rows still equals greedy decoding; a planted leak between rows is
    caught (heads or ctc's slot streams reading the rows rolled by one; a mask pointing every eagle row's nodes
    at row 0's keys)."""
    drafter = drafter_for(name, tiny_target)
    budget = 24 if name.startswith("eagle") else 8  # eagle's trees reach below the root's children (the layer's part)

    def contexts(rows):
        out = []
        for prompt, row in zip(PROMPTS[:3], rows):
            row.reset(tiny_target.handle)
            logits, hidden = tiny_target.prefill(torch.tensor(prompt), kv.new_cache())  # [V], [L, H]
            root = int(logits.argmax())
            out.append((row, DraftContext(tokens=torch.tensor(prompt + [root]), root=root, hidden=hidden,
                                          target=tiny_target.handle, budget=budget, span=lambda _: contextlib.nullcontext())))
        return out

    def shape(tree):
        return tree.tokens.tolist(), tree.parents.tolist()

    rows = [drafter] + [row_copy(drafter) for _ in range(2)]
    batched = [shape(t) for t in drafter.propose_rows(contexts(rows))]
    alone = [shape(row.propose(ctx)) for row, ctx in contexts(rows)]
    assert batched == alone and len({str(t) for t in batched}) == 3  # three different rows, each its own tree
    jobs = jobs_of()
    refs = references(tiny_target, jobs)
    assert mismatches(run_batch(tiny_target, drafter, jobs, 3), jobs, refs) == []

    if name in ("eagle", "eagle3"):
        def first_rows_keys(*blocks):  # the planted bug: every row's nodes attend to row 0's keys
            mask = torch.zeros(sum(b.shape[0] for b in blocks), sum(b.shape[1] for b in blocks), dtype=torch.bool)
            mask[:, : blocks[0].shape[1]] = True
            return mask

        monkeypatch.setattr(torch, "block_diag", first_rows_keys)
        assert [shape(t) for t in drafter.propose_rows(contexts(rows))] != alone
        return
    # the planted bug: the heads (ctc: the slot streams) read the rows rolled by one
    module, part = (drafter.module.heads[0] if name == "hydra" else drafter.module,
                    "slot_inputs" if name.startswith("ctc") else "forward")
    real = getattr(module, part)
    monkeypatch.setattr(module, part, lambda h, *rest: real(h.roll(1, dims=0) if h.dim() == 2 else h, *rest))
    assert [shape(t) for t in drafter.propose_rows(contexts(rows))] != alone


# ---- the real default model ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def default_target(default_model_available):
    """The default model, loaded once for the module's three cases."""
    from specbench.model import load_target

    return load_target("default")


@pytest.mark.slow
@pytest.mark.parametrize("name,batch_size", [("vanilla", 2), ("ngram", 3), ("hydra", 4)])
def test_default_model_rows_equal_greedy(default_target, name, batch_size):
    """SmolLM2-135M (fp32): both turns of two MT-bench questions (4 jobs, 16-24 new tokens) through batches
    of 2-4 of vanilla, ngram and hydra: every job's ids equal transformers' greedy ``generate()``."""
    from specbench.prompts import PromptBuilder
    from specbench.registry import create_drafter
    from test_default_model import first_of_each_category, greedy_reference

    target = default_target
    builder = PromptBuilder(target.tokenizer)
    jobs, refs = [], {}
    for i, category in enumerate(("writing", "math")):
        question = first_of_each_category()[category]
        first = builder.build(question.turns[:1], [])
        first_ref = greedy_reference(target, first, 24)
        second = builder.build(question.turns[:2], [builder.answer_text(first_ref)])
        for turn, (ids, new) in enumerate(((first, 24), (second, 16))):
            jobs.append(Job(ids, new, key=(category, turn)))
            refs[tuple(ids)] = first_ref if turn == 0 else greedy_reference(target, second, new)
    outputs = run_batch(target, create_drafter(name), jobs, batch_size, budget=4)
    assert mismatches(outputs, jobs, refs) == []



def test_layer_taps_give_each_row_its_own_forward(llama_target):
    """Each row finds its own layer-tap states: its prefill by number and kind (run alone, before the other
    rows'), and its batch row of the step's forward, equal to what its own batch-1 tree forward records."""
    taps = llama_target.handle.taps
    taps.request([1])
    cache = llama_target.new_batch_cache(2, 64)
    numbers = []
    for row, prompt in enumerate(PROMPTS[:2]):
        llama_target.prefill_row(torch.tensor(prompt), cache, row)
        numbers.append(taps.forwards)
    for prompt, number in zip(PROMPTS[:2], numbers):  # both prefills stay readable after the second ran
        assert taps.states([1], forward=number, kind="prefill").shape[0] == len(prompt)
    trees = [DraftTree.chain(3, [7, 9]), DraftTree.chain(4, [8])]
    llama_target.forward_trees(trees, cache)
    assert taps.last_step == taps.forwards and taps.states([1], kind="prefill") is None  # a step, not a prefill
    step = taps.last_step
    batched = [taps.states([1], row=row, forward=step, kind="step")[: len(tree)] for row, tree in enumerate(trees)]
    for prompt, tree, mine in zip(PROMPTS[:2], trees, batched):
        alone = kv.new_cache()
        llama_target.prefill(torch.tensor(prompt), alone)
        llama_target.forward_tree(tree, alone)
        torch.testing.assert_close(mine, taps.states([1], kind="step"), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("context_vocab", [False, True])
def test_eagle3_rows_draft_what_each_drafts_alone(llama_target, tmp_path, context_vocab):
    """eagle3 reads the target's layer taps: at batch 3 with refill, every sequence proposes the very trees it
    proposes alone (its own prefill's and its own row's features, never another row's; with context_vocab its
    own sequence's extra columns), never falls back to running the target itself, and its ids equal plain
    greedy decoding."""
    from specbench.drafters.eagle3 import Eagle3Drafter, untrained_checkpoint

    stem = untrained_checkpoint(tmp_path / "e3", llama_target.handle, draft_vocab=60, seed=3)

    class Recording(Eagle3Drafter):
        trees: dict = {}  # class-wide: row copies record into it; prompt -> the trees proposed, in order
        own_forwards = [0]

        def propose(self, ctx):
            tree = super().propose(ctx)
            self.trees.setdefault(self._prompt, []).append((tree.tokens.tolist(), tree.parents.tolist()))
            return tree

        def propose_rows(self, rows):  # rows grown together (`grow_rows`) record their trees here
            trees = super().propose_rows(rows)
            if len(rows) > 1 and rows[0][1].budget > 1:
                for (drafter, _), tree in zip(rows, trees):
                    self.trees.setdefault(drafter._prompt, []).append((tree.tokens.tolist(), tree.parents.tolist()))
            return trees

        def reset(self, target):
            super().reset(target)
            self._prompt = None

        def target_features(self, ctx):
            if self._prompt is None:
                self._prompt = tuple(ctx.tokens[:-1].tolist())  # the first call: the prompt, then the root
            return super().target_features(ctx)

        def own_forward(self, ctx):
            self.own_forwards[0] += 1
            return super().own_forward(ctx)

    def drafter() -> Recording:
        return Recording(checkpoint=str(stem), context_vocab=context_vocab)

    jobs = [Job(list(p), m, key=i) for i, (p, m) in enumerate(zip(PROMPTS, MAX_NEW))]
    alone = {}
    for job in jobs:
        Recording.trees = {}
        generate(llama_target, drafter(), job.prompt_ids, job.max_new_tokens, 6)
        alone.update(Recording.trees)
    Recording.trees = {}
    outputs = {job.key: result.output_ids for job, result in generate_batch(llama_target, drafter(), jobs, 6, 3)}
    assert Recording.own_forwards == [0]
    assert Recording.trees == alone
    for job in jobs:
        assert outputs[job.key] == plain_greedy(llama_target.model, job.prompt_ids, job.max_new_tokens, {EOS})


def test_sampled_rows_follow_their_own_seed(llama_target):
    """At temperature > 0 each row samples from its own seeded stream: a batch of 3 (refilled) gives every
    job the ids batch 1 gives it from the same seed, so a sampled turn is reproduced from its seed whatever
    the batch size."""
    from specbench.registry import create_drafter
    from specbench.sampling import Sampling

    sampling = Sampling(temperature=0.5, top_k=5)
    jobs = [Job(list(p), m, seed=100 + i, key=i) for i, (p, m) in enumerate(zip(PROMPTS, MAX_NEW))]
    batched = {job.key: result.output_ids
               for job, result in generate_batch(llama_target, create_drafter("ngram"), jobs, 4, 3, sampling=sampling)}
    alone = {job.key: generate(llama_target, create_drafter("ngram"), job.prompt_ids, job.max_new_tokens, 4,
                               sampling=sampling, seed=job.seed).output_ids for job in jobs}
    assert batched == alone
    assert len({tuple(ids) for ids in alone.values()}) == len(jobs)
