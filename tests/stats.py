"""Goodness-of-fit helpers for the sampling tests: a chi-square test of observed outcome counts against an
exact distribution (cells with small expected counts pooled), with its p-value and the total-variation
distance; a uniformity test of values in [0, 1] and the randomised probability integral transform of drawn
tokens. torch only (the test environment has no scipy)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Hashable

import torch

#: Every sampling test uses a fixed seed; a correct rule fails one at this level with probability 1e-4.
ALPHA = 1e-4


@dataclass
class FitResult:
    samples: int
    cells: int          # cells after pooling
    statistic: float
    p_value: float
    tv: float           # total-variation distance between the empirical and exact distributions

    def __str__(self) -> str:
        return (f"n={self.samples} cells={self.cells} chi2={self.statistic:.1f} p={self.p_value:.3g} "
                f"TV={self.tv:.4f}")


def chi_square_fit(observed: Counter, exact: dict[Hashable, float], min_expected: float = 5.0) -> FitResult:
    """Pearson's test of ``observed`` counts against ``exact`` probabilities. Cells expected fewer than
    ``min_expected`` times are pooled into one; an outcome the exact law gives probability 0 goes to the
    pool too, and a pool expected 0 times but observed makes the p-value 0."""
    n = sum(observed.values())
    tv = 0.5 * sum(abs(observed.get(k, 0) / n - exact.get(k, 0.0)) for k in set(observed) | set(exact))
    kept = [k for k, p in exact.items() if n * p >= min_expected]
    pairs = [(observed.get(k, 0), n * exact[k]) for k in kept]
    pool_obs = n - sum(o for o, _ in pairs)
    pool_exp = n - sum(e for _, e in pairs)
    if pool_exp > 1e-9:
        pairs.append((pool_obs, pool_exp))
    elif pool_obs > 0:
        return FitResult(n, len(pairs), float("inf"), 0.0, tv)
    statistic = sum((o - e) ** 2 / e for o, e in pairs)
    dof = max(len(pairs) - 1, 1)
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                            torch.tensor(statistic / 2, dtype=torch.float64)))
    return FitResult(n, len(pairs), statistic, p_value, tv)


def uniform_fit(values, bins: int = 10) -> FitResult:
    """Chi-square test that ``values`` (floats in [0, 1]) are uniform, over ``bins`` equal bins."""
    counts = Counter(min(int(v * bins), bins - 1) for v in values)
    return chi_square_fit(counts, {b: 1.0 / bins for b in range(bins)})


def randomized_pit(p: torch.Tensor, tokens: torch.Tensor, generator: torch.Generator) -> list[float | None]:
    """The randomised probability integral transform of each drawn token: for row t of ``p`` (Tensor[T, V],
    the law token t was meant to be drawn from) and ``tokens[t]`` = x, u = P(tokens ranked above x) + W p(x)
    with W uniform on [0, 1] (from ``generator``), tokens ranked by probability, ties by id. When every
    token is drawn from its row (each row may depend on the tokens drawn before it), the u are independent
    and uniform on [0, 1], so `uniform_fit` checks the whole sequential law at once. None for a token its
    row gives probability 0."""
    p = p.double()
    x = tokens.long().reshape(-1, 1)  # [T, 1]
    p_x = p.gather(1, x)  # [T, 1]
    ids = torch.arange(p.shape[1])[None, :]
    above = (p > p_x) | ((p == p_x) & (ids < x))  # [T, V]: ranked above x
    w = torch.rand(len(x), generator=generator, dtype=torch.float64)
    u = (p * above).sum(1) + w * p_x[:, 0]
    return [float(value) if possible else None for value, possible in zip(u, (p_x[:, 0] > 0).tolist())]
