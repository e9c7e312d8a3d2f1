"""Training of the CTC-drafter's Attention Draft Module on a self-distillation cache (target frozen).

Every response position s of a distilled sample whose next ``num_labels`` (N) tokens after the root are
known is an *anchor*: the module sees the context 0..s (hidden states fused with the following token's
embedding; the last one carries the root x_{s+1}) and its T slots are trained against the target's own
next tokens x_{s+2} .. x_{s+1+N}:

- ``ctc``: CTC loss of the T slot distributions over V + 1 classes (blank = class V) against those N
  tokens; N < T leaves room for blanks and for repeats that need a blank between them;
- ``ctc-ce`` (the ablation): the same module without the blank; slot j is trained with cross-entropy on
  x_{s+2+j} (all T slots, so the ablation drafts as deep as it can).

All anchors of a sample go through one forward (a mask keeps each anchor's slots to its own context).
Trained on the loop every method shares (`common.train_loop`, with `common.SampleBatches`). The recipe
records held-out loss and an offline acceptance estimate per tree budget: the CTC transform's tree at each
held-out position, walked along the target's true continuation (what greedy verification would accept),
averaged over anchors and over the steps of a decode walk (`evaluate`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from specbench.checkpoint import checkpoint_files
from specbench.drafters.ctc import CTCCrossEntropyDrafter, CTCDrafter
from specbench.drafters.ctc_module import AttentionDraftModule, build_module
from specbench.drafters.ctc_transform import DEFAULT_TOP_K, candidate_tree, prefix_beam_search, search_beam, slot_candidates
from specbench.drafters.draft_vocab import RANKING_KEY, DraftVocab
from specbench.drafters.training.common import (
    SampleBatches,
    SampleTrainConfig,
    at_least,
    autocast,
    checked_manifest,
    load_warm_start,
    sample_training_data,
    train_loop,
    write_trained,
)
from specbench.drafters.training.distill import Sample, iter_samples
from specbench.errors import SpecbenchError
from specbench.metrics import decode_walk
from specbench.model import TargetModel
from specbench.tree import DraftTree

IGNORE = -100
METHODS = ("ctc", "ctc-ce")


@dataclass(kw_only=True)
class CTCTrainConfig(SampleTrainConfig):
    """How to train a ctc or ctc-ce drafter (``method``): `SampleTrainConfig`'s fields and the module's own."""

    num_slots: int = 4  # T (see docs/ctc.md)
    num_labels: int = 2  # N (ctc); anchors need N known tokens after the root
    slot_blocks: bool = True  # each slot's own output block
    anchors_per_sample: int | None = 32  # train on a random subset of each sample's anchors (None or 0: all)
    # one forward per step over the step's samples packed end to end (same losses and gradients). None:
    # on an accelerator only; on a CPU the packed attention's larger masked matrix made a step 1.8x slower
    packed: bool | None = None
    # transform settings of the offline acceptance estimate (the drafter's defaults; beam None: per budget)
    top_k: int = DEFAULT_TOP_K
    beam: int | None = None
    min_prob: float = 1e-3
    eval_budgets: list[int] = field(default_factory=lambda: [4, 8, 16, 32])

    def validate(self) -> None:
        if self.method not in METHODS:
            raise SpecbenchError(f"unknown CTC method {self.method!r}; choose {', '.join(METHODS)}")
        super().validate()
        at_least(self, 1, "num_slots", "num_labels", "top_k")
        at_least(self, 1, "beam", optional=True)
        if self.anchors_per_sample is not None and not self.anchors_per_sample >= 0:
            raise SpecbenchError(f"--anchors-per-sample must be 0 (all) or more, not {self.anchors_per_sample!r}")
        if self.method == "ctc" and self.num_labels >= self.num_slots:
            raise SpecbenchError(f"--num-labels ({self.num_labels}) must be below --num-slots ({self.num_slots}) for CTC")
        if not 0 <= self.min_prob < 1:
            raise SpecbenchError(f"--min-prob must be in [0, 1), not {self.min_prob!r}")
        if not self.eval_budgets or not all(isinstance(b, int) and b >= 1 for b in self.eval_budgets):
            raise SpecbenchError(f"--eval-budgets must be tree budgets of at least 1, not {self.eval_budgets!r}")


def anchors_of(sample: Sample, horizon: int) -> torch.Tensor:
    """Positions s with a response root x_{s+1} and ``horizon`` known tokens after it."""
    start = sample.prompt_len - 1
    return torch.arange(start, max(start, len(sample.input_ids) - 1 - horizon))


def sequence_inputs(module: AttentionDraftModule, target: TargetModel, sample: Sample) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's inputs for ``sample``: hidden states [L-1, H] and the embeddings of the tokens that
    followed them [L-1, H], on the target's device in the module's dtype (float32 master weights)."""
    ids = sample.input_ids.to(target.device)
    dtype = next(module.parameters()).dtype
    with torch.no_grad():
        next_embeddings = target.handle.embed_tokens(ids[1:]).to(dtype)
    return sample.hidden[:-1].to(target.device, dtype), next_embeddings


def sequence_logits(module: AttentionDraftModule, target: TargetModel, sample: Sample, anchors: torch.Tensor,
                    vocab: DraftVocab | None = None) -> torch.Tensor:
    """Slot logits [A, T, V' (+1)] of ``anchors`` in ``sample``, over ``vocab`` (default: all V tokens)."""
    features = module.forward_sequence(*sequence_inputs(module, target, sample), anchors.to(target.device))
    return module.logits(features, vocab.logits if vocab is not None else target.lm_head)


def chosen_anchors(sample: Sample, num_labels: int, keep: int | None = None,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """The sample's anchors, or ``keep`` of them drawn with ``generator`` (sorted); empty if it has none."""
    anchors = anchors_of(sample, num_labels)
    if keep is not None and len(anchors) > keep:
        anchors = anchors[torch.randperm(len(anchors), generator=generator)[:keep].sort().values]
    return anchors


def sample_loss(module: AttentionDraftModule, target: TargetModel, sample: Sample, num_labels: int,
                keep: int | None = None, generator: torch.Generator | None = None,
                vocab: DraftVocab | None = None) -> torch.Tensor | None:
    """Mean loss over the sample's anchors, or over ``keep`` of them drawn with ``generator``."""
    losses = packed_losses(module, target, [sample], num_labels, keep, generator, vocab)  # a pack of one
    return None if losses is None else losses[0]


def packed_losses(module: AttentionDraftModule, target: TargetModel, samples: list[Sample], num_labels: int,
                  keep: int | None = None, generator: torch.Generator | None = None,
                  vocab: DraftVocab | None = None) -> torch.Tensor | None:
    """`sample_loss` of each sample with anchors [B'], computed in one forward over the samples packed end
    to end (anchors are drawn in the same order, so the result equals the per-sample losses); None if no
    sample has an anchor. One forward per step instead of one per sample: on a GPU, where this small
    module is bound by kernel launches and host syncs, that is most of a step's time."""
    kept, anchors, hidden, next_embeddings, starts, offset = [], [], [], [], [], 0
    for sample in samples:
        chosen = chosen_anchors(sample, num_labels, keep, generator)
        if len(chosen) == 0:
            continue
        sample_hidden, sample_next = sequence_inputs(module, target, sample)  # [L-1, H] each
        hidden.append(sample_hidden)
        next_embeddings.append(sample_next)
        rows = len(sample_hidden)
        starts.append(torch.full((rows,), offset, dtype=torch.long))
        anchors.append(chosen + offset)
        kept.append((sample, chosen))
        offset += rows
    if not kept:
        return None
    features = module.forward_sequence(torch.cat(hidden), torch.cat(next_embeddings),
                                       torch.cat(anchors).to(target.device), torch.cat(starts))  # [A, T, H]
    logits = module.logits(features, vocab.logits if vocab is not None else target.lm_head)  # [A, T, C]
    losses, first = [], 0
    for sample, chosen in kept:
        losses.append(anchor_loss(module, logits[first : first + len(chosen)], sample, chosen, num_labels, vocab))
        first += len(chosen)
    return torch.stack(losses)


def anchor_loss(module: AttentionDraftModule, logits: torch.Tensor, sample: Sample, anchors: torch.Tensor,
                num_labels: int, vocab: DraftVocab | None = None) -> torch.Tensor:
    """CTC loss (or, without a blank, per-slot CE) of slot logits [A, T, C] of ``anchors`` in ``sample``.

    With a cut ``vocab`` the logits' columns are its tokens (then the blank); labels are mapped into it, a
    CE label outside it is ignored and a CTC anchor with any label outside it is left out (CTC cannot skip
    a label inside its target sequence)."""
    logits = logits.float()
    a, t, classes = logits.shape
    ids = sample.input_ids.to(logits.device)
    if module.blank is not None:
        labels = ids[anchors[:, None].to(ids.device) + 2 + torch.arange(num_labels, device=ids.device)]  # [A, N]
        if vocab is not None:
            labels = vocab.label_indices(labels, IGNORE)
            inside = (labels != IGNORE).all(dim=1)  # [A]
            logits, labels, a = logits[inside], labels[inside], int(inside.sum())
            if a == 0:
                return logits.sum() * 0.0  # no anchor fits the cut: a zero loss that keeps the graph
        log_probs = logits.log_softmax(dim=-1).transpose(0, 1)  # [T, A, C]
        return nn.functional.ctc_loss(log_probs, labels, torch.full((a,), t, dtype=torch.long),
                                      torch.full((a,), num_labels, dtype=torch.long), blank=classes - 1,
                                      reduction="mean", zero_infinity=True)
    padded = torch.cat([ids, torch.full((t + 2,), IGNORE, dtype=ids.dtype, device=ids.device)])
    labels = padded[anchors[:, None].to(ids.device) + 2 + torch.arange(t, device=ids.device)]  # [A, T]
    labels = vocab.label_indices(labels, IGNORE) if vocab is not None else labels
    return nn.functional.cross_entropy(logits.reshape(-1, classes), labels.reshape(-1), ignore_index=IGNORE)


def accepted_length(tree: DraftTree, truth: list[int]) -> int:
    """Tokens greedy verification emits when the target's continuation after the root is ``truth``."""
    children: dict[tuple[int, int], int] = {}
    for node, parent in enumerate(tree.parents_list[1:], start=1):
        children.setdefault((parent, int(tree.tokens[node])), node)
    node, matched = 0, 0
    for token in truth:
        node = children.get((node, token), -1)
        if node < 0:
            break
        matched += 1
    return matched + 1


@torch.no_grad()
def evaluate(module: AttentionDraftModule, target: TargetModel, samples: list[Sample], config: CTCTrainConfig,
             vocab: DraftVocab | None = None) -> dict:
    """Held-out loss and offline acceptance of the transform's trees per tree budget, the slots scoring
    ``vocab`` (default: all tokens) as the drafter will at run time. Two acceptance figures:

    - ``heldout_tau_by_budget``: the mean over anchors (positions with the whole horizon known) of the
      tokens the tree would emit there;
    - ``heldout_walk_tau_by_budget``: the decode walk, tokens per step when the drafter decodes the
      held-out responses as the loop does (a step at root x_{s+1} emits its accepted drafts and the bonus,
      none past the response's end; the next step is rooted at the bonus). Decoding skips the positions
      inside an accepted run, so the walk weights hard positions as a greedy replay does, and is lower.
    """
    module.eval()
    horizon = max(config.num_slots, config.num_labels)
    losses, accepted = [], {b: [] for b in config.eval_budgets}
    walk_tokens, walk_steps = dict.fromkeys(config.eval_budgets, 0), dict.fromkeys(config.eval_budgets, 0)
    transform_s, transformed, anchors_seen = 0.0, 0, 0
    beams = {b: search_beam(config.beam, b) for b in config.eval_budgets}
    widths = set(beams.values())  # one search per distinct width
    for sample in samples:
        positions = anchors_of(sample, 1)  # every root a decode step can have (a token left to emit)
        if len(positions) == 0:
            continue
        logits = sequence_logits(module, target, sample, positions, vocab)  # [P, T, C], one forward for all
        loss_anchors = len(anchors_of(sample, config.num_labels))  # the loss's anchors are the first ones,
        if loss_anchors:  # then those with the whole horizon known (the mean over anchors)
            losses.append(anchor_loss(module, logits[:loss_anchors], sample, positions[:loss_anchors],
                                      config.num_labels, vocab).item())
        scored = len(anchors_of(sample, horizon))
        ids = sample.input_ids.tolist()
        emitted: dict[int, list[int]] = {b: [] for b in config.eval_budgets}  # per position, as decoding would
        for index, (row, s) in enumerate(zip(logits, positions.tolist())):
            began = time.perf_counter()
            tokens, probs, blanks = slot_candidates(row, module.blank is not None, config.top_k, config.min_prob,
                                                    vocab.ids if vocab is not None else None)
            searched = {beam: prefix_beam_search(tokens, probs, blanks, beam) for beam in widths}
            trees = {b: candidate_tree(ids[s + 1], searched[beams[b]], b) for b in config.eval_budgets}
            transform_s += time.perf_counter() - began
            transformed += 1
            truth = ids[s + 2 : s + 2 + horizon]  # shorter near the response's end
            for b, tree in trees.items():
                length = accepted_length(tree, truth)
                emitted[b].append(min(length, len(ids) - 2 - s))  # no bonus past the last token
                if index < scored:
                    accepted[b].append(length)
            anchors_seen += index < scored
        for b, lengths in emitted.items():
            tokens, steps = decode_walk(len(lengths), lengths.__getitem__)
            walk_tokens[b], walk_steps[b] = walk_tokens[b] + tokens, walk_steps[b] + steps
    return {
        "heldout_loss": sum(losses) / max(1, len(losses)),
        "heldout_anchors": anchors_seen,
        "heldout_tau_by_budget": {str(b): sum(v) / max(1, len(v)) for b, v in accepted.items()},
        "heldout_walk_tau_by_budget": {str(b): walk_tokens[b] / max(1, walk_steps[b]) for b in config.eval_budgets},
        "transform_ms_per_anchor": 1000 * transform_s / max(1, transformed) / len(config.eval_budgets),
    }


def train_ctc(config: CTCTrainConfig, target: TargetModel, progress: bool = True) -> dict:
    """Train on `train_loop` (each epoch checkpointed, a rerun resumes after the newest), score the held-out
    split, write the checkpoint and its recipe."""
    config.validate()
    if config.packed is None:  # resolved here, so the recipe records which path ran
        config.packed = target.device.type != "cpu"
    loaded, provenance = initial_state(Path(config.init_from), config, target) if config.init_from else ({}, None)
    manifest, ranking, vocab, eval_vocab, train, heldout = sample_training_data(config, target, loaded.pop(RANKING_KEY, None))
    module = build_module(config.method, target.config.hidden_size, target.config.num_attention_heads, config.num_slots,
                          config.slot_blocks)
    if loaded:
        module.load_state_dict(loaded)
    module = module.to(target.device)
    keep = config.anchors_per_sample or None
    if config.packed:  # the step's samples in one forward
        losses = {"batch_losses": lambda batch, picks: packed_losses(module, target, batch, config.num_labels, keep,
                                                                     picks, vocab)}
    else:  # a forward (and backward) per sample
        losses = {"sample_loss": lambda sample, picks: sample_loss(module, target, sample, config.num_labels, keep,
                                                                   picks, vocab)}
    data = SampleBatches(train, config.samples_per_step, config.seed, **losses)
    history, seconds = train_loop(module, data, target, config, progress)
    with autocast(target.device, config.dtype):  # scored over the vocabulary inference drafts over by default
        metrics = evaluate(module, target, heldout, config, eval_vocab)
    metrics["heldout_vocab"] = eval_vocab.size
    extra = {"initialised_from": provenance} if provenance else {}
    return write_trained(Path(config.out), module, ranking, target, config, manifest,
                         {"train_samples": len(train), "heldout_samples": len(heldout)}, metrics, history, seconds,
                         num_heads=target.config.num_attention_heads, **extra)


def initial_state(stem: Path, config: CTCTrainConfig, target: TargetModel) -> tuple[dict, dict]:
    """The weights (with their token ranking, so the draft vocabulary stays the one they were trained over)
    and provenance of a trained checkpoint to continue from (`load_warm_start`): same method, T and slot blocks."""
    state, recipe, provenance = load_warm_start(stem, config.method, target, "heldout_loss")
    hyper = recipe["hyperparameters"]
    for name in ("num_slots", "slot_blocks"):
        if hyper.get(name, True) != getattr(config, name):
            raise SpecbenchError(f"--init-from {stem}: its {name} is {hyper.get(name)}, not {getattr(config, name)}")
    return state, provenance


def ctc_recipe(stem: Path) -> dict:
    """The recipe of a trained ctc/ctc-ce checkpoint; SpecbenchError if it is missing or of another method."""
    recipe_path = checkpoint_files(stem)[1]
    if not recipe_path.is_file():
        raise SpecbenchError(f"{stem}: no checkpoint recipe {recipe_path}")
    recipe = json.loads(recipe_path.read_text(encoding="utf-8"))
    if recipe.get("method") not in METHODS:
        raise SpecbenchError(f"{stem}: not a ctc or ctc-ce checkpoint ({recipe_path.name}: method {recipe.get('method')})")
    return recipe


def rescore(stem: Path, cache: Path, target: TargetModel, budgets: list[int] | None = None) -> dict:
    """Held-out loss and offline tau (`evaluate`: mean over anchors and decode walk) of a trained ctc/ctc-ce
    checkpoint on ``cache``'s held-out split, searched with today's defaults, so that checkpoints whose
    recipes were scored with another search (before 2026-11-24: top_k 4, beam 16) or before the walk
    existed compare on equal terms. The checkpoint and its recipe stay as
    they are; the slots score the draft vocabulary its recorded held-out metrics were scored over."""
    recipe = ctc_recipe(stem)
    checked_manifest(Path(cache), target)
    drafters = {"ctc": CTCDrafter, "ctc-ce": CTCCrossEntropyDrafter}
    drafter = drafters[recipe["method"]](checkpoint=str(stem), draft_vocab=recipe["metrics"].get("heldout_vocab"))
    drafter.reset(target.handle)
    hyper = recipe["hyperparameters"]
    config = CTCTrainConfig(method=recipe["method"], cache=str(cache), out=str(stem), num_slots=hyper["num_slots"],
                            num_labels=hyper["num_labels"])
    if budgets:
        config.eval_budgets = list(budgets)
    return evaluate(drafter.module, target, list(iter_samples(Path(cache), "heldout")), config, drafter.vocab)
