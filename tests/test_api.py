"""The drop-in surface: imports, arguments, validation, return types and column order."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from fixture_models import quickstart_model
from torch import nn

import aitune_dispatch
import aitune_dispatch.torch as ait
import aitune_dispatch.tracing
from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.schema import PROFILING_COLUMNS, SUMMARY_COLUMNS


def test_both_import_paths_give_the_same_class():
    assert ait.ModuleFunctionKernelProfiler is ModuleFunctionKernelProfiler
    assert aitune_dispatch.ModuleFunctionKernelProfiler is ModuleFunctionKernelProfiler


def test_spec_quickstart_runs_with_cpu_opt_in():
    model = quickstart_model()
    samples = [((torch.randn(32, 128),), {})]
    profiler = ait.ModuleFunctionKernelProfiler(function_names={"linear", "relu"}, device="cpu")
    profiling_df, function_data = profiler.profile(model, samples, warmup_iterations=3)
    summary_df = profiler.describe_results(profiling_df, function_data)
    assert isinstance(profiling_df, pd.DataFrame) and isinstance(function_data, dict)
    assert list(profiling_df.columns) == PROFILING_COLUMNS
    assert list(summary_df.columns) == SUMMARY_COLUMNS
    assert set(summary_df["function_name"]) == {"linear", "relu"}
    # root module name is "", children are "0", "1", "2"
    assert set(profiling_df["module_name"]) == {"0", "1", "2"}
    assert all(row.module is model[int(row.module_name)] for row in profiling_df.itertuples())
    assert all(kernel.startswith("cpu::aten::") for kernel in profiling_df["kernel"])
    assert (profiling_df["kernel_us"] > 0).all()
    assert profiling_df["op"].str.startswith("aten::").all()


def test_default_device_requires_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    profiler = ModuleFunctionKernelProfiler()
    reference = r"^CUDA is required to profile module and function kernel candidates\. "
    with pytest.raises(RuntimeError, match=reference) as info:  # the reference's wording first, then the fix
        profiler.profile(quickstart_model(), [((torch.randn(2, 128),), {})])
    assert "device='cpu'" in str(info.value)


def test_plain_function_needs_module(cpu_profiler):
    # the reference's wording first (code written against it matches on it), then the fix
    with pytest.raises(ValueError, match=r"^module must be provided when function is not an nn\.Module\. ") as info:
        cpu_profiler.profile(lambda: None)
    assert "module=<the nn.Module to observe>" in str(info.value)


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_negative_warmup_is_rejected(cpu_profiler, bad):
    with pytest.raises(ValueError, match=r"^warmup_iterations must be greater than or equal to 0\. ") as info:
        cpu_profiler.profile(quickstart_model(), [((torch.randn(2, 128),), {})], warmup_iterations=bad)
    assert f"got {bad!r}" in str(info.value)


def test_functions_to_patch_are_the_intercepted_functionals():
    pairs = ModuleFunctionKernelProfiler(function_names=set(), device="cpu").get_functions_to_patch()
    assert pairs == ModuleFunctionKernelProfiler.get_functions_to_patch()  # also callable on the class
    names = [name for name, _ in pairs]
    assert names == sorted(set(names))  # one pair per name, sorted
    by_name = dict(pairs)
    # whatever function_names says (an empty set here), the functionals the profiler records
    assert by_name["linear"] is F.linear and by_name["relu"] is F.relu
    assert by_name["scaled_dot_product_attention"] is F.scaled_dot_product_attention
    assert all(getattr(F, name) is function for name, function in pairs)
    assert set(names) == aitune_dispatch.tracing.functional_names()


def test_functions_to_patch_takes_the_references_module_argument():
    # the reference's signature is get_functions_to_patch(self, module=F)
    profiler = ModuleFunctionKernelProfiler(device="cpu")
    pairs = profiler.get_functions_to_patch()
    assert profiler.get_functions_to_patch(F) == pairs
    assert profiler.get_functions_to_patch(module=torch.nn.functional) == pairs
    with pytest.raises(ValueError, match=r"torch\.nn\.functional only.*get_functions_to_patch\(\)") as info:
        profiler.get_functions_to_patch(torch)
    assert "'torch'" in str(info.value)


@pytest.mark.parametrize("bad", [[torch.randn(2, 128)], [((torch.randn(2, 128),), "kw")]])
def test_malformed_samples_are_rejected(cpu_profiler, bad):
    with pytest.raises(ValueError, match=r"\(args"):
        cpu_profiler.profile(quickstart_model(), bad)


def test_bad_device_and_names_are_rejected():
    with pytest.raises(ValueError, match="device"):
        ModuleFunctionKernelProfiler(device="tpu")
    with pytest.raises(TypeError, match="set of names"):
        ModuleFunctionKernelProfiler(function_names="linear")


@pytest.mark.parametrize("bad", [5, 2.5, object()])
def test_function_names_that_are_not_an_iterable_are_named_as_such(bad):
    with pytest.raises(TypeError, match=r"^function_names must be an iterable of torch\.nn\.functional names") as info:
        ModuleFunctionKernelProfiler(function_names=bad, device="cpu")
    assert "such as {'linear'} or None" in str(info.value)
    assert f"got {type(bad).__name__} {bad!r}" in str(info.value)


@pytest.mark.parametrize("bad", [[["linear"]], [5], ["linear", None]])
def test_function_names_entries_must_be_strings(bad):
    with pytest.raises(TypeError, match=r"^function_names must contain strings such as 'linear'") as info:
        ModuleFunctionKernelProfiler(function_names=bad, device="cpu")
    assert repr([entry for entry in bad if not isinstance(entry, str)]) in str(info.value)


def test_a_progress_callback_that_is_not_callable_is_refused_before_anything_runs(cpu_profiler):
    calls = []

    def model(x):
        calls.append(x)
        return x

    says = r"^on_progress must be a callable that takes a capture\.Step, or None; got int"
    with pytest.raises(TypeError, match=says):
        cpu_profiler.profile_result(model, [((torch.randn(2),), {})], module=nn.ReLU(), on_progress=5)
    assert calls == [] and cpu_profiler.last_result is None


def test_unknown_function_name_warns():
    profiler = ModuleFunctionKernelProfiler(function_names={"linaer"}, device="cpu")
    with pytest.warns(UserWarning, match="linaer"):
        profiler.profile(quickstart_model(), [((torch.randn(2, 128),), {})], warmup_iterations=0)


def test_passes_run_under_no_grad(cpu_profiler):
    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(torch.is_grad_enabled())
            return torch.relu(x)

    cpu_profiler.profile(Probe(), [((torch.randn(2),), {})], warmup_iterations=2)
    assert seen == [False, False, False]


def test_data_none_calls_function_without_arguments(cpu_profiler):
    model = quickstart_model()
    calls = []

    def inference_fn():
        calls.append(1)
        model(torch.randn(4, 128))

    profiling_df, _ = cpu_profiler.profile(inference_fn, module=model, warmup_iterations=2)
    assert len(calls) == 3  # 2 warmup passes + 1 recorded pass
    assert set(profiling_df["function_name"]) == {"linear", "relu"}


def test_empty_results_keep_their_schema(cpu_profiler):
    class NoFunctional(nn.Module):
        def forward(self, x):
            return x + 1  # an op, but no torch.nn.functional call encloses it

    profiling_df, function_data = cpu_profiler.profile(NoFunctional(), [((torch.randn(3),), {})])
    assert profiling_df.empty and list(profiling_df.columns) == PROFILING_COLUMNS
    assert profiling_df["kernel_us"].dtype == float
    summary = cpu_profiler.describe_results(profiling_df, function_data)
    assert summary.empty and list(summary.columns) == SUMMARY_COLUMNS
    # nothing was lost: the op is in the full result, unattributed
    result = cpu_profiler.last_result
    assert result.activity.num_rows == 1 and result.coverage == 0.0
    assert result.unattributed()["op"].tolist() == ["aten::add"]


def test_profile_is_not_reentrant(cpu_profiler):
    inner_error = []

    class Nested(nn.Module):
        def forward(self, x):
            try:
                cpu_profiler.profile(nn.ReLU(), [((x,), {})], warmup_iterations=0)
            except RuntimeError as error:
                inner_error.append(str(error))
            return x

    cpu_profiler.profile(Nested(), [((torch.randn(2),), {})], warmup_iterations=0)
    assert inner_error and "already running" in inner_error[0]


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (((torch.randn(2, 128),), {}), "got one pair: pass [data]"),
        (torch.randn(2, 128), "got Tensor"),
        ({"x": 1}, "got dict"),
        ("x", "got str"),
    ],
)
def test_data_that_is_not_a_list_of_pairs_is_named_as_such(cpu_profiler, data, says):
    with pytest.raises(ValueError, match=r"^data must be a list of \(args, kwargs\) pairs") as info:
        cpu_profiler.profile(quickstart_model(), data, warmup_iterations=0)
    assert says in str(info.value)


def test_empty_data_is_said_once_and_is_not_a_module_that_never_ran(cpu_profiler):
    with pytest.warns(RuntimeWarning) as caught:
        profiling_df, function_data = cpu_profiler.profile(quickstart_model(), [], warmup_iterations=0)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and messages[0].startswith("data is empty"), messages
    assert profiling_df.empty and not function_data


def test_describe_results_top_k_must_be_a_positive_integer_or_none(cpu_profiler):
    profiling_df, function_data = cpu_profiler.profile(quickstart_model(), [((torch.randn(2, 128),), {})])
    for bad in (1.5, "3", True, -1, 0):
        with pytest.raises(ValueError, match="top_k must be None \\(every row\\) or a positive integer"):
            cpu_profiler.describe_results(profiling_df, function_data, top_k=bad)
    import numpy as np

    assert len(cpu_profiler.describe_results(profiling_df, function_data, top_k=np.int64(1))) == 1
    every = cpu_profiler.describe_results(profiling_df, function_data, top_k=None)
    assert len(every) == profiling_df["function_name"].nunique()


def test_a_bad_device_names_the_accepted_forms():
    with pytest.raises(ValueError, match=r"'cuda:N'") as info:
        ModuleFunctionKernelProfiler(device="cuda:x")
    assert "got 'cuda:x'" in str(info.value)


def test_the_cpu_profiler_fixture_uses_this_tests_backend(cpu_profiler, request):
    # every test runs once per tracing backend; a fixture that ignored the parameter would run one twice
    assert cpu_profiler.op_tracer == request.node.callspec.params["tracing_backend"]


@pytest.mark.single_backend
def test_the_package_imports_and_profiles_where_the_native_tracer_is_not_built():
    """A machine that could not compile the extension still imports the package and profiles with
    the pure-Python backend (``NativeFunctionMode`` must still be a valid class there)."""
    code = textwrap.dedent(
        """
        import sys, warnings
        sys.modules["aitune_dispatch.tracing._tracer"] = None  # the import fails, as where it was not built
        import torch
        from torch import nn
        from aitune_dispatch import ModuleFunctionKernelProfiler
        from aitune_dispatch.tracing import native
        assert not native.available()
        profiler = ModuleFunctionKernelProfiler(device="cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            frame, _ = profiler.profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), [((torch.randn(2, 4),), {})])
        print(profiler.last_result.metadata["tracer"], len(frame))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    tracer, rows = done.stdout.split()
    assert tracer == "python" and int(rows) > 0
