"""Inside the profiled hierarchy and outside it.

Every test runs on both op tracers (the ``op_tracer`` fixture).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler


def _profiler(op_tracer: str, **kwargs) -> ModuleFunctionKernelProfiler:
    return ModuleFunctionKernelProfiler(device="cpu", op_tracer=op_tracer, **kwargs)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(self.linear(x))


@pytest.mark.parametrize("function_names", [None, {"linear", "relu", "normalize"}])
def test_only_calls_inside_the_hierarchy_are_counted_and_sampled(op_tracer, function_names):
    model = Block().eval()
    outside = nn.Linear(6, 4)  # not part of module=

    def pipeline(x: torch.Tensor) -> torch.Tensor:
        y = F.normalize(F.relu(outside(x)))  # linear, relu, normalize: outside the hierarchy
        return model(y)  # linear, relu: inside

    profiler = _profiler(op_tracer, function_names=function_names)
    profiling_df, function_data = profiler.profile(pipeline, [((torch.randn(2, 6),), {})], module=model)
    # one call each, from the module; the outside calls neither count nor keep their tensors
    assert {name: [count for count, _ in entries] for name, entries in function_data.items()} == {
        "linear": [1],
        "relu": [1],
    }
    (_, (linear_args, _)), (_, (relu_args, _)) = function_data["linear"][0], function_data["relu"][0]
    assert linear_args[0].shape == (2, 4) and linear_args[1] is model.linear.weight  # the module's input
    assert relu_args[0].shape == (2, 4)
    summary = profiler.describe_results(profiling_df, function_data).set_index("function_name")
    assert summary["calls"].to_dict() == {"linear": 1, "relu": 1}
    assert summary["num_distinct_samples"].to_dict() == {"linear": 1, "relu": 1}
    # 2 x 4 float32 input + 4 x 4 weight + 4 bias = (8 + 16 + 4) * 4 bytes for linear; 8 * 4 for relu
    assert summary.loc["linear", "tensor_size_MB"] * 1024 * 1024 == pytest.approx((8 + 16 + 4) * 4)
    assert summary.loc["relu", "tensor_size_MB"] * 1024 * 1024 == pytest.approx(8 * 4)
    # the outside calls are still in the full result, outside any module
    calls = profiler.last_result.calls.to_pandas()
    assert sorted(calls.loc[calls["module_id"] == -1, "function_name"]) == ["linear", "normalize", "relu"]
    assert sorted(calls.loc[calls["module_id"] >= 0, "function_name"]) == ["linear", "relu"]


def test_torch_level_calls_outside_the_hierarchy_are_not_sampled(op_tracer):
    model = nn.Sequential(nn.Linear(4, 4)).eval()

    def pipeline(x: torch.Tensor) -> torch.Tensor:
        return model(torch.add(x, 1))

    profiler = _profiler(op_tracer, function_names={"torch.add", "linear"}, functions="all")
    _, function_data = profiler.profile(pipeline, [((torch.randn(2, 4),), {})], module=model, warmup_iterations=0)
    assert set(function_data) == {"linear"}
    calls = profiler.last_result.calls.to_pandas()
    assert calls.loc[calls["function_name"] == "torch.add", "module_id"].tolist() == [-1]
