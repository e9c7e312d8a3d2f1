"""Drafters whose weights come from a training checkpoint (medusa, hydra, ctc): finding the shipped
checkpoint for a target, loading it once per target, and counting its parameters."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from torch import nn

from specbench.checkpoint import checkpoint_files, load_checkpoint, trained_for
from specbench.drafter import DraftContext, Drafter, TargetHandle
from specbench.drafters.draft_vocab import DEFAULT_DRAFT_VOCAB, RANKING_KEY, DraftVocab
from specbench.drafters.published import load_published, published_method
from specbench.errors import DrafterOptionError, SpecbenchError
from specbench.hub import local_or_hub
from specbench.linear import kernel_of, use_kernel
from specbench.model_source import file_sha256

CHECKPOINTS = Path(__file__).resolve().parent / "checkpoints"


def parse_flag(name: str, value: bool | str) -> bool:
    """A boolean drafter option: True/False, or "true"/"false" as typed on the command line."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise DrafterOptionError(f"{name} must be true or false, got {value!r}")


def default_checkpoint(method: str, target: TargetHandle) -> Path:
    """The shipped checkpoint of ``method`` for ``target`` (matched by the recipe's method and the
    weights' hash in the file name), if there is one."""
    pattern = f"{method}-*{target.sha256[:16]}.json" if target.sha256 else f"{method}-*.json"
    for path in sorted(CHECKPOINTS.glob(pattern)):
        recipe = json.loads(path.read_text(encoding="utf-8"))
        if recipe.get("method") == method and trained_for(recipe, target):
            return path.with_name(path.name.removesuffix(".json"))
    raise SpecbenchError(
        f"no shipped {method} checkpoint for target {target.name}; train one with "
        f"`specbench train {method} --model ...` and pass --drafter-option {method}.checkpoint=PATH"
    )


class CheckpointDrafter(Drafter):
    """Loads ``module`` from ``checkpoint`` (a path stem) or the shipped one, once per target/device/dtype.

    Subclasses set ``method`` (the recipe's method name), implement ``build_module(recipe, target)`` and
    may override ``loaded(recipe)`` (called after a new load) and ``start_sequence()`` (every reset).
    ``self.vocab`` is the drafter's view of the ``lm_head``: the ``draft_vocab`` most frequent tokens
    (default `DEFAULT_DRAFT_VOCAB` when the checkpoint stores a ranking; 0: all of them). A module with an
    output projection per head (``module.lm_heads``: a published checkpoint's, or trained with
    ``--own-lm-heads`` over the first rows of the checkpoint's ranking) gets ``self.head_vocabs``.
    ``checkpoint`` may also name a published Medusa, Hydra or EAGLE-1/2 checkpoint (a directory or its weights
    file), read by `published.py`, or for eagle a speculators "eagle" directory (`speculators_eagle.py`). With
    a cut, ``context_vocab`` (default True) adds the sequence's own tokens that the cut lacks as extra columns
    (`DraftVocab.follow_context`): subclasses call `follow_context` first thing in ``propose``.
    """

    method = ""

    def __init__(self, checkpoint: str | None = None, draft_vocab: int | None = None,
                 context_vocab: bool | str = True) -> None:
        super().__init__()
        if draft_vocab is not None and (not isinstance(draft_vocab, int) or draft_vocab < 0):
            raise DrafterOptionError(f"draft_vocab must be 0 (the full vocabulary) or a token count, got {draft_vocab!r}")
        self.checkpoint = checkpoint
        self.draft_vocab = draft_vocab
        self.context_vocab = parse_flag("context_vocab", context_vocab)
        self._followed = 0  # tokens of the sequence already passed to follow_context
        self.module: nn.Module | None = None
        self.recipe: dict = {}
        self.vocab: DraftVocab | None = None
        self.head_vocabs: list[DraftVocab] | None = None
        self._loaded_for: str | None = None

    def build_module(self, recipe: dict, target: TargetHandle) -> nn.Module:
        raise NotImplementedError

    def loaded(self, recipe: dict) -> None:
        """Derive whatever the drafter needs from a freshly loaded recipe."""

    def start_sequence(self) -> None:
        """Forget per-sequence state."""

    def reset(self, target: TargetHandle) -> None:
        key = f"{target.name}:{target.sha256}:{target.fingerprint}:{target.device}:{target.dtype}"
        if self._loaded_for != key:
            state, recipe, weights = self.read_checkpoint(target)
            ranking = state.pop(RANKING_KEY, None)  # IntTensor[V] | None: see draft_vocab.py
            module = self.build_module(recipe, target)
            module.load_state_dict(state)
            self.module = module.to(device=target.device, dtype=target.dtype).eval()
            use_kernel(self.module, kernel_of(target.lm_head))  # the target's kernel (specbench.linear)
            self.recipe = recipe  # the vocabulary may depend on how the checkpoint was trained (eagle3)
            self.vocab = self.draft_vocabulary(target, ranking)
            own = getattr(self.module, "lm_heads", None)
            vocab_size = target.lm_head.weight.shape[0]
            self.head_vocabs = None if own is None else \
                [DraftVocab.of_projection(projection, ranking, vocab_size) for projection in own]
            self._loaded_for = key
            self.compiled_parts = None  # new weights: the compiled regime compiles them again (`compile_parts`)
            self._weights_sha256 = file_sha256(weights)
            self.loaded(recipe)
        self._followed = 0
        self.vocab.forget_context()
        self.start_sequence()

    def follow_context(self, ctx: DraftContext) -> None:
        """Pass the tokens added to the sequence since the last call (prompt, accepted tokens, root) to the
        draft vocabulary, which scores those the cut lacks from now on (``context_vocab``). Heads with their
        own output projections take none (`DraftVocab.of_projection`)."""
        new = ctx.tokens[self._followed :]
        self._followed = len(ctx.tokens)
        if self.follows_context:
            self.vocab.follow_context(new)

    @property
    def follows_context(self) -> bool:
        """Whether proposals score the sequence's own tokens beyond the cut: ``context_vocab``, a cut, and no
        own output projections (they take no context columns)."""
        return self.context_vocab and self.vocab is not None and self.vocab.ids is not None and not self.head_vocabs

    def unavailable(self, target: TargetHandle) -> str | None:
        """No checkpoint given and none shipped for ``target``: the reason, else None."""
        if self.checkpoint:
            return None
        try:
            default_checkpoint(self.method, target)
        except SpecbenchError as error:
            return str(error)
        return None

    def read_checkpoint(self, target: TargetHandle) -> tuple[dict, dict, Path]:
        """(state dict in the module's keys, recipe, weights file) of the configured or shipped checkpoint."""
        given = local_or_hub(self.checkpoint, f"{self.method}.checkpoint") if self.checkpoint else None  # a Hub id too
        if given is not None and Path(given).is_dir():
            from specbench.drafters.speculators import layout_of
            from specbench.drafters.speculators_eagle import read_eagle_directory, speculators_type

            layout = layout_of(Path(given))
            # speculators "eagle" directories are eagle's (speculators_eagle.py), EAGLE-3 ones eagle3's (speculators.py)
            kind = speculators_type(Path(given)) if layout == "speculators" else "eagle3"
            if layout is not None and kind == self.method == "eagle":
                return read_eagle_directory(Path(given), target)
            if layout is not None:
                what = f"a speculators {kind!r}" if layout == "speculators" else "an EAGLE-3 (the authors' layout)"
                hint = (f"load it with --drafter-option {kind}.checkpoint={given}" if kind in ("eagle", "eagle3") else
                        "specbench reads speculators types 'eagle' (eagle.checkpoint=) and 'eagle3' (eagle3.checkpoint=)")
                raise SpecbenchError(f"{given} is {what} directory, which {self.method} does not read; {hint}")
        if given is not None and published_method(given):
            published = load_published(given, self.method, target.config, target.lm_head.weight.shape[0])
            return published.state, published.recipe(), published.weights
        stem = given if given is not None else default_checkpoint(self.method, target)
        state, recipe = load_checkpoint(stem, target)
        return state, recipe, checkpoint_files(stem)[0]

    def identity(self) -> str:
        """The loaded checkpoint's weights hash and its recipe's metrics hash (see `Drafter.identity`)."""
        weights = getattr(self, "_weights_sha256", "")
        if not weights:
            return ""
        # the recipe's measured statistics shape the tree (medusa, hydra): re-measured, they change proposals
        metrics = hashlib.sha256(json.dumps(self.recipe.get("metrics", {}), sort_keys=True).encode()).hexdigest()
        vocabulary = f":vocab:{self.vocab.size}:context" if self.follows_context else ""
        return f"{weights}:metrics:{metrics[:16]}{vocabulary}"

    def draft_vocabulary(self, target: TargetHandle, ranking: torch.Tensor | None) -> DraftVocab:
        """The ``draft_vocab`` cut of ``target``'s lm_head by the checkpoint's token ranking."""
        size = self.draft_vocab
        if size is None:  # the default: cut when the checkpoint has a ranking, else the whole vocabulary
            size = DEFAULT_DRAFT_VOCAB if ranking is not None else 0
        try:
            return DraftVocab(target.lm_head, ranking, size)
        except ValueError as error:
            raise SpecbenchError(f"{self.method}.draft_vocab={self.draft_vocab}: {error}") from None

    def top_tokens(self, features: torch.Tensor, k: int, head: int | None = None) -> torch.Tensor:
        """features [..., H] -> the k best token ids [..., k] within the draft vocabulary (head ``head``'s own
        output projection when the module has one per head)."""
        vocab = self.head_vocabs[head] if head is not None and self.head_vocabs is not None else self.vocab
        return vocab.token_ids(vocab.logits(features).topk(k, dim=-1).indices)

    def output_vocab(self, head: int | None = None) -> DraftVocab:
        """The vocabulary head ``head`` scores: its own output projection, or the shared (cut) ``lm_head``."""
        return self.head_vocabs[head] if head is not None and self.head_vocabs is not None else self.vocab

    def top_log_probs(self, features: torch.Tensor, k: int, head: int | None = None, cut: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """features [..., H] -> (log-probabilities [..., k] in float32 on the CPU, token ids [..., k]) of the k
        best tokens (fewer if the draft vocabulary is smaller), normalised over the draft vocabulary (as
        `top_tokens` picks them); ``cut``: the vocabulary's `DraftVocab.cut_logits` of ``features``, when a
        batch computed them for all its rows."""
        vocab = self.output_vocab(head)
        log_probs = vocab.logits(features, cut).float().log_softmax(dim=-1)  # [..., V']
        top = log_probs.topk(min(k, log_probs.shape[-1]), dim=-1)
        return top.values.cpu(), vocab.token_ids(top.indices).cpu()

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters()) if self.module is not None else 0
