"""torch.compile'd models and CUDA graph replays on the GPU: attributed to module, functional call and op.

Marked ``gpu_compile`` as well as ``gpu``: they compile with Inductor, so ``benchmarks/gpu_run.sh``
runs them in a part of their own (``compiled``), next to ``benchmarks/compiled_attribution.py``.
Every expected name below is the profiled hierarchy's own (``model.named_modules()``), and every
kernel count is compared with what an uninstrumented CUPTI capture of the same code launched.
"""

from __future__ import annotations

import collections
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from fixture_models import cuda_mlp as mlp
from fixture_models import run_unprofiled as run
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, encoded, schema
from aitune_dispatch.provenance.inductor import forget_programs
from benchmarks.zoo import Graphed

pytestmark = [pytest.mark.gpu, pytest.mark.gpu_compile, pytest.mark.single_backend]

INDUCTOR = re.compile(r"^triton_[a-z]{3}_")


@pytest.fixture(autouse=True)
def fresh_compiler():
    """Each test compiles from scratch and remembers nothing of another test's graphs."""
    torch._dynamo.reset()
    forget_programs()
    yield
    torch._dynamo.reset()
    forget_programs()


def profile_quietly(profiler: ModuleFunctionKernelProfiler, function, samples, **kwargs):  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `torch.compile")  # global hooks also see OptimizedModule
        return profiler.profile(function, samples, **kwargs)


def check_compiled(result, profiling_df, model: nn.Module, must_have: set[str]) -> None:  # noqa: ANN001
    names = {name for name, _ in model.named_modules()}
    assert len(profiling_df) > 0, result.metadata
    assert set(profiling_df["module_name"]) <= names
    assert set(profiling_df["module_name"]) - {""}, "every row on the root: nothing below the compiled module"
    assert must_have <= set(profiling_df["function_name"]), (set(profiling_df["function_name"]), result.metadata)
    activity = result.to_pandas()
    triton = activity[activity["kernel"].str.match(INDUCTOR)]
    assert len(triton) > 0 and (triton["attribution"] == schema.ATTRIBUTION_INDUCTOR).all(), triton
    compiled_rows = int((activity["attribution"] == schema.ATTRIBUTION_INDUCTOR).sum())
    assert result.metadata[schema.META_COMPILED_KERNELS] == str(compiled_rows)
    # coverage is attributed over all kernel time, as everywhere
    assert result.coverage == pytest.approx(result.attributed_us / result.total_us)
    assert 0 < result.coverage <= 1
    # every fused kernel keeps all its sources; rank 0 is the call the kernel went to
    sources = encoded.decoded(result.kernel_sources).to_pandas()
    first = sources[sources["rank"] == 0]
    calls = encoded.decoded(result.calls).to_pandas().set_index("call_id")
    assert (calls.loc[first["call_id"], "function_name"].to_numpy() == first["function_name"].to_numpy()).all()


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_mlp_is_attributed_to_its_layers(mode, bare_kernels):
    model, samples = mlp()
    compiled = torch.compile(model, mode=mode)
    run(compiled, samples)  # the user's own first calls, before profiling
    profiler = ModuleFunctionKernelProfiler()
    profiling_df, _ = profile_quietly(profiler, compiled, samples, warmup_iterations=3)
    result = profiler.last_result
    check_compiled(result, profiling_df, model, {"linear", "gelu"})
    assert {"0", "2"} <= set(profiling_df.loc[profiling_df["function_name"] == "linear", "module_name"])
    if mode == "reduce-overhead":
        assert result.metadata[schema.META_GRAPH_CAPTURE] == "observed", result.metadata
        assert (result.activity["graph_id"].to_numpy() != 0).any()  # the recorded pass replayed graphs
        return
    # fidelity: the same kernels as the compiled model launches unprofiled (its own graph, warmed up)
    run(compiled, samples)
    assert collections.Counter(result.activity.column("kernel").to_pylist()) == bare_kernels(compiled, samples)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_sdpa_blocks_are_attributed_to_their_submodules(mode):
    from benchmarks import zoo

    workload = zoo.sdpa_blocks("cuda", size="small")
    compiled = torch.compile(workload.model, mode=mode)
    profiler = ModuleFunctionKernelProfiler()
    profiling_df, _ = profile_quietly(profiler, compiled, workload.samples, warmup_iterations=3)
    check_compiled(profiler.last_result, profiling_df, workload.model, {"linear", "gelu"})
    # both blocks' MLPs: identical blocks share Triton kernels, which still go to the right block
    linear_modules = set(profiling_df.loc[profiling_df["function_name"] == "linear", "module_name"])
    assert {"0.fc1", "0.fc2", "1.fc1", "1.fc2"} <= linear_modules, linear_modules


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_gpt2_is_attributed_to_its_submodules(mode):
    from benchmarks import zoo

    try:
        workload = zoo.gpt2("cuda", size="small")
    except zoo.ModelUnavailable as error:
        pytest.skip(str(error))
    compiled = torch.compile(workload.model, mode=mode)
    profiler = ModuleFunctionKernelProfiler(functions="all")  # GPT-2's Conv1D and gelu_new are torch-level calls
    profiling_df, _ = profile_quietly(profiler, compiled, workload.samples, warmup_iterations=3)
    check_compiled(profiler.last_result, profiling_df, workload.model, {"linear", "torch.tanh"})
    assert "lm_head" in set(profiling_df.loc[profiling_df["function_name"] == "linear", "module_name"])


def graphed_mlp() -> tuple[Graphed, nn.Module, list]:
    model, samples = mlp()
    return Graphed(model, samples[0][0][0]), model, samples


@pytest.mark.parametrize("warmup", [0, 1])
def test_replays_of_a_graph_captured_inside_profile_carry_the_capture_time_attribution(warmup, bare_kernels):
    graphed, inner, samples = graphed_mlp()
    profiler = ModuleFunctionKernelProfiler()
    profiler.profile(graphed, samples, warmup_iterations=warmup)
    result = profiler.last_result
    assert result.metadata[schema.META_GRAPH_CAPTURE] == "observed", result.metadata
    activity = result.to_pandas()
    replayed = activity[activity["graph_id"] != 0]
    # two samples: two replays, the kernels two replays launch unprofiled
    assert collections.Counter(replayed["kernel"]) == bare_kernels(graphed, samples, graphed_only=True)
    if warmup:  # captured in the warm-up: the recorded pass is what an unprofiled call runs, copies too
        assert collections.Counter(activity["kernel"]) == bare_kernels(graphed, samples)
    assert (replayed["attribution"] == schema.ATTRIBUTION_GRAPH_CAPTURE).all(), replayed
    assert set(replayed["module_name"]) <= {"inner.0", "inner.1", "inner.2"}
    assert {"linear", "gelu"} <= set(replayed["function_name"])
    linear = replayed[replayed["function_name"] == "linear"]
    assert set(linear["module_name"]) == {"inner.0", "inner.2"}
    # one functional call per (replay, capture-time call): 2 replays x 3 calls
    assert replayed["call_id"].nunique() == 2 * 3
    assert not [w for w in result.warnings if "CUDA graphs" in w]


def test_replays_of_a_graph_captured_before_profile_are_flagged(bare_kernels):
    graphed, inner, samples = graphed_mlp()
    run(graphed, samples[:1])  # captured here, where no profiler sees it
    profiler = ModuleFunctionKernelProfiler()
    with pytest.warns(RuntimeWarning, match="replayed by CUDA graphs whose capture profile"):
        profiler.profile(graphed, samples, warmup_iterations=1)
    activity = profiler.last_result.to_pandas()
    replayed = activity[activity["graph_id"] != 0]
    assert len(replayed) > 0
    assert collections.Counter(replayed["kernel"]) == bare_kernels(graphed, samples, graphed_only=True)
    assert collections.Counter(activity["kernel"]) == bare_kernels(graphed, samples)
    assert (replayed["attribution"] == schema.ATTRIBUTION_GRAPH_LAUNCH).all()
    assert set(replayed["op"]) == {schema.GRAPH_LAUNCH_OP}
    assert set(replayed["module_name"]) == {""}  # the replaying module: the root, Graphed
    assert replayed["function_name"].isna().all()


def test_profiling_a_compiled_model_adds_no_recompiles_and_no_graph_breaks():
    from torch._dynamo.utils import counters

    counters.clear()
    model, samples = mlp()
    compiled = torch.compile(model)
    run(compiled, samples)
    assert counters["stats"]["unique_graphs"] == 1
    graphs = []
    for _ in range(4):
        profile_quietly(ModuleFunctionKernelProfiler(), compiled, samples, warmup_iterations=1)
        graphs.append(counters["stats"]["unique_graphs"])
    # one graph under our modes, compiled in the first profile()'s warm-up (1 + 1 = 2), then none
    assert graphs == [2, 2, 2, 2] and not counters["graph_break"]
    run(compiled, samples)
    assert counters["stats"]["unique_graphs"] == 2
    with torch.no_grad():
        x = samples[0][0][0]
        torch.testing.assert_close(compiled(x), model(x))


def test_functional_outside_the_compiled_region_keeps_its_eager_attribution():
    model, samples = mlp()
    compiled_tail = torch.compile(model[1:])

    class Half(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.head = model[0]
            self.tail = compiled_tail

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.tail(F.relu(self.head(x)))

    half = Half()
    profiler = ModuleFunctionKernelProfiler()
    profiling_df, _ = profile_quietly(profiler, half, samples, warmup_iterations=2)
    activity = profiler.last_result.to_pandas()
    eager = activity[activity["attribution"] == schema.ATTRIBUTION_TRACE]
    assert {"linear", "relu"} <= set(eager["function_name"].dropna())
    assert set(eager.loc[eager["function_name"] == "linear", "module_name"]) == {"head"}
    compiled = activity[activity["attribution"] == schema.ATTRIBUTION_INDUCTOR]
    assert "gelu" in set(compiled["function_name"].dropna())
    # the OptimizedModule holds the compiled Sequential as _orig_mod; a slice keeps the Sequential's
    # keys, so GELU is tail._orig_mod.1 and the second Linear tail._orig_mod.2
    tail_names = {f"tail.{name}" if name else "tail" for name, _ in compiled_tail.named_modules()}
    assert tail_names == {"tail", "tail._orig_mod", "tail._orig_mod.1", "tail._orig_mod.2"}
    assert set(compiled["module_name"]) <= tail_names
    assert "tail._orig_mod.1" in set(compiled.loc[compiled["function_name"] == "gelu", "module_name"])


def test_every_instance_of_a_compiled_mlp_is_attributed_to_its_layers(bare_kernels):
    """Dynamo runs the graph compiled for the first instance for the second (its guards pass): the second
    compiles nothing, and is attributed by path and type (issue 21: it used to give no rows)."""
    from torch._dynamo.utils import counters

    counters.clear()
    rows, graphs = [], []
    for index in range(2):
        model, samples = mlp()
        compiled = torch.compile(model)
        profiler = ModuleFunctionKernelProfiler()
        profiling_df, _ = profile_quietly(profiler, compiled, samples, warmup_iterations=3)
        result = profiler.last_result
        check_compiled(result, profiling_df, model, {"linear", "gelu"})
        assert {"0", "2"} <= set(profiling_df.loc[profiling_df["function_name"] == "linear", "module_name"])
        assert not [w for w in result.warnings if "could not be attributed" in w], result.warnings
        if index:
            assert "1 compiled for another instance of the same modules" in result.metadata[schema.META_INDUCTOR]
        run(compiled, samples)
        assert collections.Counter(result.activity.column("kernel").to_pylist()) == bare_kernels(compiled, samples)
        rows.append(sorted(map(tuple, profiling_df[["module_name", "function_name", "op", "kernel"]].values.tolist())))
        graphs.append(counters["stats"]["unique_graphs"])
    assert rows[0] == rows[1]
    # the first instance compiled under the profiler's modes and, run bare, without them (Dynamo guards on
    # the mode stack); the second instance compiled nothing
    assert graphs[0] >= 1 and graphs[1] == graphs[0]


def test_a_compiled_mlp_called_from_a_pipeline_is_attributed_to_the_eager_model():
    """``profile(pipeline, module=model)`` with the pipeline calling ``torch.compile(model)`` (issue 21:
    it used to warn that the model never ran)."""
    model, samples = mlp()
    compiled = torch.compile(model)

    def pipeline(x: torch.Tensor) -> torch.Tensor:
        return compiled(x) * 2

    profiler = ModuleFunctionKernelProfiler()
    profiling_df, _ = profile_quietly(profiler, pipeline, samples, module=model, warmup_iterations=3)
    result = profiler.last_result
    assert not [w for w in result.warnings if "never ran" in w], result.warnings
    check_compiled(result, profiling_df, model, {"linear", "gelu"})
    assert {"0", "2"} <= set(profiling_df.loc[profiling_df["function_name"] == "linear", "module_name"])


def test_compiled_children_sharing_one_graph_are_named_and_attributed_one_at_a_time():
    """Two compiled children of one architecture share the graph compiled for the first (issue 21)."""
    first, samples = mlp()
    second, _ = mlp()

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.compile(first), torch.compile(second)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x)

    two = Two()
    profiler = ModuleFunctionKernelProfiler()
    profiling_df, _ = profile_quietly(profiler, two, samples, warmup_iterations=3)
    assert any("compiled for a._orig_mod also runs for 'b'" in w for w in profiler.last_result.warnings)
    assert {"a._orig_mod.0", "a._orig_mod.2"} <= set(profiling_df["module_name"])
    for child in (two.b, two.a):  # on its own: b by path and type, a by identity; the other runs outside
        profiling_df, _ = profile_quietly(profiler, two, samples, module=child, warmup_iterations=1)
        result = profiler.last_result
        assert not [w for w in result.warnings if "also runs for" in w], result.warnings
        assert set(profiling_df["module_name"]) <= {name for name, _ in child.named_modules()}
        linear = profiling_df.loc[profiling_df["function_name"] == "linear", "module_name"]
        assert {"_orig_mod.0", "_orig_mod.2"} <= set(linear), profiling_df
        activity = result.to_pandas()
        inside = activity[activity["module_name"].notna()]  # the other child's kernels ran outside the hierarchy
        triton = inside[inside["kernel"].str.match(INDUCTOR)]
        assert len(triton) > 0 and (triton["attribution"] == schema.ATTRIBUTION_INDUCTOR).all(), triton
