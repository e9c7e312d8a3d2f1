"""sps: speculative sampling with a draft language model (Leviathan et al. 2023; Chen et al. 2023;
Spec-Bench's "SpS").

A draft model sharing the target's tokenizer proposes a chain of ``depth`` tokens autoregressively, with
its own KV cache, which it rolls back each step to the longest prefix the context still shares with it
(the accepted tokens stay cached, the rejected drafts go). Greedy runs take the draft's argmax; sampled
runs (temperature > 0) draw each token from the draft's distribution, warped like the target's, and
declare it in ``DraftTree.probs``, so rejection sampling applies the p/q rule.

``model``:
- an in-memory Hugging Face causal LM (Python API) with the target's vocabulary size;
- a model directory or ``.gguf`` file (loaded as the target is, on the target's device and dtype); its
  tokenizer must equal the target's, token for token;
- ``self`` (the default, training-free): a cheaper copy of the target, made by ``self_draft``:
  ``int8`` (every Linear dynamically quantised to int8; CPU only) or ``layers:N`` (the target's first N
  decoder layers with its final norm and lm_head, sharing the target's weights: no memory, no training).
"""

from __future__ import annotations

import copy
import warnings
from pathlib import Path

import torch

from specbench import kv
from specbench.drafter import DraftContext, Drafter, TargetHandle
from specbench.errors import DrafterOptionError
from specbench.linear import use_kernel
from specbench.results import first_divergence
from specbench.tree import DraftTree

SELF = "self"


class SpSDrafter(Drafter):
    """Draft-model speculative decoding (a chain of ``depth`` draft tokens per step). Not ``capturable``:
    its draft model runs on its own `DynamicCache`, so the compiled regime runs it eagerly (docs/decisions.md)."""

    def __init__(self, model: str | torch.nn.Module = SELF, self_draft: str = "int8", depth: int = 4) -> None:
        super().__init__()
        if depth < 1:
            raise DrafterOptionError(f"depth must be at least 1, got {depth}")
        if isinstance(model, torch.nn.Module):
            pass
        elif not isinstance(model, str):
            raise DrafterOptionError(f"model must be 'self', a path or an in-memory model, got {type(model).__name__}")
        elif model != SELF and not Path(model).expanduser().exists():
            raise DrafterOptionError(f"draft model not found: {model} (a model directory, a .gguf file, or 'self')")
        if model == SELF and self_draft != "int8" and not _layer_count(self_draft):
            raise DrafterOptionError(f"self_draft must be 'int8' or 'layers:N' with N >= 1, got {self_draft!r}")
        self.model_spec, self.self_draft, self.depth = model, self_draft, depth
        self._draft = None          # the draft causal LM
        self._draft_for = None      # fingerprint of the target it was made for
        self._identity = ""
        self._cache = None
        self._cached: list[int] = []  # the tokens whose K/V the draft cache holds, in order

    # ---- the draft model ------------------------------------------------------------------------------------
    def reset(self, target: TargetHandle) -> None:
        if self._draft is None or self._draft_for != target.fingerprint:
            self._draft, self._identity = self._build(target)
            self._draft_for = target.fingerprint
            self._cache_keyword = kv.cache_keyword(self._draft)  # "cache" or "past_key_values"
        self._cache, self._cached = kv.new_cache(), []

    def identity(self) -> str:
        return self._identity

    def max_budget(self) -> int:
        return self.depth + 1  # a chain

    def _build(self, target: TargetHandle):
        if isinstance(self.model_spec, torch.nn.Module):
            vocab = self.model_spec.get_output_embeddings().weight.shape[0]
            if vocab != target.lm_head.weight.shape[0]:
                raise DrafterOptionError(f"sps draft model has {vocab} output tokens, the target "
                                         f"{target.lm_head.weight.shape[0]}: they must share the tokenizer")
            from specbench.model_source import weights_fingerprint

            return self.model_spec.eval(), f"in-memory {weights_fingerprint(self.model_spec)}"
        if self.model_spec != SELF:
            from specbench.model import load_target

            dtype = str(target.dtype).removeprefix("torch.")
            draft = load_target(self.model_spec, str(target.device), dtype)
            _check_same_tokenizer(draft.tokenizer, target.tokenizer, self.model_spec)
            return draft.model, f"model sha256 {draft.handle.sha256}"
        if target.model is None:
            raise DrafterOptionError("sps model=self needs the target model (an in-memory TargetModel has it)")
        if self.self_draft == "int8":
            if target.device.type != "cpu":
                raise DrafterOptionError("sps self_draft=int8 runs on CPU only; use self_draft=layers:N on GPU")
            with warnings.catch_warnings():  # torch deprecates the quantized-tensor API it uses inside, and
                warnings.simplefilter("ignore", UserWarning)  # torch.ao.quantization itself (torchao replaces it)
                warnings.filterwarnings("ignore", "torch.ao.quantization is deprecated", DeprecationWarning)
                plain = copy.deepcopy(target.model).float()  # int8 dynamic quantization takes float32 weights
                use_kernel(plain, "torch")  # quantize_dynamic matches nn.Linear by exact type (specbench.linear)
                draft = torch.ao.quantization.quantize_dynamic(plain, {torch.nn.Linear}, dtype=torch.qint8)
        else:
            draft = _first_layers(target.model, _layer_count(self.self_draft))
        return draft.eval(), f"self {self.self_draft} of {target.fingerprint}"

    @torch.inference_mode()
    def _next_logits(self, tokens: list[int], device: torch.device) -> torch.Tensor:
        """Feed ``tokens`` after what the draft cache holds; logits Tensor[V] after the last one."""
        ids = torch.tensor([tokens], dtype=torch.long, device=device)  # [1, m]
        logits = self._draft(input_ids=ids, **{self._cache_keyword: self._cache}, use_cache=True).logits[0, -1]
        self._cached += tokens
        return logits

    # ---- proposing ------------------------------------------------------------------------------------------
    def propose(self, ctx: DraftContext) -> DraftTree:
        depth = min(self.depth, ctx.budget - 1)
        if depth < 1:
            return DraftTree.root_only(ctx.root)
        context = ctx.tokens.tolist()  # prompt + emitted, root last
        shared = context[:-1]  # the root itself is always fed
        keep = first_divergence(self._cached, shared)  # None: the cache holds exactly ``shared``
        keep = len(shared) if keep is None else keep
        kv.crop(self._cache, keep)
        del self._cached[keep:]
        sampled = ctx.sampling is not None and not ctx.sampling.greedy
        logits = self._next_logits(context[keep:], ctx.target.device)  # [V]
        drafts, rows = [], []
        for d in range(depth):
            if sampled:
                q = ctx.sampling.warp(logits).float()  # [V]
                token = int(torch.multinomial(q.cpu(), 1, generator=ctx.generator))
                rows.append(q)
            else:
                token = int(logits.argmax())
            drafts.append(token)
            if d + 1 < depth:
                logits = self._next_logits([token], ctx.target.device)
        tree = DraftTree.chain(ctx.root, drafts)
        if sampled:
            rows.append(torch.full_like(rows[0], 1.0 / rows[0].numel()))  # the leaf's row: no children
            tree.probs = torch.stack(rows)  # [depth + 1, V]: row i is the q node i's child was drawn from
        return tree


def _layer_count(spec: str) -> int:
    name, _, count = spec.partition(":")
    return int(count) if name == "layers" and count.isdigit() and int(count) >= 1 else 0


def _first_layers(model: torch.nn.Module, count: int) -> torch.nn.Module:
    """The target truncated to its first ``count`` decoder layers, sharing every weight with it."""
    body = model.base_model
    layers = getattr(body, "layers", None)
    if layers is None or not hasattr(body, "norm"):
        raise DrafterOptionError(f"sps self_draft=layers:N: {type(model).__name__} has no .layers/.norm to cut")
    if count >= len(layers):
        raise DrafterOptionError(f"sps self_draft=layers:{count}: the target has only {len(layers)} layers")
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = count
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:count]
    with torch.device("meta"):  # no memory for weights that are replaced right away
        draft = type(model)(config)
    for name, module in body.named_children():
        if name != "layers":
            setattr(draft.base_model, name, module)
    draft.base_model.layers = torch.nn.ModuleList(list(layers[:count]))
    draft.lm_head = model.get_output_embeddings()
    return draft


def _check_same_tokenizer(draft_tokenizer, target_tokenizer, where: str) -> None:
    if target_tokenizer is None or not hasattr(target_tokenizer, "get_vocab"):
        return  # an in-memory target without a real tokenizer: nothing to compare
    mine, theirs = draft_tokenizer.get_vocab(), target_tokenizer.get_vocab()
    if mine != theirs:
        only = sorted(set(mine.items()) ^ set(theirs.items()))[:3]
        raise DrafterOptionError(f"sps draft model {where}: its tokenizer differs from the target's "
                                 f"({len(mine)} vs {len(theirs)} tokens; e.g. {only})")
