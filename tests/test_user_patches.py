"""Functionals the user wraps or replaces: the recorded pass runs them as the bare pass does, and
records the torch functional they call."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import BaseTorchFunctionMode

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.tracing.gates import GateFreeCopies

ROOT = Path(__file__).resolve().parents[1]


def _attention() -> tuple[nn.MultiheadAttention, tuple[torch.Tensor, ...], dict]:
    # in training mode MultiheadAttention runs F.multi_head_attention_forward (a Python functional,
    # which the profiler runs as a gate-free copy), and without weights that calls
    # scaled_dot_product_attention through torch.nn.functional's globals
    torch.manual_seed(0)
    x = torch.randn(2, 5, 8)
    return nn.MultiheadAttention(8, 2, batch_first=True).train(), (x, x, x), {"need_weights": False}


def test_a_functional_replaced_between_profiles_is_what_the_next_profile_runs(cpu_profiler, monkeypatch):
    attention, args, kwargs = _attention()
    cpu_profiler.profile(attention, [(args, kwargs)], warmup_iterations=0)  # the copies exist now

    original = F.scaled_dot_product_attention
    calls: list[int] = []

    def replacement(*a, **k):  # noqa: ANN002, ANN003, ANN202 - a user's attention kernel, say
        calls.append(1)
        return original(*a, **k) * 2.0

    monkeypatch.setattr(F, "scaled_dot_product_attention", replacement)
    with torch.no_grad():
        expected = attention(*args, **kwargs)[0]
    assert len(calls) == 1  # the bare pass runs the replacement: the test means something
    calls.clear()

    outputs = []
    cpu_profiler.profile(lambda *a, **k: outputs.append(attention(*a, **k)[0]), [(args, kwargs)], module=attention,
                         warmup_iterations=0)

    assert len(calls) == 1  # the recorded pass ran the user's function, not the one of the first profile
    assert torch.equal(outputs[0], expected)
    # what it calls is still recorded: the functional inside the functional
    names = cpu_profiler.last_result.calls.column("function_name").to_pylist()
    assert "multi_head_attention_forward" in names and "scaled_dot_product_attention" in names

    monkeypatch.undo()  # put back: the next profile runs torch's function again
    calls.clear()
    cpu_profiler.profile(attention, [(args, kwargs)], warmup_iterations=0)
    assert calls == []


@pytest.mark.single_backend
def test_copies_take_a_modules_new_globals_and_keep_honest_gates():
    namespace = types.ModuleType("a_users_functionals")
    exec(  # noqa: S102 - a module of two functionals, as torch.nn.functional writes them
        textwrap.dedent(
            """
            from torch.overrides import has_torch_function_variadic

            def helper(x):
                return "old"

            def functional(x):
                return has_torch_function_variadic(x), helper(x)
            """
        ),
        vars(namespace),
    )
    copies = GateFreeCopies()
    copy = copies.copy(namespace.functional)
    tensor = torch.zeros(1)
    with BaseTorchFunctionMode():  # a mode: torch's gate says yes, the copy's does not
        assert namespace.functional(tensor) == (True, "old")
        assert copy(tensor) == (False, "old")
        namespace.helper = lambda x: "new"
        assert copy(tensor) == (False, "old")  # a snapshot until refreshed
        copies.refresh()
        assert copy(tensor) == (False, "new")  # the module's value now, and still the honest gate
    namespace.extra = 1
    copies.refresh()
    assert copy.__globals__["extra"] == 1
    del namespace.extra
    copies.refresh()
    assert "extra" not in copy.__globals__


_WRAPPED_BEFORE_IMPORT = """
import functools, sys
import torch, torch.nn.functional as F
from torch import nn

original = F.linear

@functools.wraps(original)
def shim(*args, **kwargs):  # a library's wrapper, installed before the profiler is imported
    return original(*args, **kwargs)

F.linear = shim
from aitune_dispatch import ModuleFunctionKernelProfiler

profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer=sys.argv[1])
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
frame, function_data = profiler.profile(model, [((torch.randn(2, 8),), {})], warmup_iterations=0)
calls = profiler.last_result.calls.column("function_name").to_pylist()
print(calls.count("linear"), sorted(function_data), dict(profiler.get_functions_to_patch())["linear"] is shim)
"""


def test_a_functional_wrapped_before_the_profiler_is_imported_is_recorded(op_tracer):
    # a fresh interpreter: torch's list of overridable functions is made after the wrapper is in place
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_WRAPPED_BEFORE_IMPORT), op_tracer],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "['linear',", "'relu']", "True"]


@pytest.mark.single_backend
def test_functions_to_patch_names_a_users_wrapper_once(monkeypatch):
    original = F.gelu

    def wrapper(*a, **k):  # noqa: ANN002, ANN003, ANN202
        return original(*a, **k)

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    monkeypatch.setattr(F, "gelu", wrapper)
    pairs = ModuleFunctionKernelProfiler.get_functions_to_patch()
    assert [function for name, function in pairs if name == "gelu"] == [wrapper]
    monkeypatch.undo()
    assert dict(ModuleFunctionKernelProfiler.get_functions_to_patch())["gelu"] is F.gelu


@pytest.mark.single_backend
def test_the_registry_is_rebuilt_only_when_the_namespace_changed(monkeypatch):
    from aitune_dispatch.tracing.functional import functional_registry, refresh_functionals

    refresh_functionals()
    built = functional_registry()
    refresh_functionals()
    assert functional_registry() is built  # nothing rebound: the registry of the last read stands

    def gelu(*a, **k):  # noqa: ANN002, ANN003, ANN202 - a replacement that hands itself over, as F's do
        return torch.overrides.handle_torch_function(gelu, (), *a, **k)

    monkeypatch.setattr(F, "gelu", gelu)
    refresh_functionals()
    rebuilt = functional_registry()
    assert rebuilt is not built and rebuilt.get(gelu) == "gelu"
    monkeypatch.undo()
    refresh_functionals()
    assert functional_registry().get(F.gelu) == "gelu"
