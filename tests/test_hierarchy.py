"""Inside the profiled hierarchy and outside it: samples, a module that never ran, TorchScript.

Every test runs on both op tracers (the ``op_tracer`` fixture).
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, encoded


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
    calls = encoded.decoded(profiler.last_result.calls).to_pandas()
    assert sorted(calls.loc[calls["module_id"] == -1, "function_name"]) == ["linear", "normalize", "relu"]
    assert sorted(calls.loc[calls["module_id"] >= 0, "function_name"]) == ["linear", "relu"]


def test_torch_level_calls_outside_the_hierarchy_are_not_sampled(op_tracer):
    model = nn.Sequential(nn.Linear(4, 4)).eval()

    def pipeline(x: torch.Tensor) -> torch.Tensor:
        return model(torch.add(x, 1))

    profiler = _profiler(op_tracer, function_names={"torch.add", "linear"}, functions="all")
    _, function_data = profiler.profile(pipeline, [((torch.randn(2, 4),), {})], module=model, warmup_iterations=0)
    assert set(function_data) == {"linear"}
    calls = encoded.decoded(profiler.last_result.calls).to_pandas()
    assert calls.loc[calls["function_name"] == "torch.add", "module_id"].tolist() == [-1]


def test_a_module_that_never_runs_is_named_in_a_warning(op_tracer):
    model = Block().eval()
    other = nn.Linear(4, 4)
    profiler = _profiler(op_tracer)
    with pytest.warns(RuntimeWarning, match=r"module Block \(module=\) never ran during the recorded pass"):
        profiling_df, _ = profiler.profile(lambda x: other(x), [((torch.randn(2, 4),), {})], module=model)
    assert profiling_df.empty
    assert any("never ran" in message for message in profiler.last_result.warnings)


def test_a_module_that_runs_gives_no_warning(op_tracer):
    profiler = _profiler(op_tracer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        profiler.profile(Block().eval(), [((torch.randn(2, 4),), {})])
    assert profiler.last_result.warnings == ()


class Eager(nn.Module):
    def __init__(self, scripted: nn.Module) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.scripted = scripted

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scripted(self.pre(x))


def _script(kind: str, module: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit is deprecated in torch 2.13
        return torch.jit.script(module) if kind == "script" else torch.jit.trace(module, torch.randn(2, 4))


@pytest.mark.parametrize("kind", ["script", "trace"])
def test_torchscript_modules_are_profiled_as_opaque_modules(op_tracer, kind):
    scripted = _script(kind, Block().eval())
    x = torch.randn(2, 4)
    profiler = _profiler(op_tracer)
    with pytest.warns(RuntimeWarning, match=r"TorchScript module\(s\) <root> \(Block\) run as opaque modules"):
        profiling_df, _ = profiler.profile(scripted, [((x,), {})], warmup_iterations=1)
    result = profiler.last_result
    activity = result.to_pandas()
    # linear (t + addmm) and relu ran inside the scripted module: attributed to it, without a functional
    assert sorted(activity["op"]) == ["aten::addmm", "aten::relu", "aten::t"]
    assert set(activity["module_name"]) == {""} and activity["function_name"].isna().all()
    assert profiling_df.empty and len(result.unattributed()) == 3
    assert len(result.module_calls) == 1


def test_a_scripted_submodule_is_opaque_and_the_rest_is_profiled(op_tracer):
    model = Eager(_script("script", Block().eval())).eval()
    profiler = _profiler(op_tracer)
    with pytest.warns(RuntimeWarning, match=r"TorchScript module\(s\) scripted \(Block\) run as opaque"):
        profiling_df, _ = profiler.profile(model, [((torch.randn(2, 4),), {})], warmup_iterations=1)
    assert profiling_df[["module_name", "function_name"]].drop_duplicates().values.tolist() == [["pre", "linear"]]
    activity = profiler.last_result.to_pandas()
    scripted = activity[activity["module_name"] == "scripted"]
    assert sorted(scripted["op"]) == ["aten::addmm", "aten::relu", "aten::t"]
    assert scripted["function_name"].isna().all()
