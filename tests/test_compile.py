"""torch.compile'd models: profiled without graph breaks, attributed to the compiled root."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from aitune_dispatch import ModuleFunctionKernelProfiler, schema, torch_compat


class _UserMLP(nn.Module):
    """Linear, GELU, Linear (16 -> 32 -> 8) with a forward of its own: Dynamo starts a frame at a user's
    forward, not at ``nn.Sequential``'s."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x)))



def _needs_provenance() -> None:
    """Skip a test of compiled attribution on a torch whose Inductor offers no provenance hook (torch 2.8
    calls it only with its debug trace on): there the module's own fallback tests say what is kept."""
    if not torch_compat.provenance_tracing_available():
        pytest.skip(f"this torch's Inductor has no {torch_compat.PROVENANCE_HOOK} outside its debug trace")

def _attribution_fallback(tracing_backend: str, result, inductor: bool = True) -> bool:  # noqa: ANN001
    """Whether this torch cannot attribute compiled kernels below the compiled module, after asserting
    the fallback profile() documents for it; False (nothing asserted) where it can.

    Torch 2.8 lacks two features: Inductor's provenance hook (``torch_compat.provenance_tracing_available``:
    compiled kernels then stay on the compiled module, with a warning saying so) and compiling under a
    TorchDispatchMode (``torch_compat.dispatch_mode_compiles``: under the Python op tracer compiled code
    then runs eagerly, with a warning naming op_tracer='native'). ``inductor=False`` checks the second only."""
    attributions = set(result.activity.column("attribution").to_pylist())
    if tracing_backend == "python" and not torch_compat.dispatch_mode_compiles():
        assert any("ran eagerly" in message and "op_tracer='native'" in message for message in result.warnings), (
            result.warnings
        )
        assert schema.ATTRIBUTION_INDUCTOR not in attributions  # eager code: traced, not compiled
        return True
    if inductor and not torch_compat.provenance_tracing_available():
        assert result.metadata[schema.META_INDUCTOR].startswith("unavailable: this torch's Inductor has no"), (
            result.metadata
        )
        assert any("they stay on the module whose forward was compiled" in m for m in result.warnings), (
            result.warnings
        )
        assert result.metadata[schema.META_COMPILED_KERNELS] == "0"
        assert schema.ATTRIBUTION_INDUCTOR not in attributions
        return True
    return False


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
    with torch.no_grad():
        compiled(x)  # the user's first call: one graph, compiled without our modes
    assert counters["stats"]["unique_graphs"] == 1
    graphs, interceptions = [], set()
    for _ in range(12):  # 12 calls: more than Dynamo's recompile limit (8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            profiler = ModuleFunctionKernelProfiler(device="cpu")
            profiler.profile(compiled, [((x,), {})], warmup_iterations=1)
        graphs.append(counters["stats"]["unique_graphs"])
        interceptions.add(profiler.last_result.metadata["interception"])
    # on the mode path the first profile() compiles one more graph, in its warm-up (Dynamo guards on the
    # function-mode stack, and warm-up passes run under our modes); later ones compile nothing: 1 + 1 = 2,
    # twelve times. With the function objects hooked no mode is pushed: the user's graph serves every pass.
    (interception,) = interceptions
    # where Dynamo does not compile under the Python tracer's dispatch mode (torch 2.8), no graph is compiled
    # under it either: the warm-up runs eagerly, and the user's graph is again the only one
    eager_under_mode = tracing_backend == "python" and not torch_compat.dispatch_mode_compiles()
    expected = 1 if interception == "objects" or eager_under_mode else 2
    assert graphs == [expected] * 12, graphs
    # nothing of ours is left in the global hook dicts
    for hooks in (nn_module._global_forward_hooks, nn_module._global_forward_pre_hooks):
        assert not [key for key in hooks if key < 0]
    with torch.no_grad():
        assert torch.equal(compiled(x), model(x))
    assert counters["stats"]["unique_graphs"] == expected  # the user's graph again, no fallback
    assert not counters["graph_break"]


# -- Inductor: compiled kernels attributed from the FX nodes they were generated from ------------------
def _profile_quietly(profiler: ModuleFunctionKernelProfiler, model, samples, **kwargs):  # noqa: ANN001
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that global hooks also see the OptimizedModule
        return profiler.profile(model, samples, **kwargs)


def test_inductor_kernels_are_attributed_to_submodule_functional_and_op(tracing_backend):
    """On CPU, Inductor's extern calls (``extern_kernels.addmm``) are the compiled kernels the CPU source sees."""
    from torch._dynamo.utils import counters


    torch._dynamo.reset()
    counters.clear()
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    compiled = torch.compile(model)  # Inductor: C++ kernels and two extern addmm calls
    x = torch.randn(4, 16)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    results = []
    for _ in range(2):  # the first profile() compiles in its warm-up; the second compiles nothing
        profiling_df, _ = _profile_quietly(profiler, compiled, [((x,), {})], warmup_iterations=1)
        results.append((profiling_df, profiler.last_result, counters["stats"]["unique_graphs"]))
    if all([_attribution_fallback(tracing_backend, result) for _, result, _ in results]):
        return
    for profiling_df, result, _ in results:
        # Linear(16, 32) and Linear(32, 8) each ran as one extern addmm: the kernels of module "0" and "2"
        assert profiling_df[["module_name", "function_name", "op", "kernel"]].values.tolist() == [
            ["0", "linear", "aten::addmm", "cpu::aten::addmm"],
            ["2", "linear", "aten::addmm", "cpu::aten::addmm"],
        ]
        assert list(profiling_df["module"]) == [model[0], model[2]]
        attributed = result.attributed().to_pydict()
        assert attributed["attribution"] == [schema.ATTRIBUTION_INDUCTOR] * 2
        # their functional calls were never seen running: appended to calls, untimed, without samples
        calls = result.calls.to_pydict()
        assert [calls["function_name"][c] for c in attributed["call_id"]] == ["linear", "linear"]
        assert {calls["start_ns"][c] for c in attributed["call_id"]} == {0}
        assert result.kernel_sources.select(["rank", "module_name", "function_name", "op"]).to_pylist() == [
            {"rank": 0, "module_name": "0", "function_name": "linear", "op": "aten::addmm"},
            {"rank": 0, "module_name": "2", "function_name": "linear", "op": "aten::addmm"},
        ]
        assert result.metadata[schema.META_COMPILED_KERNELS] == "2"
    # first run: the graph was generated inside profile(); second: remembered from the first
    assert results[0][1].metadata[schema.META_INDUCTOR].startswith("observed: 3 kernel call sites of 1 graphs")
    assert "3 of 1 remembered" in results[1][1].metadata[schema.META_INDUCTOR]
    assert results[0][2] == results[1][2] == 1  # one graph (under our modes), no recompile, no graph break
    assert not counters["graph_break"]
    # functions="all": the compiled code's own torch.addmm calls are no functional calls of the model
    everything = ModuleFunctionKernelProfiler(device="cpu", functions="all")
    profiling_df, _ = _profile_quietly(everything, compiled, [((x,), {})], warmup_iterations=1)
    assert profiling_df[["module_name", "function_name"]].values.tolist() == [["0", "linear"], ["2", "linear"]]
    assert counters["stats"]["unique_graphs"] == 1
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_compiled_runs_record_steady_state_passes(tracing_backend):
    """Compilation happens in the traced warm-up, so the first recorded pass is the same as every later one."""
    import collections

    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(2, 8)
    with torch.no_grad():
        compiled(x)  # compiled before profile(): the first profile() recompiles (guards on our modes)
    ops = []
    for _ in range(2):
        profiler = ModuleFunctionKernelProfiler(device="cpu")
        _profile_quietly(profiler, compiled, [((x,), {})], warmup_iterations=1)
        ops.append(collections.Counter(profiler.last_result.ops.column("op").to_pylist()))
    assert ops[0] == ops[1] and ops[0]["aten::addmm"] == 1


def test_inductor_hooks_and_caches_are_restored_also_on_exceptions(tracing_backend):
    import sys

    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config
    import torch._inductor.debug as debug

    from aitune_dispatch.provenance import inductor as provenance

    original = getattr(debug, provenance.HOOK, None)  # None where this torch has no hook (torch 2.8)
    caches = (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache)
    model = nn.Linear(4, 4)

    def failing():
        model(torch.randn(1, 4))
        raise KeyError("the profiled function failed")

    def held() -> dict[str, object]:  # what each Inductor module holds under the hook's name (2.8: utils has one)
        return {name: getattr(m, provenance.HOOK, None) for name, m in list(sys.modules.items())
                if name.startswith("torch._inductor") and m}

    before = held()
    for warmup in (0, 1):  # failing in the warm-up, and in the recorded pass
        try:
            ModuleFunctionKernelProfiler(device="cpu").profile(failing, module=model, warmup_iterations=warmup)
        except KeyError:
            pass
        else:
            raise AssertionError("the exception must reach the caller")
        assert getattr(debug, provenance.HOOK, None) is original
        after = held()
        assert all(after[name] is before.get(name, original) for name in after), after
        assert (inductor_config.fx_graph_cache, functorch_config.enable_autograd_cache) == caches
        assert not provenance._active


def test_a_torch_without_the_provenance_hook_keeps_kernels_on_the_compiled_module(tracing_backend, monkeypatch):
    import torch._inductor.debug as debug


    # torch 2.8 has no hook (torch_compat.provenance_tracing_available()): there the real torch is tested
    monkeypatch.delattr(debug, torch_compat.PROVENANCE_HOOK, raising=False)
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    compiled = torch.compile(model, backend="aot_eager")
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with pytest.warns(RuntimeWarning, match="compiled kernels cannot be attributed to functional calls: this torch"):
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Using `torch.compile")
            profiler.profile(compiled, [((torch.randn(2, 8),), {})], warmup_iterations=1)
    result = profiler.last_result
    assert result.metadata[schema.META_INDUCTOR].startswith("unavailable: this torch's Inductor has no")
    modules = set(result.activity.column("module_name").to_pylist())
    if tracing_backend == "python" and not torch_compat.dispatch_mode_compiles():
        assert modules == {"0", "1"}  # torch 2.8: under the Python op mode Dynamo ran the model eagerly (warned)
    else:
        assert modules == {""}  # today's behaviour: the compiled root
        assert result.activity.column("function_name").null_count == result.activity.num_rows


def test_a_module_compiled_in_place_is_attributed_below_it(tracing_backend):
    """``model.compile()`` compiles the module's hooks too: its launches run outside any traced module."""
    from aitune_dispatch.provenance.inductor import forget_programs

    torch._dynamo.reset()
    forget_programs()
    model = _UserMLP().eval()
    model.compile()
    x = torch.randn(4, 16)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiling_df, _ = profiler.profile(model, [((x,), {})], warmup_iterations=1)
    if _attribution_fallback(tracing_backend, profiler.last_result):
        return
    assert profiling_df[["module_name", "function_name"]].values.tolist() == [["fc1", "linear"], ["fc2", "linear"]]
    assert not [w for w in caught if "never ran" in str(w.message)]


@pytest.mark.parametrize("compiled", ["__call__", "forward"])
def test_a_module_call_compiled_without_a_wrapper_is_attributed_below_it(tracing_backend, compiled):
    """HF's ``generate()`` compiles ``model.__call__`` for its decoding step: the module's hooks run
    compiled (no forward of it is seen), as with ``model.compile()``."""
    _needs_provenance()
    from aitune_dispatch.provenance.inductor import forget_programs

    torch._dynamo.reset()
    forget_programs()
    model = _UserMLP().eval()
    x = torch.randn(4, 16)
    call = torch.compile(getattr(model, compiled))
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiling_df, _ = profiler.profile(lambda: call(x), None, module=model, warmup_iterations=1)
    if _attribution_fallback(tracing_backend, profiler.last_result):
        return
    if compiled == "__call__":  # the hooks are compiled: only the compiled graph's sources name the modules
        assert profiler.last_result.module_calls.num_rows == 0
    assert profiling_df[["module_name", "function_name"]].values.tolist() == [["fc1", "linear"], ["fc2", "linear"]]
    assert set(profiler.last_result.activity.column("attribution").to_pylist()) == {schema.ATTRIBUTION_INDUCTOR}
    assert not [w for w in caught if "never ran" in str(w.message)]
    with torch.no_grad():
        assert torch.allclose(call(x), model(x), atol=1e-5)  # a fused CPU gelu differs in the last bits


def test_a_module_call_compiled_inside_the_profiled_function_is_attributed_below_it(tracing_backend):
    """HF's ``generate()`` compiles ``model.__call__`` on its first call, inside the profiled function: the
    compile happens under profile()'s hooks and modes, is attributed as one made before, and leaves
    ``nn.Module.__call__`` as it was. Without Inductor's provenance (torch 2.8) the warning says that
    the module's call may have run compiled, and why that cannot be told, instead of "never ran"."""
    from torch.nn.modules import module as nn_module

    from aitune_dispatch.provenance.inductor import forget_programs

    torch._dynamo.reset()
    forget_programs()
    model = _UserMLP().eval()
    x = torch.randn(4, 16)

    def generate() -> torch.Tensor:
        if "compiled_call" not in vars(model):  # as HF's get_compiled_call: compiled on the first call
            model.compiled_call = torch.compile(model.__call__)
        return model.compiled_call(x)

    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiling_df, _ = profiler.profile(generate, None, module=model, warmup_iterations=1)
    assert nn.Module.__dict__["__call__"] is nn_module.Module._wrapped_call_impl
    never_ran = [str(w.message) for w in caught if "never ran" in str(w.message)]
    if tracing_backend == "python" and not torch_compat.dispatch_mode_compiles():
        # torch 2.8's Dynamo runs every frame eagerly under the Python op tracer's mode: eager rows
        attributions = set(profiler.last_result.activity.column("attribution").to_pylist())
        assert schema.ATTRIBUTION_INDUCTOR not in attributions
        rows = set(map(tuple, profiling_df[["module_name", "function_name"]].values))
        assert {("fc1", "linear"), ("fc2", "linear")} <= rows
        return
    if not torch_compat.provenance_tracing_available():
        assert profiling_df.empty
        assert len(never_ran) == 1 and "Dynamo holds code compiled from a forward of its hierarchy" in never_ran[0]
        assert torch_compat.PROVENANCE_HOOK in never_ran[0] and "torch.compile(model.__call__)" in never_ran[0]
        return
    if _attribution_fallback(tracing_backend, profiler.last_result):
        return
    assert profiling_df[["module_name", "function_name"]].values.tolist() == [["fc1", "linear"], ["fc2", "linear"]]
    assert set(profiler.last_result.activity.column("attribution").to_pylist()) == {schema.ATTRIBUTION_INDUCTOR}
    assert not never_ran
    with torch.no_grad():
        assert torch.allclose(model.compiled_call(x), model(x), atol=1e-5)


def _profiled_rows(profiler: ModuleFunctionKernelProfiler, function, model: nn.Module):  # noqa: ANN001, ANN202
    """``(module_name, function_name, attribution)`` of the ``aten::addmm`` rows of one recorded pass (the CPU
    source's kernels are ops), and the pass's warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiler.profile(function, None, module=model, warmup_iterations=1)
    rows = profiler.last_result.activity.select(["module_name", "function_name", "attribution", "op"]).to_pylist()
    messages = [str(w.message) for w in caught if "Using `torch.compile" not in str(w.message)]
    addmm = [(r["module_name"], r["function_name"], r["attribution"]) for r in rows if r["op"] == "aten::addmm"]
    return addmm, messages


def test_a_module_call_compiled_without_a_wrapper_is_attributed_in_later_profiles_too(tracing_backend):
    """HF's generate() keeps ``torch.compile(model.__call__)`` and reuses it: a later ``profile()`` compiles
    nothing, and the graph remembered from the first attributes it."""
    _needs_provenance()
    from aitune_dispatch.provenance.inductor import forget_programs

    torch._dynamo.reset()
    forget_programs()
    model = _UserMLP().eval()
    model.compiled_call = torch.compile(model.__call__)  # kept on the model, as HF keeps _compiled_call
    x = torch.randn(2, 16)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    expected = [("fc1", "linear", schema.ATTRIBUTION_INDUCTOR), ("fc2", "linear", schema.ATTRIBUTION_INDUCTOR)]
    for _ in range(2):
        rows, messages = _profiled_rows(profiler, lambda: model.compiled_call(x), model)
        if _attribution_fallback(tracing_backend, profiler.last_result):
            return
        assert rows == expected and not [m for m in messages if "never ran" in m], (rows, messages)


def test_a_compiled_call_of_another_instance_is_not_attributed_to_the_profiled_one(tracing_backend):
    """The forward's code is the class's: a graph compiled for another instance, outside the hierarchy,
    says nothing about the profiled one, whose launches and those outside any module keep their modules."""
    _needs_provenance()
    from aitune_dispatch.provenance.inductor import forget_programs

    torch._dynamo.reset()
    forget_programs()
    model, other = _UserMLP().eval(), _UserMLP().eval()
    other_call = torch.compile(other.__call__)
    x, weight, bias = torch.randn(2, 16), torch.randn(16, 8), torch.randn(8)

    def run() -> None:
        model(x)
        torch.addmm(bias, x, weight)  # an eager op outside any module
        other_call(x)

    profiler = ModuleFunctionKernelProfiler(device="cpu")
    rows, _ = _profiled_rows(profiler, run, model)
    trace = schema.ATTRIBUTION_TRACE
    assert rows[:2] == [("fc1", "linear", trace), ("fc2", "linear", trace)]
    if _attribution_fallback(tracing_backend, profiler.last_result, inductor=False):
        return  # the other instance ran eagerly: its linear calls were traced, outside the hierarchy
    assert rows[2:] == [(None, None, trace)] * 3, rows  # the outside addmm and the other instance's two


def test_a_wrapped_child_beside_an_eager_twin_keeps_each_kernel_on_its_own_module(tracing_backend):
    """``a`` is compiled through its wrapper, ``b`` is its eager twin (one forward code): ``a``'s wrapper
    runs its hooks eagerly, so nothing is outside a module and nothing may move."""
    from aitune_dispatch.provenance.inductor import forget_programs

    class Twins(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.compile(_UserMLP().eval()), _UserMLP().eval()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(x) + self.b(x)

    torch._dynamo.reset()
    forget_programs()
    twins = Twins().eval()
    x, weight, bias = torch.randn(2, 16), torch.randn(16, 8), torch.randn(8)

    def run() -> None:
        twins(x)
        torch.addmm(bias, x, weight)  # outside any module

    profiler = ModuleFunctionKernelProfiler(device="cpu")
    rows, _ = _profiled_rows(profiler, run, twins)
    if _attribution_fallback(tracing_backend, profiler.last_result):
        return
    inductor, trace = schema.ATTRIBUTION_INDUCTOR, schema.ATTRIBUTION_TRACE
    assert rows == [
        ("a._orig_mod.fc1", "linear", inductor),
        ("a._orig_mod.fc2", "linear", inductor),
        ("b.fc1", "linear", trace),
        ("b.fc2", "linear", trace),
        (None, None, trace),
    ], rows


def test_the_native_mode_probe_leaves_dynamos_counters_as_they_were():
    from torch._dynamo.utils import counters

    from aitune_dispatch import backends

    counters["stats"]["unique_graphs"] += 5  # whatever the user's process had counted
    before = {key: dict(value) for key, value in counters.items()}
    backends.native_mode_compiles.cache_clear()
    assert isinstance(backends.native_mode_compiles(), bool)
    assert {key: dict(value) for key, value in counters.items()} == before


def test_compiled_code_is_traced_by_the_python_backend_where_dynamo_cannot_trace_the_native_mode(monkeypatch):
    # torch 2.11's Dynamo runs frames eagerly under the native mode: profiling must not change what runs
    import pytest

    from aitune_dispatch import backends

    monkeypatch.setattr(backends, "native_mode_compiles", lambda: False)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).eval()
    compiled = torch.compile(model, backend="aot_eager")
    x = torch.randn(2, 8)
    with pytest.warns(RuntimeWarning, match="cannot trace the native function mode"):
        result = ModuleFunctionKernelProfiler(device="cpu", op_tracer="native").profile_result(
            compiled, [((x,), {})], warmup_iterations=1
        )
    assert result.metadata["tracer"] == "python"
    eager = ModuleFunctionKernelProfiler(device="cpu", op_tracer="native").profile_result(
        model, [((x,), {})], warmup_iterations=0
    )
    assert eager.metadata["tracer"] == "native"  # eager code keeps the native backend


@pytest.mark.single_backend
def test_compiled_code_stays_compiled_under_the_native_function_mode():
    """Dynamo binds the mode's traceable __torch_function__ only where the lookup returns a method.

    The native handler used to be a builtin bound to the mode; torch 2.11's Dynamo then inlined the
    class's Python ``__torch_function__`` without ``self``, failed, and ran the compiled frame eagerly.
    """
    import types

    from torch._dynamo.utils import counters

    from aitune_dispatch import backends
    from aitune_dispatch.tracing import native

    if not native.available():
        pytest.skip("the native tracer is not built")
    mode = native.NativeFunctionMode()
    assert isinstance(mode.__torch_function__, types.MethodType) and mode.__torch_function__.__self__ is mode
    torch._dynamo.reset()
    counters.clear()

    def step(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x) * 2 + 1

    compiled = torch.compile(step, backend="eager", dynamic=False)
    x = torch.randn(3)
    compiled(x)
    with mode:
        out = compiled(x)
    assert counters["stats"]["unique_graphs"] == 2  # a second graph for the mode stack, no eager fallback
    assert not counters["graph_break"]
    assert torch.equal(out, step(x))
    backends.native_mode_compiles.cache_clear()
    assert backends.native_mode_compiles()


# -- issue 21: instances that share one compiled graph, and compiled models called from a pipeline ------
class _MLP(nn.Sequential):
    """Linear, ReLU, Linear: one architecture, instantiated several times."""

    def __init__(self) -> None:
        super().__init__(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))


_TORCH_DIR = str(Path(torch.__file__).parent)


def _ours(caught: list[warnings.WarningMessage]) -> list[str]:
    """The warnings profile() gave, without torch's own: its notice that global hooks also see the
    OptimizedModule, and what torch warns from inside itself (Dynamo's "Guards may run slower on
    Python 3.13.0" of torch 2.15)."""
    return [
        str(w.message)
        for w in caught
        if "Using `torch.compile" not in str(w.message) and not w.filename.startswith(_TORCH_DIR)
    ]


def _compiled_rows(profiling_df, result):  # noqa: ANN001

    attributed = result.attributed().to_pydict()
    assert set(attributed["attribution"]) == {schema.ATTRIBUTION_INDUCTOR}, result.metadata
    return profiling_df[["module_name", "function_name", "op", "kernel"]].values.tolist()


def test_every_instance_of_a_compiled_architecture_is_attributed(tracing_backend):
    """Dynamo runs the graph compiled for the first instance for every later one (its guards pass): no
    compile is seen, and the remembered graph named the first instance's modules. The later instances
    used to give no rows, and no warning."""
    import gc

    from torch._dynamo.utils import counters

    from aitune_dispatch.provenance.inductor import forget_programs

    torch._dynamo.reset()
    forget_programs()
    counters.clear()
    x = torch.randn(2, 8)
    expected = [["0", "linear", "aten::addmm", "cpu::aten::addmm"], ["2", "linear", "aten::addmm", "cpu::aten::addmm"]]
    first = torch.compile(_MLP().eval())
    with torch.no_grad():
        first(x)  # compiled outside profile(): the first profile() compiles again, under its modes
    rows, graphs = [], []
    for index in range(3):
        compiled = first if index == 0 else torch.compile(_MLP().eval())
        profiler = ModuleFunctionKernelProfiler(device="cpu")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            profiling_df, _ = profiler.profile(compiled, [((x,), {})], warmup_iterations=1)
        result = profiler.last_result
        if _attribution_fallback(tracing_backend, result):
            return
        rows.append(_compiled_rows(profiling_df, result))
        assert list(profiling_df["module"]) == [compiled._orig_mod[0], compiled._orig_mod[2]]
        graphs.append(counters["stats"]["unique_graphs"])
        ours = _ours(caught)
        assert not ours, ours
        if index:
            assert "1 compiled for another instance of the same modules" in result.metadata[schema.META_INDUCTOR]
        if index == 1:
            del first  # the instance the graph was compiled for is gone: Dynamo still runs its graph
            gc.collect()
    assert rows == [expected] * 3
    assert graphs == [2, 2, 2]  # the user's graph and one under our modes; the later instances reuse it


def test_compiled_children_sharing_one_graph_are_named_and_attributed_one_at_a_time(tracing_backend):
    """Two compiled children of one architecture: Dynamo runs the graph compiled for the first for the
    second too, so the second's kernels cannot be told from the first's by the graph's sources. They
    stayed on the second child, with no warning; the warning names it, and profiling it on its own
    (module=) attributes it by path and type."""
    from aitune_dispatch.provenance.inductor import forget_programs

    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = torch.compile(_MLP().eval()), torch.compile(_MLP().eval())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x))

    torch._dynamo.reset()
    forget_programs()
    two = Two().eval()
    x = torch.randn(2, 8)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiling_df, _ = profiler.profile(two, [((x,), {})], warmup_iterations=1)
    if _attribution_fallback(tracing_backend, profiler.last_result):
        return
    shared = [str(w.message) for w in caught if "compiled for a._orig_mod also runs for 'b'" in str(w.message)]
    assert shared and all(w.category is RuntimeWarning for w in caught if str(w.message) in shared), _ours(caught)
    assert any("module=<the model>.b" in message for message in shared), shared
    assert profiling_df[["module_name", "function_name"]].values.tolist() == [
        ["a._orig_mod.0", "linear"],
        ["a._orig_mod.2", "linear"],
    ]
    for child, name in ((two.b, "b"), (two.a, "a")):  # each on its own: by path and type, or by identity
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            profiling_df, _ = profiler.profile(two, [((x,), {})], module=child, warmup_iterations=1)
        ours = _ours(caught)
        assert not ours, (name, ours)
        assert _compiled_rows(profiling_df, profiler.last_result) == [
            ["_orig_mod.0", "linear", "aten::addmm", "cpu::aten::addmm"],
            ["_orig_mod.2", "linear", "aten::addmm", "cpu::aten::addmm"],
        ], name


def test_a_compiled_model_called_from_a_pipeline_is_attributed_to_the_eager_model(tracing_backend):
    """``profile(pipeline, module=model)`` where the pipeline calls ``torch.compile(model)``: the
    compiled wrapper stands for the model. It used to warn that the model "never ran"."""
    from aitune_dispatch.provenance.inductor import forget_programs

    torch._dynamo.reset()
    forget_programs()
    model = _MLP().eval()
    compiled = torch.compile(model)
    x = torch.randn(2, 8)

    def pipeline(inputs: torch.Tensor) -> torch.Tensor:
        return compiled(inputs) * 2

    expected = [["0", "linear", "aten::addmm", "cpu::aten::addmm"], ["2", "linear", "aten::addmm", "cpu::aten::addmm"]]
    for _ in range(2):  # compiled inside the first profile(); remembered in the second
        profiler = ModuleFunctionKernelProfiler(device="cpu")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            profiling_df, _ = profiler.profile(pipeline, [((x,), {})], module=model, warmup_iterations=1)
        if _attribution_fallback(tracing_backend, profiler.last_result):
            return
        ours = _ours(caught)
        assert not ours, ours
        assert _compiled_rows(profiling_df, profiler.last_result) == expected
        assert list(profiling_df["module"]) == [model[0], model[2]]
        # the pipeline's own mul ran outside the model: it stays outside the hierarchy
        activity = profiler.last_result.to_pandas()
        assert activity.loc[activity["op"] == "aten::mul", "module_name"].isna().all()

    class Holder:  # keeps the wrapper where profile() does not look (no instance dict)
        __slots__ = ("wrapper",)

    holder = Holder()
    holder.wrapper = compiled
    hidden = [(lambda inputs: holder.wrapper(inputs), "could not be seen to reach")]
    compiled = None  # the pipeline above no longer reaches it: only the holder keeps it
    # a wrapper made inside the profiled function does not exist when the pass begins
    hidden.append((lambda inputs: torch.compile(model)(inputs), "create it once, outside the profiled function"))
    for function, why in hidden:
        profiler = ModuleFunctionKernelProfiler(device="cpu")
        with pytest.warns(RuntimeWarning, match="never ran") as caught:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Using `torch.compile")
                profiler.profile(function, [((x,), {})], module=model, warmup_iterations=0)
        assert any(why in str(w.message) for w in caught), [str(w.message) for w in caught]
        holder.wrapper = None


_GLOBAL_WRAPPERS: dict[str, nn.Module] = {}


@pytest.mark.single_backend
def test_the_wrappers_a_pipeline_can_reach_are_found_without_running_its_code():
    """A compiled wrapper stands for the module it wraps: found where a pipeline keeps it (nothing compiles here)."""
    import functools

    from aitune_dispatch.tracing.wrappers import live_wrappers, reachable_wrappers

    model = _MLP()
    compiled, part = torch.compile(model), torch.compile(model[2])  # of the root, and of a module below it

    def closure(x: torch.Tensor) -> torch.Tensor:
        return part(compiled(x))

    def through_global(x: torch.Tensor) -> torch.Tensor:
        return _GLOBAL_WRAPPERS["model"](x)

    class Pipeline:
        def __init__(self) -> None:
            self.stages = [compiled]

        def __call__(self, x: torch.Tensor) -> torch.Tensor:
            return self.stages[0](x)

    class PipelineModule(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = compiled  # a child: the wrapper is in its tree

    class Slots:
        __slots__ = ("wrapper",)

        def __getattr__(self, name: str):  # noqa: ANN204 - never asked
            raise AssertionError("our search ran the object's code")

    _GLOBAL_WRAPPERS["model"] = compiled
    hidden = Slots()
    hidden.wrapper = compiled
    found = {
        "closure": reachable_wrappers(closure, model),
        "global": reachable_wrappers(through_global, model),
        "method": reachable_wrappers(Pipeline().__call__, model),
        "object": reachable_wrappers(Pipeline(), model),
        "partial": reachable_wrappers(functools.partial(lambda w, x: w(x), compiled), model),
        "module": reachable_wrappers(PipelineModule(), model),
        "hidden": reachable_wrappers(lambda x: hidden.wrapper(x), model),
        "another model": reachable_wrappers(closure, _MLP()),
    }
    ids = {name: {id(w) for w in wrappers} for name, wrappers in found.items()}
    assert ids == {
        "closure": {id(compiled), id(part)},
        "global": {id(compiled)},
        "method": {id(compiled)},
        "object": {id(compiled)},
        "partial": {id(compiled)},
        "module": {id(compiled)},
        "hidden": set(),
        "another model": set(),
    }
    assert {id(w) for w in live_wrappers(model)} == {id(compiled), id(part)}  # wherever they are kept
    # a wrapper inside the hierarchy is one of its modules, not a stand-in
    assert reachable_wrappers(closure, nn.Sequential(part)) == ()
    _GLOBAL_WRAPPERS.clear()


def test_a_decorated_forward_compiled_through_its_modules_call_is_attributed_below_it(tracing_backend):
    """HF decorates forwards (``can_return_tuple``): Dynamo compiles the decorator's frame, not the forward's."""
    _needs_provenance()
    import functools

    from aitune_dispatch.provenance.inductor import forget_programs

    def returns_tuple(forward):  # noqa: ANN001, ANN202 - a decorator as HF writes them
        @functools.wraps(forward)
        def wrapper(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
            return forward(self, *args, **kwargs)

        return wrapper

    class Decorated(_UserMLP):
        @returns_tuple
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x)

    torch._dynamo.reset()
    forget_programs()
    model = Decorated().eval()
    x = torch.randn(4, 16)
    call = torch.compile(model.__call__)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiling_df, _ = profiler.profile(lambda: call(x), None, module=model, warmup_iterations=1)
    if _attribution_fallback(tracing_backend, profiler.last_result):
        return
    assert profiling_df[["module_name", "function_name"]].values.tolist() == [["fc1", "linear"], ["fc2", "linear"]]
    assert not [w for w in caught if "never ran" in str(w.message)]


# -- backends other than Inductor: said once, with what to do ------------------------------------------
def _compiled_whole(model: nn.Module, backend: str) -> tuple[object, dict]:
    return torch.compile(model, backend=backend), {}


def _compiled_child(model: nn.Module, backend: str) -> tuple[object, dict]:
    model.fc2 = torch.compile(model.fc2, backend=backend)
    return model, {}


def _compiled_in_place(model: nn.Module, backend: str) -> tuple[object, dict]:
    model.compile(backend=backend)
    return model, {}


def _compiled_pipeline(model: nn.Module, backend: str) -> tuple[object, dict]:
    step = torch.compile(lambda x: model(x), backend=backend)
    return step, {"module": model}


def _backend_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "torch.compile(backend=" in str(w.message)]


@pytest.mark.parametrize("how", [_compiled_whole, _compiled_child, _compiled_in_place, _compiled_pipeline])
@pytest.mark.parametrize("backend", ["aot_eager", "eager"])
def test_a_backend_other_than_inductor_is_named_once_with_what_to_do(tracing_backend, backend, how):
    torch._dynamo.reset()
    function, options = how(_UserMLP().eval(), backend)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiler.profile(function, [((torch.randn(4, 16),), {})], warmup_iterations=1, **options)
    (message,) = _backend_warnings(caught)  # once per profile(), warm-up passes and recorded pass together
    assert f"backend={backend!r}" in message
    assert "backend='inductor'" in message and "torch.compiler.disable" in message and "docs/compiled.md" in message
    assert message in profiler.last_result.warnings  # the CLI prints a result's warnings
    (warning,) = [w for w in caught if str(w.message) == message]
    assert warning.category is RuntimeWarning and warning.filename == __file__  # at profile()'s caller


def test_inductor_and_an_eager_model_give_no_backend_warning(tracing_backend):
    torch._dynamo.reset()
    model = _UserMLP().eval()
    for function in (torch.compile(model), model):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ModuleFunctionKernelProfiler(device="cpu").profile(function, [((torch.randn(4, 16),), {})])
        assert _backend_warnings(caught) == []


def test_the_backend_is_read_from_every_kind_of_compiled_object():
    from aitune_dispatch.provenance.compile_backends import backend_of

    def my_backend(graph, inputs):  # noqa: ANN001, ANN202
        return graph.forward

    model = nn.Linear(2, 2)
    named = (("aot_eager", "aot_eager"), ("eager", "eager"), ("inductor", "inductor"), (my_backend, "my_backend"))
    for backend, name in named:
        assert backend_of(torch.compile(model, backend=backend)) == name
        assert backend_of(torch.compile(model.forward, backend=backend)) == name
    in_place = nn.Linear(2, 2)
    in_place.compile(backend="eager")
    assert backend_of(in_place) == "eager"
    assert backend_of(model) is None and backend_of(model.forward) is None and backend_of(len) is None


class _DisabledRegion(nn.Module):
    """A compiled model whose MLP runs eagerly: called from a function under ``torch.compiler.disable``."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = _UserMLP()
        self.head = nn.Linear(8, 8)

    @torch.compiler.disable
    def run_mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.run_mlp(x))


def test_a_region_under_torch_compiler_disable_is_traced_as_eager_whatever_the_backend(tracing_backend):
    torch._dynamo.reset()
    model = _DisabledRegion().eval()
    samples = [((torch.randn(4, 16),), {})]
    columns = ["module_name", "function_name", "op"]
    eager, _ = ModuleFunctionKernelProfiler(device="cpu").profile(model, samples, warmup_iterations=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the backend's warning, and torch's about global hooks
        profiler = ModuleFunctionKernelProfiler(device="cpu")
        compiled, _ = profiler.profile(torch.compile(model, backend="aot_eager"), samples, warmup_iterations=1)
    in_mlp = eager["module_name"].str.startswith("mlp")
    assert in_mlp.any()
    if _attribution_fallback(tracing_backend, profiler.last_result, inductor=False):
        assert compiled[columns].values.tolist() == eager[columns].values.tolist()  # the head ran eagerly too
        return
    assert compiled[columns].values.tolist() == eager.loc[in_mlp, columns].values.tolist()  # the head: compiled
