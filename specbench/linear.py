"""Linear layers for a few rows on a CPU: the weight as the left operand of the product.

A decode step multiplies every weight matrix by one row, a verification tree by one row per node. On the
2-core EPYC this project is measured on, torch's ``F.linear(x, W)`` (MKL, fp32) takes its
matrix-vector path for one row and a small-M GEMM for 2-16 rows, and neither streams the weights at the
memory's speed: the default target's 30 layers cost 35 ms for one row and 46-57 ms for 2-4. The same
product written with the weight on the left, ``(W @ x^T)^T`` (x^T a transposed view, so MKL reads it in
place), streams each weight once: 17-18 ms for one or two rows, 23 ms for three or four
(docs/performance.md, "Verify cost by tree size, and the weight-left kernel"; the retired
`scripts/linear_layouts.py` measured it: docs/journal/retired-scripts.md). One row is padded to two,
since the one-column product falls back to the slow matrix-vector path.

Terminology: the **kernel** of a target is ``weight-left`` (this module's product for 1-`WEIGHT_LEFT_MAX_ROWS`
rows, torch's above) or ``torch`` (``F.linear`` everywhere). ``auto`` (the default) is ``weight-left`` for a
float32 model on the CPU and ``torch`` elsewhere (GPUs, half precision); ``SPECBENCH_LINEAR=torch`` or
``weight-left`` overrides it. The kernel is part of a verify-cost profile's key and of every manifest.

Exactness is unaffected in kind: vanilla decoding and tree verification run through the same layers, and
a different summation order only moves fp32 rounding, as torch's own row-count-dependent paths already do.
The lossless tests run with the kernel a run would use.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from specbench.errors import SpecbenchError

KERNELS = ("weight-left", "torch")
ENV = "SPECBENCH_LINEAR"
#: above this many rows torch's GEMM path is as fast (the default target's profile: 1-8 nodes 0.35-0.76x
#: torch's cost weight-left, 16 nodes 0.86x, 24-64 within 1%; 12 nodes is the exception, 1.10x)
WEIGHT_LEFT_MAX_ROWS = 16


def kernel_setting() -> str:
    """``$SPECBENCH_LINEAR`` (default ``auto``); a value that names no kernel is a one-line error, which the CLI
    raises before it loads anything."""
    wanted = os.environ.get(ENV, "auto")
    if wanted not in (*KERNELS, "auto"):
        raise SpecbenchError(f"{ENV}={wanted!r}: choose auto, {' or '.join(KERNELS)}")
    return wanted


def chosen_kernel(device: torch.device, dtype: torch.dtype) -> str:
    """The kernel for a model on ``device`` in ``dtype``: ``$SPECBENCH_LINEAR`` when set, else `auto`'s rule."""
    wanted = kernel_setting()
    if wanted != "auto":
        return wanted
    return "weight-left" if device.type == "cpu" and dtype == torch.float32 else "torch"


def weight_left_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` computed as ``(weight @ x^T)^T`` for up to `WEIGHT_LEFT_MAX_ROWS` rows.

    x: [..., in], weight: [out, in] -> [..., out] (contiguous)."""
    rows = x.reshape(-1, x.shape[-1])  # [M, in]
    m = rows.shape[0]
    if m > WEIGHT_LEFT_MAX_ROWS or m == 0:
        return F.linear(x, weight, bias)
    if m == 1:  # a one-column product takes the matrix-vector path; two columns stream the weight once
        rows = torch.cat([rows, rows.new_zeros(1, rows.shape[1])])  # [2, in]
    out = torch.mm(weight, rows.t())[:, :m].t().contiguous()  # [out, M'] -> [M, out]
    if bias is not None:
        out = out + bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


class WeightLeftLinear(nn.Linear):
    """An ``nn.Linear`` whose forward is `weight_left_linear`; `use_kernel` swaps a module's class to it
    (same parameters, same state dict, still an ``nn.Linear``)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return weight_left_linear(x, self.weight, self.bias)


def kernel_of(layer: nn.Module) -> str:
    """The kernel a target's layer runs on, so a drafter that reuses its weights (a draft ``lm_head`` cut from
    the target's, its own heads) follows the target rather than deciding again."""
    return "weight-left" if isinstance(layer, WeightLeftLinear) else "torch"


def use_kernel(model: nn.Module, kernel: str) -> int:
    """Put every plain ``nn.Linear`` of ``model`` on ``kernel`` (back on torch's for ``"torch"``); returns how
    many layers it changed. Subclasses (quantized or adapter layers) keep their own forward."""
    if kernel not in KERNELS:
        raise SpecbenchError(f"unknown linear kernel {kernel!r}; choose {' or '.join(KERNELS)}")
    swapped = 0
    for module in model.modules():
        if kernel == "weight-left" and type(module) is nn.Linear:
            module.__class__ = WeightLeftLinear
            swapped += 1
        elif kernel == "torch" and type(module) is WeightLeftLinear:
            module.__class__ = nn.Linear
            swapped += 1
    return swapped
