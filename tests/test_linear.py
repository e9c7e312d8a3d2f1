"""specbench.linear: the weight-left product equals F.linear, the class swap is reversible and leaves
the weights alone, and the kernel choice follows its rule, its override and its one-line error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from specbench.errors import SpecbenchError
from specbench.harness.autobudget.profile import cache_path, profile_key
from specbench.linear import ENV, WEIGHT_LEFT_MAX_ROWS, WeightLeftLinear, chosen_kernel, kernel_of, use_kernel, weight_left_linear


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(0, WEIGHT_LEFT_MAX_ROWS + 4), lead=st.sampled_from([(), (1,), (3,)]),
       bias=st.booleans(), seed=st.integers(0, 2**16))
def test_weight_left_equals_f_linear(rows, lead, bias, seed):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(37, 19, generator=generator)  # [out, in]
    b = torch.randn(37, generator=generator) if bias else None
    x = torch.randn(*lead, rows, 19, generator=generator)  # [..., rows, in]
    got = weight_left_linear(x, weight, b)
    assert got.shape == (*lead, rows, 37) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, weight, b), rtol=1e-5, atol=1e-5)


def test_one_dimensional_input_and_non_contiguous_rows():
    weight = torch.randn(11, 8)
    vector = torch.randn(8)  # [in]: the prefill's last-position lm_head call
    assert weight_left_linear(vector, weight).shape == (11,)
    torch.testing.assert_close(weight_left_linear(vector, weight), F.linear(vector, weight))
    strided = torch.randn(8, 3).t()  # [3, 8], not contiguous
    torch.testing.assert_close(weight_left_linear(strided, weight), F.linear(strided, weight))


def test_use_kernel_swaps_plain_linears_only_and_back():
    class Adapter(nn.Linear):  # a subclass keeps its own forward
        pass

    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), Adapter(6, 2), nn.Linear(2, 3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(5, 4)
    expected = model(x)
    assert use_kernel(model, "weight-left") == 2
    assert type(model[0]) is WeightLeftLinear and type(model[2]) is Adapter and isinstance(model[3], nn.Linear)
    torch.testing.assert_close(model(x), expected)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert use_kernel(model, "torch") == 2
    assert type(model[0]) is nn.Linear and type(model[3]) is nn.Linear
    with pytest.raises(SpecbenchError, match="unknown linear kernel"):
        use_kernel(model, "fast")


def test_the_kernel_rule_and_its_override(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert chosen_kernel(torch.device("cpu"), torch.float32) == "weight-left"
    assert chosen_kernel(torch.device("cpu"), torch.bfloat16) == "torch"
    assert chosen_kernel(torch.device("cuda"), torch.float32) == "torch"
    monkeypatch.setenv(ENV, "torch")
    assert chosen_kernel(torch.device("cpu"), torch.float32) == "torch"
    monkeypatch.setenv(ENV, "fastest")
    with pytest.raises(SpecbenchError, match="SPECBENCH_LINEAR='fastest'"):
        chosen_kernel(torch.device("cpu"), torch.float32)


def test_the_target_runs_on_the_kernel_and_its_profile_key_says_so(llama_target):
    assert llama_target.linear_kernel == "weight-left"
    assert isinstance(llama_target.lm_head, WeightLeftLinear) and kernel_of(llama_target.lm_head) == "weight-left"
    assert kernel_of(nn.Linear(2, 3)) == "torch"
    key = profile_key(llama_target)
    assert key["linear"] == "weight-left"
    assert "-weight-left" in cache_path(key, Path("/profiles")).name  # not a torch-kernel profile


def test_a_bad_kernel_name_is_one_line_and_exit_2():
    env = {**os.environ, ENV: "fastest"}
    done = subprocess.run([sys.executable, "-m", "specbench", "profile", "--model", "default"],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["specbench: error: SPECBENCH_LINEAR='fastest': choose auto, weight-left or torch"]
