"""Sampling settings: the target's sampling distribution and the verification rule a run uses.

The *target distribution* p at a position is ``warp(logits)``: divide by the temperature, keep the
``top_k`` largest logits (0: all), keep the smallest set of tokens whose probability reaches ``top_p``
(1.0: all; the most likely token is always kept), renormalise. The order is vLLM's (temperature, top-k,
top-p). Vanilla and every drafter sample from the same p through the same loop, so the baseline stays
implementation-matched. Temperature 0 means greedy decoding: argmax, no randomness, the same ids as
before sampling existed.

Verification rules (`specbench.verify` implements them):

- ``greedy``: temperature 0 only; accept the longest path of argmax matches.
- ``rejection``: temperature > 0; lossless multi-draft rejection sampling over each node's children.
- ``typical``: temperature > 0; Medusa's typical acceptance, **lossy** (the output distribution is not
  the target's). Its threshold is ``min(epsilon, delta * exp(-H(p)))``.
- ``auto`` (the default) resolves to ``greedy`` at temperature 0 and ``rejection`` above it.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from specbench.errors import SpecbenchError

if TYPE_CHECKING:  # torch is imported where it is used, so the CLI's argument parsing stays light
    import torch

RULES = ("greedy", "rejection", "typical")
LOSSLESS_RULES = ("greedy", "rejection")
# Medusa's defaults (posterior_threshold, posterior_alpha of `medusa_generate`; its utils.py swaps them).
TYPICAL_EPSILON = 0.09
TYPICAL_DELTA = 0.3


@dataclass(frozen=True)
class Sampling:
    """How the target samples and how drafts are verified (one per run)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    verify: str = "auto"  # auto | greedy | rejection | typical
    typical_epsilon: float = TYPICAL_EPSILON
    typical_delta: float = TYPICAL_DELTA

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise SpecbenchError(f"--temperature must be 0 (greedy) or positive, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SpecbenchError(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise SpecbenchError(f"--top-k must be 0 (off) or positive, got {self.top_k}")
        if self.verify not in ("auto", *RULES):
            raise SpecbenchError(f"--verify must be auto, {', '.join(RULES)}; got {self.verify!r}")
        if self.greedy and self.verify in ("rejection", "typical"):
            raise SpecbenchError(f"--verify {self.verify} needs --temperature > 0 (temperature 0 is greedy decoding)")
        if not self.greedy and self.verify == "greedy":
            raise SpecbenchError("--verify greedy needs --temperature 0; at temperature > 0 use rejection (lossless) "
                                 "or typical (lossy)")
        if not (self.typical_epsilon > 0 and self.typical_delta > 0):
            raise SpecbenchError("--typical-epsilon and --typical-delta must be positive")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def rule(self) -> str:
        """The verification rule this setting resolves to."""
        if self.verify != "auto":
            return self.verify
        return "greedy" if self.greedy else "rejection"

    @property
    def lossless(self) -> bool:
        return self.rule in LOSSLESS_RULES

    def label(self) -> str:
        """Short human label: ``greedy``, ``T=1 rejection``, ``T=1 top-p 0.9 typical (lossy)``."""
        if self.greedy:
            return "greedy (T=0)"
        parts = [f"T={self.temperature:g}"]
        if self.top_k:
            parts.append(f"top-k {self.top_k}")
        if self.top_p < 1:
            parts.append(f"top-p {self.top_p:g}")
        parts.append(self.rule if self.lossless else f"{self.rule} (lossy)")
        return " ".join(parts)

    def to_json(self) -> dict:
        """What an answer record stores: the settings, the resolved rule and whether it is lossless."""
        data = asdict(self) | {"verify": self.rule, "lossless": self.lossless}
        if self.rule != "typical":
            data.pop("typical_epsilon"), data.pop("typical_delta")
        return data

    @classmethod
    def from_json(cls, data: dict | None) -> "Sampling":
        """The settings of a record (None: a record from before sampling, i.e. greedy)."""
        if not data:
            return cls()
        keys = ("temperature", "top_p", "top_k", "verify", "typical_epsilon", "typical_delta")
        return cls(**{k: data[k] for k in keys if k in data})

    def warp(self, logits: torch.Tensor) -> torch.Tensor:
        """Target probabilities Tensor[..., V] (float32) from logits Tensor[..., V]; temperature > 0 only."""
        scores = logits.float() / self.temperature
        if self.top_k and self.top_k < scores.shape[-1]:
            kth = scores.topk(self.top_k, dim=-1).values[..., -1:]  # [..., 1]
            scores = scores.masked_fill(scores < kth, float("-inf"))
        probs = scores.softmax(dim=-1)
        if self.top_p < 1:
            sorted_probs, order = probs.sort(dim=-1, descending=True)
            before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass strictly ahead of each token
            drop_sorted = before >= self.top_p  # the first token (before == 0) is always kept
            drop = drop_sorted.new_zeros(drop_sorted.shape).scatter(-1, order, drop_sorted)
            probs = probs.masked_fill(drop, 0.0)
            probs = probs / probs.sum(dim=-1, keepdim=True)
        return probs


def turn_seed(seed: int, question_id: object, turn: int) -> int:
    """The seed of one turn's random stream: fixed by the run seed, the question and the turn, the same
    for every drafter and every repeat, so any turn of any run can be reproduced alone."""
    digest = hashlib.sha256(f"{seed}:{question_id}:{turn}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1
