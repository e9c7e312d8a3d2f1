"""Training of the eagle3 drafter with EAGLE-3's training-time test (TTT), on a distillation cache made with
``specbench distill --aux-layers`` (the target's states entering EAGLE-3's low, middle and high layers).

Follows SafeAILab/EAGLE's released trainer (``eagle/traineagle3/cnets.py`` at cb7e0841: the unrolled forward,
``ploss_weight``; the draft vocabulary from token counts), not copied. Checked against it: the features (the
states entering layers 2, N // 2, N - 3), the layer's inputs and residual, step j's query and key at position
t + j - 1 (the released attention rotates both at ``position_ids + lck``), the chain mask, the teacher and the
step weights. Where specbench differs, by choice: an anchor counts when x_{t+1} is a response token (the released
``dataprepare`` shifts the logits but not ``loss_mask``, so it counts x_t); the draft head starts from the
target's rows (the released one starts random); each sample's loss is a mean over its scored anchors (the
released one over every position of the batch); the optimiser is the shared loop's (AdamW, lr 1e-3, 50 warm-up
steps, no gradient clipping; the released config: lr 5e-5, 12,000 warm-up steps, betas (0.9, 0.95), clipping
0.5, 40 epochs).

**Training-time test.** The draft layer is unrolled ``ttt_steps`` times per anchor (`Eagle3Module.forward_unrolled`):
step 1 reads the fused target features, step j > 1 reads its own step j - 1 output, with the attention mask the
dynamic tree meets at inference (true context plus the anchor's own chain). At step j, anchor t is scored against
the target's next-token distribution at position t + j (the one predicting x_{t+j+1}), cut to the draft vocabulary
and renormalised, on anchors whose x_{t+1} is a response token and whose target's top token is in the draft
vocabulary (the released ``position_mask``):

    loss = sum_j decay^(j-1) * mean_t [ -sum_v p_target(v) log p_draft(v) ],   decay = 0.8 (``ploss_weight``)

specbench subtracts the teacher's entropy from each cross-entropy (a constant: the same gradient), so the
recorded losses are KL divergences, 0 for a draft that matches the target, and comparable across models.

**Draft vocabulary.** The ``draft_vocab`` most frequent response tokens of the train split (the released code
counts loss-masked tokens), topped up by the cache's overall ranking when fewer occur, sorted by id: d2t/t2d.
specbench starts the draft ``lm_head`` from the target's rows of those tokens (a warm start, its own choice).

**Context columns** (``context_vocab``, specbench's own, off by default). The drafter's ``context_vocab`` option
also scores the sequence's own tokens outside V' with the target's ``lm_head`` rows; on a checkpoint trained
without them it gains almost nothing (docs/decisions.md). With ``context_vocab`` the loss (and the learning curve)
takes the same columns: anchor t's columns are V' plus the sample's tokens x_0..x_{t+1} outside V' (what the
drafter has seen when it drafts from t), each the target's row; the teacher is cut to the same columns. The
recipe records it and the drafter then uses the columns by default. Measured: they then add 0.007-0.017 tau on
MT-bench (docs/training-runs/cpu-2026-11-29-eagle3-context).

**Learning curve.** The held-out acceptance is measured before training and after every epoch: the greedy
chain's acceptance along the held-out responses (the target's own greedy output, so a draft equal to the next
response token is exactly a token greedy verification accepts), by depth, and its expected tokens per step
(``heldout_chain_tau``), against training tokens seen. It goes to the recipe and to ``<out>.curve.json``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch

from specbench.drafters.draft_vocab import RANKING_KEY, DraftVocab
from specbench.drafters.eagle3 import Eagle3Module, build_module, eagle3_vocabulary, target_shape
from specbench.drafters.training.common import (
    CurveBatches,
    SampleTrainConfig,
    at_least,
    autocast,
    chain_scores,
    checked_manifest,
    load_warm_start,
    sample_training_data,
    train_loop,
    write_trained,
)
from specbench.drafters.training.distill import Sample, shard_paths, shard_tensors
from specbench.errors import SpecbenchError
from specbench.model import TargetModel

#: EAGLE-3's released training settings (``eagle/traineagle3/``): 7 unrolled steps, step j weighted 0.8^(j-1),
#: a 32000-token draft vocabulary.
TTT_STEPS, STEP_DECAY, DRAFT_VOCAB = 7, 0.8, 32000


@dataclass(kw_only=True)
class Eagle3TrainConfig(SampleTrainConfig):
    """How to train an eagle3 drafter: `SampleTrainConfig`'s fields and EAGLE-3's own."""

    method: str = "eagle3"
    ttt_steps: int = TTT_STEPS  # training-time test: steps the draft layer is unrolled on its own outputs
    step_decay: float = STEP_DECAY  # step j's loss weight is step_decay^(j-1)
    draft_vocab: int = DRAFT_VOCAB  # tokens the draft's own head scores (capped at the target's vocabulary)
    eval_depth: int = 5  # depth of the held-out chain acceptance (the learning curve)
    context_vocab: bool = False  # also train the sample's own tokens outside V' as columns (the target's rows)
    feature_weight: float = 0.0  # weight of EAGLE-1's feature regression on each step's output (EAGLE-3 has none)

    def validate(self) -> None:
        if self.method != "eagle3":
            raise SpecbenchError(f"Eagle3TrainConfig trains eagle3, not {self.method!r}")
        super().validate()
        at_least(self, 1, "ttt_steps", "draft_vocab", "eval_depth")
        at_least(self, 0, "feature_weight")
        if not 0 < self.step_decay <= 1:
            raise SpecbenchError(f"--step-decay must be in (0, 1], not {self.step_decay!r}")
        if self.train_vocab:
            raise SpecbenchError("--train-vocab does not apply to eagle3: its head scores its own --draft-vocab tokens")


def initial_state(stem: Path, layer_ids: list[int], target: TargetModel) -> tuple[dict, dict]:
    """(state dict, provenance) of a trained eagle3 checkpoint to go on training (`load_warm_start`): its weights,
    token ranking and draft vocabulary (d2t/t2d), which must read the cache's layers."""
    state, recipe, provenance = load_warm_start(stem, "eagle3", target, "heldout_chain_tau")
    if recipe["hyperparameters"].get("layer_ids") != layer_ids:
        raise SpecbenchError(f"--init-from {stem}: it reads layers {recipe['hyperparameters'].get('layer_ids')}, "
                             f"the cache holds {layer_ids}")
    return state, provenance


def draft_token_ids(cache: Path, ranking: torch.Tensor, size: int) -> torch.Tensor:
    """LongTensor[V'] (sorted): the ``size`` most frequent response tokens of the train split, ties and any
    shortfall filled in ``ranking``'s order (token ids by count over prompts and responses)."""
    vocab = ranking.numel()
    counts = torch.zeros(vocab, dtype=torch.long)
    for path in shard_paths(cache, "train"):
        tensors = shard_tensors(path, ("input_ids", "offsets", "prompt_lens"))
        offsets, prompt_lens = tensors["offsets"].tolist(), tensors["prompt_lens"].tolist()
        for i, prompt_len in enumerate(prompt_lens):
            response = tensors["input_ids"][offsets[i] + prompt_len : offsets[i + 1]].long()
            counts += torch.bincount(response, minlength=vocab)
    place = torch.empty(vocab, dtype=torch.long)
    place[ranking.long()] = torch.arange(vocab)  # each token's place in the overall ranking
    order = sorted(range(vocab), key=lambda token: (-int(counts[token]), int(place[token])))
    return torch.tensor(order[: min(size, vocab)], dtype=torch.long).sort().values


def unrolled_outputs(module: Eagle3Module, target: TargetModel, sample: Sample, levels: int,
                     first: int = 0) -> list[torch.Tensor]:
    """h per unrolled step, each [L - 1 - first, H], for anchors first..L-2 of ``sample`` (the earlier ones only
    give the true context; rows whose later steps run past the sample's end read zero embeddings; callers drop
    them)."""
    if sample.aux is None:
        raise SpecbenchError("eagle3 trains on the target's auxiliary hidden states: distill with --aux-layers")
    dtype = next(module.parameters()).dtype
    anchors = len(sample.input_ids) - 1
    aux = sample.aux[:anchors].to(target.device, dtype)  # [P, k H]
    with torch.no_grad():
        embeddings = target.handle.embed_tokens(sample.input_ids[1:].to(target.device)).to(dtype)  # [P, H]
    padding = embeddings.new_zeros(levels - 1, embeddings.shape[1])
    return module.forward_unrolled(aux, torch.cat([embeddings, padding]), levels, first)


def context_columns(module: Eagle3Module, sample: Sample, context: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids [C], first position [C]) of the sample's distinct tokens outside the draft vocabulary, each with the
    position where it first occurs; empty without ``context``."""
    ids = sample.input_ids.to(module.t2d.device).long()  # [L]
    if not context:
        return ids.new_zeros(0), ids.new_zeros(0)
    outside = ~module.t2d[ids]
    extra = ids[outside].unique()  # [C], ascending
    positions = torch.arange(len(ids), device=ids.device)[outside]
    first = torch.full((module.t2d.shape[0],), len(ids), dtype=torch.long, device=ids.device)
    first.scatter_reduce_(0, ids[outside], positions, "amin")
    return extra, first[extra]


def sample_vocabulary(module: Eagle3Module, target: TargetModel, sample: Sample, context: bool
                      ) -> tuple[DraftVocab, torch.Tensor, torch.Tensor]:
    """(the drafter's vocabulary having followed the whole sample (`eagle3_vocabulary`), its context columns' ids
    [C] and first positions [C] (`context_columns`), in its column order)."""
    vocab = eagle3_vocabulary(module, target.lm_head, context)
    extra, first = context_columns(module, sample, context)
    vocab.follow_context(extra)  # adds them in this order: distinct, ascending, none in V'
    return vocab, extra, first


#: the logit of a column an anchor has not seen (finite, so 0 * log 0 terms stay 0, not nan)
HIDDEN_COLUMN = -1e9


def column_mask(draft_size: int, first: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """[R, V' + C] additive mask: 0 where anchor ``anchors`` [R] has seen the column's token (every V' column;
    a context column once its token occurred at or before anchor t + 1), HIDDEN_COLUMN elsewhere."""
    seen = first[None, :] <= anchors[:, None] + 1  # [R, C]
    mask = torch.zeros(len(anchors), draft_size + len(first), device=anchors.device)
    mask[:, draft_size:] = torch.where(seen, 0.0, HIDDEN_COLUMN)
    return mask


def ttt_loss(module: Eagle3Module, target: TargetModel, sample: Sample, steps: int, decay: float,
             context: bool = False, feature_weight: float = 0.0) -> tuple[torch.Tensor, list[float]] | None:
    """(the weighted TTT loss, each step's unweighted KL) of one sample; None without a response anchor.
    ``context``: also score the sample's own tokens outside V' (`context_columns`), each where the anchor has
    seen it. ``feature_weight``: add that times the smooth L1 distance of each step's normed output to the
    target's own feature there (`feature_loss`), with the step's weight."""
    length, start = len(sample.input_ids), sample.prompt_len - 1
    if length - 1 - start < 1:
        return None
    vocab, extra, first = sample_vocabulary(module, target, sample, context)
    columns = module.token_ids() if vocab.columns is None else vocab.columns  # [V' + C] token id of each column
    with torch.no_grad():
        full = target.lm_head(sample.hidden[start + 1 : length].to(target.device, torch.float32)).float()  # [n, V]
        teacher_logits = full[:, columns.to(full.device)]  # [n, V' + C] positions start+1 .. L-1
        top = full.argmax(dim=-1).to(columns.device)  # [n]
    outs = unrolled_outputs(module, target, sample, steps, start)  # steps x [L - 1 - start, H]
    total, per_step = 0.0, []
    for step, h in enumerate(outs, start=1):
        rows = length - start - step  # anchors start .. L-1-step
        if rows < 1:
            break
        anchors = torch.arange(start, start + rows, device=columns.device)
        mask = column_mask(module.d2t.shape[0], first.to(columns.device), anchors)  # [rows, V' + C]
        window = slice(step - 1, step - 1 + rows)
        with torch.no_grad():  # per step: (anchor a, step j)'s teacher is position a+j's logits over a's columns
            teacher_log = (teacher_logits[window] + mask.to(full.device)).log_softmax(dim=-1)  # [rows, V' + C]
            teacher = teacher_log.exp()
            entropy = -(teacher * teacher_log).sum(dim=-1)  # [rows]
            # the target's top token is one of the anchor's columns
            in_vocab = ((columns[None, :] == top[window, None]) & (mask == 0)).any(dim=-1).float().to(full.device)
        logits = vocab.logits(module.norm(h[:rows])).float()  # [rows, V' + C] anchors start..
        log_p = (logits + mask.to(logits.device)).log_softmax(dim=-1)
        cross_entropy = -(teacher * log_p).sum(dim=-1)  # [rows]
        loss = (in_vocab * (cross_entropy - entropy)).mean()  # KL: the CE's gradient, 0 when exact
        per_step.append(loss.item())
        if feature_weight:
            loss = loss + feature_weight * feature_loss(module, target, sample, h[:rows], start + step)
        total = total + decay ** (step - 1) * loss
    return total, per_step


def feature_loss(module: Eagle3Module, target: TargetModel, sample: Sample, h: torch.Tensor, first: int
                 ) -> torch.Tensor:
    """Smooth L1 distance of the draft's normed outputs ``h`` [R, H] to the target's final features (what its
    ``lm_head`` scores) at positions first..first+R-1: EAGLE-1's regression, a dense signal per position that
    EAGLE-3 dropped for scaling to large data (specbench's option for little data, off by default)."""
    truth = sample.hidden[first : first + len(h)].to(target.device, torch.float32)  # [R, H]
    return torch.nn.functional.smooth_l1_loss(module.norm(h).float(), truth)


@torch.no_grad()
def chain_acceptance(module: Eagle3Module, target: TargetModel, samples: Iterable[Sample], levels: int,
                     context: bool = False) -> dict:
    """Held-out acceptance of the greedy draft chain by depth (`chain_scores`): the draft unrolled on its own
    features as in training-time test (see the module docstring); ``context`` as `ttt_loss`'s."""

    def drafted(sample: Sample, start: int, end: int) -> list[torch.Tensor]:
        vocab, _, first = sample_vocabulary(module, target, sample, context)
        mask = column_mask(module.d2t.shape[0], first, torch.arange(start, end, device=module.d2t.device))
        outs = unrolled_outputs(module, target, sample, levels, start)  # levels x [L - 1 - start, H]
        return [vocab.token_ids((vocab.logits(module.norm(h[: end - start])).float() + mask).argmax(dim=-1))
                for h in outs]  # levels x [R]

    return chain_scores(module, samples, levels, drafted)


def train_eagle3(config: Eagle3TrainConfig, target: TargetModel, progress: bool = True) -> dict:
    """Build the draft vocabulary, train with TTT on `train_loop` (each epoch checkpointed, a rerun resumes),
    measure the held-out acceptance per epoch, write the checkpoint, its recipe and ``<out>.curve.json``."""
    config.validate()
    manifest = checked_manifest(Path(config.cache), target)
    layer_ids = manifest["config"].get("aux_layers")
    if not layer_ids:
        raise SpecbenchError(f"{config.cache} holds no auxiliary hidden states; distill it with --aux-layers")
    loaded, provenance = initial_state(Path(config.init_from), layer_ids, target) if config.init_from else ({}, None)
    _, ranking, _, _, train, heldout = sample_training_data(config, target, loaded.pop(RANKING_KEY, None), manifest)
    if loaded:  # its own draft vocabulary, whatever this cache's counts say
        token_ids = torch.arange(loaded["d2t"].shape[0]) + loaded["d2t"].cpu()
    else:
        token_ids = draft_token_ids(Path(config.cache), ranking, config.draft_vocab)
    shape = target_shape(target.handle, Path(config.out)) | {"draft_vocab": len(token_ids), "layer_ids": layer_ids}
    module = build_module(shape, target.handle).to(target.device)
    module.set_vocabulary(token_ids)
    with torch.no_grad():
        if loaded:
            module.load_state_dict(loaded)
        else:
            module.lm_head.weight.copy_(target.lm_head.weight[token_ids.to(target.device)])  # warm start [V', H]

    def sample_loss(sample: Sample, generator: torch.Generator) -> torch.Tensor | None:
        out = ttt_loss(module, target, sample, config.ttt_steps, config.step_decay, config.context_vocab,
                       config.feature_weight)
        return None if out is None else out[0]

    def measure() -> dict:
        return chain_acceptance(module, target, heldout, config.eval_depth, config.context_vocab)

    tokens_before = provenance["tokens_seen"] if provenance else 0
    start_point = {"epoch": 0, "tokens_seen": tokens_before} | measure()
    data = CurveBatches(train, config.samples_per_step, config.seed, sample_loss, measure, tokens_before)
    history, seconds = train_loop(module, data, target, config, progress)
    with autocast(target.device, config.dtype):
        metrics = measure()
        step_losses = [ttt_loss(module, target, sample, config.ttt_steps, config.step_decay, config.context_vocab)
                       for sample in heldout]
    per_step = [[losses[j] for _, losses in filter(None, step_losses) if j < len(losses)] for j in range(config.ttt_steps)]
    metrics["heldout_step_loss"] = [round(sum(x) / len(x), 4) if x else None for x in per_step]
    curve = data.write_curve(Path(config.out), start_point, history, len(heldout),
                             "held-out greedy chain acceptance along the target's own responses (chain_acceptance)")
    extra = {"initialised_from": provenance} if provenance else {}
    return write_trained(Path(config.out), module, ranking, target, config, manifest,
                         {"train_samples": len(train), "heldout_samples": len(heldout)}, metrics | {"curve": curve},
                         history, seconds, **shape, **extra)
