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


def test_repeated_profiles_do_not_recompile_a_compiled_model(tracing_backend):
    """Each profile() used to install new hooks, so Dynamo recompiled until its limit, then ran eagerly."""
    from torch._dynamo.utils import counters
    from torch.nn.modules import module as nn_module

    torch._dynamo.reset()
    counters.clear()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(2, 8)
    graphs = []
    for _ in range(12):  # 12 calls: more than Dynamo's recompile limit (8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ModuleFunctionKernelProfiler(device="cpu").profile(compiled, [((x,), {})], warmup_iterations=1)
        graphs.append(counters["stats"]["unique_graphs"])
    # one graph without our modes (warmup), one with them (the first recorded pass), never more
    assert graphs[0] <= 2 and graphs[-1] == graphs[0], graphs
    # nothing of ours is left in the global hook dicts
    for hooks in (nn_module._global_forward_hooks, nn_module._global_forward_pre_hooks):
        assert not [key for key in hooks if key < 0]
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))
    assert counters["stats"]["unique_graphs"] == graphs[0]  # still the compiled graph, no fallback
    assert not counters["graph_break"]
