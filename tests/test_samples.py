"""Sample collection: call counts, distinct samples, the function_names filter, tensor sizes."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.results import logical_bytes
from aitune_dispatch.tracing.samples import sample_key


class TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.b(self.a(x)))


def test_call_counts_cover_the_recorded_pass_across_samples():
    samples = [((torch.randn(2, 8),), {}), ((torch.randn(2, 8),), {}), ((torch.randn(5, 8),), {})]
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    _, function_data = profiler.profile(TwoLinears(), samples, warmup_iterations=3)
    # recorded pass only (warmup is not recorded): 3 samples x 2 linear calls = 6; samples (2, 8) and
    # (5, 8) for each of a and b with their own weights -> (2,8) weight a == weight b shape: 2 keys
    linear = function_data["linear"]
    assert sum(count for count, _ in linear) == 6
    assert sorted(count for count, _ in linear) == [2, 4]
    assert sum(count for count, _ in function_data["relu"]) == 3
    summary = profiler.describe_results(*profiler.profile(TwoLinears(), samples, warmup_iterations=0))
    row = summary.set_index("function_name").loc["linear"]
    assert row["calls"] == 6 and row["num_distinct_samples"] == 2 and row["num_modules"] == 2


def test_samples_are_the_actual_inputs():
    x = torch.randn(3, 8)
    model = TwoLinears()
    profiler = ModuleFunctionKernelProfiler(function_names={"linear"}, device="cpu")
    _, function_data = profiler.profile(model, [((x,), {})], warmup_iterations=0)
    # a and b see inputs of equal shape, dtype and strides: one sample, counted twice, whose
    # tensors are those of the first call (module a)
    ((count, (args, kwargs)),) = function_data["linear"]
    assert count == 2 and args[0] is x and args[1] is model.a.weight and args[2] is model.a.bias
    assert kwargs == {}


def test_function_names_filter_collects_only_those_and_never_filters_rows():
    samples = [((torch.randn(2, 8),), {})]
    everything = ModuleFunctionKernelProfiler(device="cpu")
    only_relu = ModuleFunctionKernelProfiler(function_names={"relu"}, device="cpu")
    nothing = ModuleFunctionKernelProfiler(function_names=set(), device="cpu")
    df_all, data_all = everything.profile(TwoLinears(), samples, warmup_iterations=0)
    df_relu, data_relu = only_relu.profile(TwoLinears(), samples, warmup_iterations=0)
    df_none, data_none = nothing.profile(TwoLinears(), samples, warmup_iterations=0)
    assert set(data_all) == {"linear", "relu"} and set(data_relu) == {"relu"} and data_none == {}
    columns = ["module_name", "function_name", "op"]
    assert df_all[columns].values.tolist() == df_relu[columns].values.tolist() == df_none[columns].values.tolist()
    summary = only_relu.describe_results(df_relu, data_relu).set_index("function_name")
    assert math.isnan(summary.loc["linear", "calls"])
    assert math.isnan(summary.loc["linear", "num_distinct_samples"])
    assert math.isnan(summary.loc["linear", "tensor_size_MB"])
    assert summary.loc["relu", "calls"] == 1 and summary.loc["linear", "num_modules"] == 2


def test_distinct_samples_differ_by_dtype_and_strides():
    x32 = torch.randn(4, 4)
    same = torch.randn(4, 4)
    x16 = x32.to(torch.float64)
    transposed = torch.randn(4, 4).t()
    keys = {sample_key(((t,), {})) for t in (x32, same, x16, transposed)}
    # x32 and same share shape, dtype and strides; float64 and the transposed view differ
    assert len(keys) == 3

    class Act(nn.Module):
        def forward(self, x):
            return F.gelu(x)

    profiler = ModuleFunctionKernelProfiler(device="cpu")
    _, data = profiler.profile(Act(), [((t,), {}) for t in (x32, same, x16)], warmup_iterations=0)
    assert sorted(count for count, _ in data["gelu"]) == [1, 2]
    assert {args[0].dtype for _, (args, _) in data["gelu"]} == {torch.float32, torch.float64}


def test_non_tensor_values_are_part_of_the_key():
    assert sample_key(((1,), {"dim": 0})) != sample_key(((1,), {"dim": 1}))
    assert sample_key((True,)) != sample_key((1,))  # equal in Python, different samples
    assert sample_key((float("nan"),)) == sample_key((float("nan"),))
    assert sample_key(([1, 2],)) != sample_key(((1, 2),))


def test_logical_size_of_a_view_is_numel_times_element_size():
    base = torch.zeros(1000, 1000)  # 4,000,000 bytes of storage
    view = base[:10, :20]  # 200 float32 elements shown
    assert logical_bytes(((view,), {})) == 200 * 4
    nested = ((view, [base[0]], {"w": torch.zeros(3, dtype=torch.float16)}), {"b": view})
    # 800 + 1000 * 4 + 3 * 2 + 800
    assert logical_bytes(nested) == 800 + 4000 + 6 + 800

    class Act(nn.Module):
        def forward(self, x):
            return F.relu(x)

    profiler = ModuleFunctionKernelProfiler(device="cpu")
    summary = profiler.describe_results(*profiler.profile(Act(), [((view,), {})], warmup_iterations=0))
    assert summary["tensor_size_MB"].item() == pytest.approx(800 / 2**20)


def test_samples_are_released_with_the_next_profile():
    import weakref

    profiler = ModuleFunctionKernelProfiler(function_names={"relu"}, device="cpu")

    class Act(nn.Module):
        def forward(self, x):
            return F.relu(x)

    x = torch.randn(3)
    ref = weakref.ref(x)
    profiler.profile(Act(), [((x,), {})], warmup_iterations=0)
    del x
    assert ref() is not None  # held by function_data of the last result
    profiler.profile(Act(), [((torch.randn(3),), {})], warmup_iterations=0)
    assert ref() is None


class _Unhashable(float):
    """A float whose ``__hash__`` raises something other than TypeError, as a hostile user type may."""

    def __hash__(self) -> int:
        raise RuntimeError("this float cannot be hashed")


class LeakyLinear(nn.Module):
    def __init__(self, slope: float) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.slope = slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.leaky_relu(self.linear(x), self.slope)


def test_an_argument_whose_hash_raises_is_keyed_by_identity_and_gives_the_rows_of_a_plain_float():
    samples = [((torch.randn(2, 4),), {}), ((torch.randn(2, 4),), {})]
    columns = ["module_name", "module", "function_name", "op", "kernel"]
    profiler, model = ModuleFunctionKernelProfiler(device="cpu"), LeakyLinear(0.1)
    plain_df, plain_data = profiler.profile(model, samples, warmup_iterations=1)
    model.slope = odd = _Unhashable(0.1)
    odd_df, odd_data = profiler.profile(model, samples, warmup_iterations=1)
    assert odd_df[columns].values.tolist() == plain_df[columns].values.tolist()
    # the same object in both calls is one sample, counted twice, as the plain float is
    assert [count for count, _ in odd_data["leaky_relu"]] == [count for count, _ in plain_data["leaky_relu"]] == [2]
    ((_, (args, kwargs)),) = odd_data["leaky_relu"]
    # the sample is the call as written (function-object hooks) or with torch's keywords (the mode): bind it
    assert inspect.signature(F.leaky_relu).bind(*args, **kwargs).arguments["negative_slope"] is odd
    # an equal value in another object is another sample: the fallback key is the object's identity
    assert sample_key(((odd,), {})) == sample_key(((odd,), {}))
    assert sample_key(((odd,), {})) != sample_key(((_Unhashable(0.1),), {}))
