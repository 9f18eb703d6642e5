"""torch.compile'd models: profiled without graph breaks, attributed to the compiled root."""

from __future__ import annotations

import warnings

import torch
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler


def test_compiled_model_runs_compiled_and_is_attributed_to_its_root():
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(2, 8)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that global hooks also see the OptimizedModule
        profiler.profile(compiled, [((x,), {})], warmup_iterations=1)
    activity = profiler.last_result.to_pandas()
    # the compiled graph's ops ran (addmm, relu) and belong to the root of the wrapped model;
    # functional calls inside the compiled region are not visible, by design
    assert {"aten::addmm", "aten::relu"} <= set(activity["op"])
    assert set(activity["module_name"]) == {""}
    assert activity["function_name"].isna().all()
    from torch._dynamo.utils import counters

    assert not counters["graph_break"]  # our hooks and modes added no graph break
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))
