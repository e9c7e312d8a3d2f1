"""Training of head drafters (medusa, hydra) on a self-distillation cache, with the target frozen.

Every response position t of a distilled sample gives one example: the target's hidden state h_t (which
produced token x_{t+1}, the root) and the window x_{t+1} .. x_{t+1+K}. Head k is trained with
cross-entropy against x_{t+1+k}, the target's own token k places after the root (Medusa); Hydra's heads
also see the embeddings of x_{t+1} .. x_{t+k} (teacher forcing). Logits come from the target's frozen
``lm_head``. The heads train on the loop every method shares (`common.train_loop`; `HeadBatches` is
their side of it: batches of positions and their loss); held-out per-head top-k accuracy decides the
static tree at inference.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from specbench.drafters.draft_vocab import DraftVocab
from specbench.drafters.hydra import HydraHeads
from specbench.drafters.medusa import DEFAULT_MAX_RANK, HeadDrafter, MedusaHeads
from specbench.drafters.static_tree import StaticTree, decode_walk_tau
from specbench.drafters.training.common import (
    EpochBatches,
    StepLoss,
    TrainConfig,
    at_least,
    autocast,
    checked_manifest,
    freeze,
    load_warm_start,
    train_loop,
    training_vocabularies,
    write_trained,
)
from specbench.drafters.training.distill import Sample, iter_samples
from specbench.errors import SpecbenchError
from specbench.model import TargetModel

IGNORE = -100
MODULES = {"medusa": MedusaHeads, "hydra": HydraHeads}


LOSSES = ("greedy", "teacher")


@dataclass(kw_only=True)
class HeadTrainConfig(TrainConfig):
    """How to train medusa or hydra heads (``method``): `TrainConfig`'s fields and the heads' own."""

    epochs: int = 2
    num_heads: int = 4
    num_layers: int = 1
    batch_size: int = 256  # response positions per optimiser step
    head_decay: float = 0.8  # loss weight of head k is head_decay ** (k - 1), as in Medusa
    max_rank: int = 10
    max_train_positions: int | None = None
    loss: str = "greedy"  # "greedy": CE on the target's tokens; "teacher": CE on the target's distributions (Hydra++),
    # over the train vocabulary when there is one (renormalised there)
    prefix_heads: int = 0  # hydra: > 0 adds Hydra++'s prefix attention layer with that many attention heads
    freeze_loaded: bool = False  # with init_from: train only the heads the checkpoint lacks (extend a drafter)
    own_lm_heads: bool = False  # each head its own output projection over the train vocabulary, initialised
    # from the target's lm_head rows (Medusa-1's and Hydra's released layout), instead of the shared frozen one

    def validate(self) -> None:
        if self.method not in MODULES:
            raise SpecbenchError(f"unknown head method {self.method!r}; choose {', '.join(MODULES)}")
        super().validate()
        at_least(self, 1, "num_heads", "num_layers", "batch_size", "max_rank")
        at_least(self, 1, "max_train_positions", optional=True)
        at_least(self, 0, "prefix_heads")
        if not self.head_decay > 0:
            raise SpecbenchError(f"--head-decay must be positive, not {self.head_decay!r}")
        if self.loss not in LOSSES:
            raise SpecbenchError(f"--loss must be {' or '.join(LOSSES)}, not {self.loss!r}")
        if self.prefix_heads and self.method != "hydra":
            raise SpecbenchError("prefix attention (--prefix-heads) is a hydra option")
        if self.freeze_loaded and not self.init_from:
            raise SpecbenchError("--freeze-loaded needs --init-from (the checkpoint whose heads stay fixed)")


def module_dtype(module: nn.Module) -> torch.dtype:
    return next(module.parameters()).dtype


def response_positions(sample: Sample) -> tuple[int, int]:
    """[start, end): positions t whose next token x_{t+1} is a response token (the root of a draft)."""
    return sample.prompt_len - 1, len(sample.input_ids) - 1


def sample_windows(sample: Sample, lookahead: int) -> torch.Tensor:
    """windows [P, lookahead + 1]: x_{t+1} .. x_{t+1+lookahead} for each response position t (IGNORE-padded)."""
    start, end = response_positions(sample)
    padded = torch.cat([sample.input_ids, torch.full((lookahead + 1,), IGNORE, dtype=torch.long)])
    return padded[torch.arange(start, end)[:, None] + 1 + torch.arange(lookahead + 1)]


def position_dataset(cache: Path, split: str, lookahead: int, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """hidden [N, H] (float16) and windows [N, lookahead + 1] (x_{t+1} .. x_{t+1+lookahead}, IGNORE-padded)."""
    hidden, windows = [], []
    count = 0
    for sample in iter_samples(cache, split):
        start, end = response_positions(sample)
        if end <= start:
            continue
        windows.append(sample_windows(sample, lookahead))
        hidden.append(sample.hidden[start:end])
        count += end - start
        if limit is not None and count >= limit:
            break
    if not hidden:
        raise SpecbenchError(f"{cache}: no {split} samples")
    h, w = torch.cat(hidden), torch.cat(windows)
    return (h[:limit], w[:limit]) if limit else (h, w)


def head_logits(module: nn.Module, target: TargetModel, hidden: torch.Tensor, windows: torch.Tensor,
                vocab: DraftVocab | None = None, heads: list[int] | None = None) -> torch.Tensor:
    """Logits [K', B, V'] of ``heads`` (default: all K) for hidden [B, H] and windows [B, K + 1], over
    ``vocab`` (default: the whole vocabulary, V' = V)."""
    k = len(module.heads)
    path_tokens = windows[:, :k].clamp(min=0)  # [B, K] (padding -> token 0, its labels are ignored)
    with torch.no_grad():
        path_embeddings = target.handle.embed_tokens(path_tokens.to(target.device))  # [B, K, H]
    features = module.training_features(hidden, path_embeddings.to(hidden.dtype), heads)  # [K', B, H]
    own = getattr(module, "lm_heads", None)
    if own is not None:  # each head's own projection, over the train vocabulary's rows
        return torch.stack([own[head](f) for head, f in zip(heads if heads is not None else range(k), features)])
    return vocab.logits(features) if vocab is not None else target.lm_head(features)


def teacher_loss(logits: torch.Tensor, labels: torch.Tensor, hidden: torch.Tensor, index: torch.Tensor,
                 target: TargetModel, heads: list[int], vocab: DraftVocab | None = None) -> torch.Tensor:
    """Per-head cross-entropy [K'] against the target's own distributions (Hydra++'s teacher loss).

    Head k (0-based) on position t guesses x_{t+2+k}; the target's distribution over that token comes from
    its hidden state at t+1+k, which is row ``index + 1 + k`` of the flat dataset whenever the label
    exists (rows of one sample are consecutive positions). logits [K', B, V'] and labels [K', B] of the
    heads numbered ``heads``, index [B]. With a train ``vocab`` (V' < V) the target's distribution is
    renormalised over the V' tokens the drafter can propose.
    """
    project = vocab.logits if vocab is not None else target.lm_head
    losses = []
    for row, k in enumerate(heads):
        valid = labels[row] != IGNORE  # [B]
        rows = (index + 1 + k).clamp(max=len(hidden) - 1)
        with torch.no_grad():
            teacher = project(hidden[rows].to(target.device, target.dtype)).float().softmax(dim=-1)  # [B, V']
        per_position = -(teacher * logits[row].float().log_softmax(dim=-1)).sum(dim=-1)  # [B]
        losses.append((per_position * valid).sum() / valid.sum().clamp(min=1))
    return torch.stack(losses)


#: budgets whose held-out decode-walk tau a recipe records (`static_tree.decode_walk_tau`)
WALK_BUDGETS = (2, 4, 8, 16, 32)


def true_ranks(module: nn.Module, target: TargetModel, hidden: torch.Tensor, windows: torch.Tensor, max_rank: int,
               batch_size: int, vocab: DraftVocab | None = None) -> torch.Tensor:
    """LongTensor[N, K]: at each position, the rank of the target's token among head k's top ``max_rank``
    candidates (teacher-forced, as a draft on the true path sees them), -1 if absent or past the sample's end;
    scored over ``vocab`` as inference will (a label outside it is absent)."""
    k = len(module.heads)
    rows = []
    module.eval()
    with torch.no_grad():
        for start in range(0, len(hidden), batch_size):
            h = hidden[start : start + batch_size].to(target.device, module_dtype(module))
            w = windows[start : start + batch_size].to(target.device)
            top = head_logits(module, target, h, w, vocab).topk(max_rank, dim=-1).indices  # [K, B, R]
            top = vocab.token_ids(top) if vocab is not None else top
            labels = w[:, 1 : k + 1].T  # [K, B]
            match = (top == labels[..., None]) & (labels != IGNORE)[..., None]  # [K, B, R]
            rows.append(torch.where(match.any(-1), match.float().argmax(-1), -1).T.cpu())  # [B, K]
    return torch.cat(rows)


def split_samples(ranks: torch.Tensor, windows: torch.Tensor) -> list[list[list[int]]]:
    """Per-sample rank sequences of the positions a decode takes a step at. A sample's last position (the
    one with nothing after its root) ends its rows, and no step is taken there: its root is the last token."""
    ends = (windows[:, 1] == IGNORE).nonzero().flatten().tolist()
    starts = [0] + [end + 1 for end in ends[:-1]]
    return [ranks[start:end].tolist() for start, end in zip(starts, ends)]


def evaluate(module: nn.Module, target: TargetModel, hidden: torch.Tensor, windows: torch.Tensor,
             max_rank: int, batch_size: int, vocab: DraftVocab | None = None,
             tree_accuracy: list[list[float]] | None = None) -> dict:
    """Held-out top-1 / top-k accuracy per head, P(rank r is the target's token) per head and rank, and
    the decode-walk tau of the drafter's tree at a few budgets (what a greedy replay of the held-out
    responses would measure), scoring over ``vocab`` as inference will. The tree is built from
    ``tree_accuracy`` (a recipe's recorded accuracies), by default from the accuracies measured here."""
    ranks = true_ranks(module, target, hidden, windows, max_rank, batch_size, vocab)  # [N, K]
    valid = windows[:, 1 : ranks.shape[1] + 1].T.cpu() != IGNORE  # [K, N]
    hits = (ranks.T[..., None] == torch.arange(max_rank)).sum(dim=1).float()  # [K, R]
    per_rank = (hits / valid.sum(dim=1).clamp(min=1).float()[:, None]).tolist()  # [K, R]
    sequences = split_samples(ranks, windows)
    tree_accuracy = [row[:DEFAULT_MAX_RANK] for row in (tree_accuracy or per_rank)]  # as the drafters cut them
    walk = {str(b): decode_walk_tau(StaticTree.from_accuracies(tree_accuracy, b).paths, sequences)
            for b in WALK_BUDGETS}
    return {
        "heldout_positions": int(valid[0].sum()),
        "heldout_top1": [row[0] for row in per_rank],
        "heldout_top5": [sum(row[:5]) for row in per_rank],
        "heldout_topk_accuracy": per_rank,
        "heldout_walk_tau": walk,
    }


class PositionBatches:
    """Training batches of single positions (the heads see h_t alone): shuffled rows of the flat dataset."""

    def __init__(self, hidden: torch.Tensor, windows: torch.Tensor, batch_size: int) -> None:
        self.hidden, self.windows, self.batch_size = hidden, windows, batch_size
        self.steps = math.ceil(len(hidden) / batch_size)
        self.positions = len(hidden)

    def epoch(self, generator: torch.Generator):
        order = torch.randperm(len(self.hidden), generator=generator)
        for step in range(self.steps):
            index = order[step * self.batch_size : (step + 1) * self.batch_size]
            yield lambda module, index=index: (self.hidden[index], self.windows[index], self.hidden, index)


def prefix_features(module: nn.Module, sample: Sample) -> torch.Tensor:
    """h'_t [P, H] of the sample's response positions behind the module's prefix attention layer."""
    start, end = response_positions(sample)
    context = sample.hidden[:end].to(module.prefix.norm.weight.device, torch.float32)  # [end, H]
    return module.prefix.forward_sequence(context)[start:end]


class SequenceBatches:
    """Training batches of whole samples, for heads behind prefix attention (h'_t needs h_0 .. h_t)."""

    def __init__(self, samples: list[Sample], lookahead: int, batch_size: int) -> None:
        self.samples, self.lookahead = samples, lookahead
        self.per_step = max(1, batch_size // 128)  # ~128 response positions per distilled sample
        self.steps = math.ceil(len(samples) / self.per_step)
        self.positions = sum(response_positions(s)[1] - response_positions(s)[0] for s in samples)

    def inputs(self, module: nn.Module, group: list[Sample]) -> tuple[torch.Tensor, ...]:
        """(h' rows, windows, raw hidden rows, their row index) of the samples in ``group``."""
        features, windows, raw = [], [], []
        for sample in group:
            start, end = response_positions(sample)
            features.append(prefix_features(module, sample))
            windows.append(sample_windows(sample, self.lookahead))
            raw.append(sample.hidden[start:end])
        raw_rows = torch.cat(raw)
        return torch.cat(features), torch.cat(windows), raw_rows, torch.arange(len(raw_rows))

    def epoch(self, generator: torch.Generator):
        order = torch.randperm(len(self.samples), generator=generator).tolist()
        for step in range(self.steps):
            group = [self.samples[i] for i in order[step * self.per_step : (step + 1) * self.per_step]]
            yield lambda module, group=group: self.inputs(module, group)


class HeadBatches(EpochBatches):
    """medusa's and hydra's side of `train_loop`: batches of response positions from ``source``
    (`PositionBatches`, or `SequenceBatches` behind a prefix attention layer); a step's loss is the trained
    heads' losses (``config.loss``: greedy cross-entropy or the teacher's) weighted by ``head_decay ** k``.

    The shuffles come from one generator seeded with ``config.seed``, epoch after epoch: epoch N's order is
    the (N+1)th drawn from it (a resumed run draws the ones before again). The history row: the mean loss of
    each trained head over the epoch's steps, and the per-head losses of its first and last steps."""

    def __init__(self, source: PositionBatches | SequenceBatches, module: nn.Module, target: TargetModel,
                 config: HeadTrainConfig, vocab: DraftVocab | None, trained: list[int]) -> None:
        self.source, self.module, self.target, self.vocab, self.trained = source, module, target, vocab, trained
        self.loss, self.lookahead, self.seed = config.loss, config.num_heads, config.seed
        self.steps = source.steps
        self.weights = torch.tensor([config.head_decay**k for k in trained], device=target.device)  # [K']

    def batches(self, epoch: int) -> Iterable[Callable[[nn.Module], tuple[torch.Tensor, ...]]]:
        generator = torch.Generator().manual_seed(self.seed)
        for _ in range(epoch):
            list(self.source.epoch(generator))  # the shuffles of the epochs before
        return self.source.epoch(generator)

    def losses(self, make_inputs: Callable[[nn.Module], tuple[torch.Tensor, ...]]) -> list[Callable[[], StepLoss]]:
        # outside autocast: a prefix layer's forward (which the gradient flows into) stays float32
        h, w, raw, index = make_inputs(self.module)  # h [B, H], w [B, K + 1], raw [N, H], index [B]
        h, w = h.to(self.target.device, module_dtype(self.module)), w.to(self.target.device)
        return [lambda: self.step_loss(h, w, raw, index)]

    def step_loss(self, h: torch.Tensor, w: torch.Tensor, raw: torch.Tensor, index: torch.Tensor) -> StepLoss:
        """The weighted loss of the trained heads on positions h [B, H] with windows w [B, K + 1]; raw [N, H]
        and index [B] locate the target's own hidden states for the teacher loss."""
        labels = w[:, 1 : self.lookahead + 1].T[self.trained]  # [K', B] target token ids of the trained heads
        # [K', B, V'] (V' = V without a train vocabulary)
        logits = head_logits(self.module, self.target, h, w, self.vocab, self.trained)
        if self.loss == "teacher":
            per_head = teacher_loss(logits, labels, raw, index, self.target, self.trained, self.vocab)  # [K']
        else:
            classes = self.vocab.label_indices(labels, IGNORE) if self.vocab is not None else labels  # [K', B]
            per_head = torch.stack([nn.functional.cross_entropy(logits[row].float(), classes[row], ignore_index=IGNORE)
                                    for row in range(len(self.trained))])  # [K']
        return StepLoss((self.weights * per_head).sum(), per_head)

    def history(self, records: list[list[float]]) -> dict:
        return {"train_loss_per_head": torch.tensor(records).mean(0).tolist(),  # records [steps, K']
                "first_batch_loss": records[0], "last_batch_loss": records[-1]}


def train_heads(config: HeadTrainConfig, target: TargetModel, progress: bool = True) -> dict:
    """Train medusa or hydra heads on `train_loop` (each epoch checkpointed to ``<out>.epoch<N>.pt``, a rerun
    resumes after the newest), score them on the held-out split, write the checkpoint and its recipe."""
    config.validate()
    manifest = checked_manifest(Path(config.cache), target)
    torch.manual_seed(config.seed)
    freeze(target)
    loaded = checked_warm_start(Path(config.init_from), config, target) if config.init_from else None
    ranking, vocab, eval_vocab = training_vocabularies(Path(config.cache), target, config.train_vocab,
                                                       loaded.ranking if loaded else None)
    options = {"prefix_heads": config.prefix_heads} if config.prefix_heads else {}
    if config.own_lm_heads:  # the heads' rows are the train vocabulary's, and held-out scoring uses them
        eval_vocab = vocab or DraftVocab(target.lm_head, ranking, 0)
        options["own_vocab"] = eval_vocab.size
    module = MODULES[config.method](target.config.hidden_size, config.num_heads, config.num_layers, **options)
    module = module.to(target.device)
    if config.own_lm_heads:
        initialise_own_heads(module, eval_vocab)
    start = warm_start(module, loaded, config) if loaded else None
    trained = start.trained_heads if start else list(range(config.num_heads))  # heads whose loss is optimised
    if config.prefix_heads:
        samples = [s for s in iter_samples(Path(config.cache), "train") if response_positions(s)[1] > response_positions(s)[0]]
        source = SequenceBatches(samples, config.num_heads, config.batch_size)
    else:
        hidden, windows = position_dataset(Path(config.cache), "train", config.num_heads, config.max_train_positions)
        source = PositionBatches(hidden, windows, config.batch_size)
    history, seconds = train_loop(module, HeadBatches(source, module, target, config, vocab, trained), target, config,
                                  progress)
    held_hidden, held_windows = heldout_inputs(module, Path(config.cache), config.num_heads)
    # scored over the vocabulary inference drafts over by default (see draft_vocab.py)
    with autocast(target.device, config.dtype):
        metrics = evaluate(module, target, held_hidden, held_windows, config.max_rank, config.batch_size, eval_vocab)
    metrics["heldout_vocab"] = eval_vocab.size
    extra = {"initialised_from": start.provenance, "trained_heads": trained} if start else {}
    if config.own_lm_heads:
        extra["own_vocab"] = eval_vocab.size  # the drafter builds its module from this (HeadDrafter.module_options)
    return write_trained(Path(config.out), module, ranking, target, config, manifest,
                         {"train_positions": source.positions, "heldout_positions": len(held_hidden)},
                         metrics, history, seconds, **extra)


@dataclass
class WarmStart:
    """What `warm_start` settles: the heads left to train, and the checkpoint's provenance for the new recipe
    (its token ranking, which keeps the draft vocabulary its heads were trained over, is `LoadedCheckpoint`'s)."""

    trained_heads: list[int]
    provenance: dict


@dataclass
class LoadedCheckpoint:
    """A warm start's checkpoint as read: its path stem, state dict (ranking removed), recipe and ranking."""

    stem: Path
    state: dict
    recipe: dict
    ranking: torch.Tensor | None


def checked_warm_start(stem: Path, config: HeadTrainConfig, target: TargetModel) -> LoadedCheckpoint:
    """Read the ``--init-from`` checkpoint (`load_warm_start`: the same method) and check its layers and
    prefix layer."""
    from specbench.drafters.draft_vocab import RANKING_KEY

    state, recipe, _ = load_warm_start(stem, config.method, target, "heldout_top1")
    ranking = state.pop(RANKING_KEY, None)
    for name, default in (("num_layers", 1), ("prefix_heads", 0)):
        theirs = recipe["hyperparameters"].get(name, default)
        if theirs != getattr(config, name):
            raise SpecbenchError(f"--init-from {stem}: its --{name.replace('_', '-')} is {theirs}, not {getattr(config, name)}")
    return LoadedCheckpoint(stem, state, recipe, ranking)


def initialise_own_heads(module: nn.Module, vocab: DraftVocab) -> None:
    """Start every head's own output projection as a copy of the target's lm_head rows over ``vocab`` (in
    its index order), so the heads begin where shared-projection heads would be."""
    rows = vocab.weight if vocab.ids is not None else vocab.lm_head.weight  # [V', H]
    with torch.no_grad():
        for projection in module.lm_heads:
            projection.weight.copy_(rows.detach().to(projection.weight.dtype))


def warm_start(module: nn.Module, loaded: LoadedCheckpoint, config: HeadTrainConfig) -> WarmStart:
    """Start ``module`` from a trained checkpoint of the same method: every parameter the checkpoint has
    (its K0 heads, the prefix layer, its own output projections) is loaded, the rest start fresh (heads
    beyond K0; output projections from the target's rows). With ``freeze_loaded`` the loaded parameters stay
    fixed and only heads K0 .. K - 1 are trained: a drafter extended by deeper heads at a fraction of the
    cost, its first heads (and their held-out accuracies) unchanged."""
    stem, state, recipe = loaded.stem, loaded.state, loaded.recipe
    own = module.state_dict()
    misfit = [k for k, v in state.items() if k not in own or own[k].shape != v.shape]
    if misfit:
        raise SpecbenchError(f"--init-from {stem}: its {misfit[0]} does not fit a {config.method} with these options "
                             "(--num-layers, --prefix-heads, --own-lm-heads and the first heads must match)")
    loaded_heads = int(recipe["hyperparameters"]["num_heads"])
    if config.freeze_loaded and loaded_heads >= config.num_heads:
        raise SpecbenchError(f"--freeze-loaded: {stem} already has {loaded_heads} heads; ask for more with --num-heads")
    module.load_state_dict(state, strict=False)
    if config.freeze_loaded:
        for name, parameter in module.named_parameters():
            parameter.requires_grad_(name not in state)
    trained = list(range(loaded_heads, config.num_heads)) if config.freeze_loaded else list(range(config.num_heads))
    provenance = {"checkpoint": stem.name, "heads": loaded_heads, "frozen": config.freeze_loaded,
                  "hyperparameters": recipe.get("hyperparameters"), "training_seconds": recipe.get("training_seconds"),
                  "train_positions": recipe.get("data", {}).get("train_positions"),
                  "heldout_top1": recipe.get("metrics", {}).get("heldout_top1")}
    return WarmStart(trained, provenance)


def heldout_inputs(module: nn.Module, cache: Path, lookahead: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Held-out head inputs [N, H] and windows: h_t, or h'_t behind a prefix attention layer."""
    if getattr(module, "prefix", None) is None:
        return position_dataset(cache, "heldout", lookahead)
    features, windows = [], []
    module.eval()
    with torch.no_grad():
        for sample in iter_samples(cache, "heldout"):
            start, end = response_positions(sample)
            if end > start:
                features.append(prefix_features(module, sample))
                windows.append(sample_windows(sample, lookahead))
    return torch.cat(features), torch.cat(windows)


def load_trained_heads(stem: Path, target: TargetModel) -> HeadDrafter:
    """The medusa/hydra drafter of a checkpoint, loaded for ``target`` (``.module``, ``.recipe``, ``.vocab``:
    the draft vocabulary its held-out metrics were scored over)."""
    from specbench.checkpoint import checkpoint_files
    from specbench.drafters.hydra import HydraDrafter
    from specbench.drafters.medusa import MedusaDrafter

    recipe_path = checkpoint_files(stem)[1]
    recipe = json.loads(recipe_path.read_text(encoding="utf-8")) if recipe_path.is_file() else {}
    drafters = {"medusa": MedusaDrafter, "hydra": HydraDrafter}
    if recipe.get("method") not in drafters:
        raise SpecbenchError(f"{stem}: not a medusa or hydra checkpoint ({recipe_path.name}: method {recipe.get('method')})")
    drafter = drafters[recipe["method"]](checkpoint=str(stem), draft_vocab=recipe.get("metrics", {}).get("heldout_vocab"))
    drafter.reset(target.handle)
    return drafter


def remeasure(stem: Path, cache: Path, target: TargetModel, batch_size: int = 256) -> dict:
    """Score a trained head checkpoint again on ``cache``'s held-out split and add the held-out metrics its
    recipe lacks (for checkpoints recorded before a metric existed); the weights and the metrics it has
    stay as they are, since its trees are built from them. Scored over the draft vocabulary inference uses
    by default (the checkpoint's own token ranking). The recipe says where and when, and keeps the
    re-measured top-1 beside the recorded one as a check. Returns the re-measured metrics."""
    from datetime import date

    from specbench.checkpoint import checkpoint_files

    drafter = load_trained_heads(stem, target)
    module, recipe, vocab = drafter.module, drafter.recipe, drafter.vocab
    checked_manifest(cache, target)
    config = recipe["hyperparameters"]
    held_hidden, held_windows = heldout_inputs(module, cache, config["num_heads"])
    metrics = evaluate(module, target, held_hidden, held_windows, config["max_rank"], batch_size, vocab,
                       recipe["metrics"].get("heldout_topk_accuracy"))
    metrics["heldout_vocab"] = vocab.size
    added = sorted(set(metrics) - set(recipe["metrics"]))
    recipe["metrics"] |= {key: metrics[key] for key in added}
    recipe["metrics_remeasured"] = {"date": date.today().isoformat(), "cache": str(cache), "device": str(target.device),
                                    "added": added, "heldout_top1": metrics["heldout_top1"]}
    checkpoint_files(stem)[1].write_text(json.dumps(recipe, indent=2, default=str) + "\n", encoding="utf-8")
    return metrics
