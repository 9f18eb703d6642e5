"""Module tracking swaps ``nn.Module.__call__`` for the pass only: no hook on any module or in the global
hook dicts, a module's own hooks inside its scope, and what a user put in its place left alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_globals

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.tracing import modules as tracking

BARE_CALL = nn.Module.__dict__["__call__"]


def _profile(model: nn.Module, x: torch.Tensor, **kwargs):  # noqa: ANN202
    return ModuleFunctionKernelProfiler(device="cpu", **kwargs).profile(model, [((x,), {})], warmup_iterations=0)


def _rows(profiling_df) -> list[tuple[str, str]]:  # noqa: ANN001
    """The distinct (module, function) pairs (a CPU op's rows: one per op it ran)."""
    return sorted(set(zip(profiling_df["module_name"], profiling_df["function_name"])))


def _hook_counts() -> tuple[int, int, int, int]:
    return (
        len(module_globals._global_forward_pre_hooks),
        len(module_globals._global_forward_hooks),
        len(module_globals._global_forward_hooks_always_called),
        len(module_globals._global_forward_hooks_with_kwargs),
    )


class Inspecting(nn.Module):
    """Notes, from inside its own forward, what profiling has installed."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.seen: list[tuple] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append((nn.Module.__dict__["__call__"], _hook_counts(), dict(self.linear._forward_hooks)))
        return self.linear(x)


def test_the_pass_runs_under_the_call_wrapper_with_no_hook_anywhere():
    model = Inspecting().eval()
    before = _hook_counts()
    profiling_df, _ = _profile(model, torch.randn(2, 4))
    (call, hooks, own_hooks), = model.seen
    # the recorded forward ran through the wrapper, with nothing in torch's hook dicts (the slow path of
    # Module._call_impl is taken only where some hook exists) and nothing on the module itself
    assert call is tracking._traced_call
    assert hooks == before == (0, 0, 0, 0)
    assert own_hooks == {}
    assert nn.Module.__dict__["__call__"] is BARE_CALL
    assert _rows(profiling_df) == [("linear", "linear")]


class Failing(nn.Module):
    def __init__(self, error: BaseException) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.error = error

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.linear(x)
        raise self.error


@pytest.mark.parametrize("error", [ValueError("inference failed"), KeyboardInterrupt()])
def test_the_bare_call_is_back_when_inference_raises(error):
    with pytest.raises(type(error)):
        _profile(Failing(error), torch.randn(2, 4))
    assert nn.Module.__dict__["__call__"] is BARE_CALL
    assert tracking._entered is tracking._ignore and not tracking._installed


class Hooked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def test_a_modules_own_hooks_run_inside_its_scope():
    model = Hooked().eval()
    pre = model.inner.register_forward_pre_hook(lambda m, args: (F.relu(args[0]),))
    post = model.inner.register_forward_hook(lambda m, args, out: F.gelu(out))
    try:
        profiling_df, _ = _profile(model, torch.randn(2, 4))
    finally:
        pre.remove()
        post.remove()
    # the hooks' functional calls belong to the hooked module, like its forward's
    assert _rows(profiling_df) == [("inner", "gelu"), ("inner", "linear"), ("inner", "relu")]


class Callable_(nn.Module):
    """A class with a ``__call__`` of its own that calls nn.Module's."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.calls = 0

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        self.calls += 1
        return super().__call__(*args, **kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.inner(x))


def test_a_subclass_calling_super_call_is_tracked():
    model = nn.Sequential(Callable_()).eval()
    profiling_df, _ = _profile(model, torch.randn(2, 4))
    assert _rows(profiling_df) == [
        ("0", "silu"),
        ("0.inner", "linear"),
    ]
    assert model[0].calls == 1


class Replacing(nn.Module):
    """Puts a ``__call__`` of its own on nn.Module during the pass, wrapping what is there."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(4, 4)
        self.replacement = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.replacement is None:
            current = nn.Module.__call__

            def replacement(module, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
                return current(module, *args, **kwargs)

            self.replacement = nn.Module.__call__ = replacement
        return self.inner(x)


def test_a_replacement_made_during_the_pass_is_left_in_place_and_reports_nothing():
    model = Replacing().eval()
    try:
        _profile(model, torch.randn(2, 4))
        assert nn.Module.__dict__["__call__"] is model.replacement  # the user's, not put back over
        assert tracking._entered is tracking._ignore
        out = nn.Linear(4, 4)(torch.ones(1, 4))  # the wrapper it calls through is inert now
        assert out.shape == (1, 4)
        # and a later profile() wraps the user's replacement, then puts it back
        model2 = Hooked().eval()
        profiling_df, _ = _profile(model2, torch.randn(2, 4))
        assert _rows(profiling_df) == [("inner", "linear")]
        assert nn.Module.__dict__["__call__"] is model.replacement
    finally:
        nn.Module.__call__ = BARE_CALL


def test_modules_outside_the_hierarchy_are_not_scopes():
    outside = nn.Linear(4, 4)

    class Calls(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(outside(x))  # a module of no profiled hierarchy

    profiling_df, _ = _profile(Calls().eval(), torch.randn(2, 4))
    # the outside module's linear belongs to the root (the nearest profiled module), the inner one to inner
    assert _rows(profiling_df) == [
        ("", "linear"),
        ("inner", "linear"),
    ]


def test_a_compiled_module_is_profiled_without_torchs_global_hook_warning():
    # global hooks made torch warn at every call of an OptimizedModule ("Using `torch.compile(module)` when
    # there are global hooks ...") and fire an extra time for the wrapper; the call wrapper adds none
    import warnings

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()
    compiled = torch.compile(model, backend="eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        profiling_df, _ = _profile(compiled, torch.randn(2, 4))
    assert not [w for w in caught if "global hooks" in str(w.message)]
    assert set(profiling_df["module_name"]) <= {"", "0", "1"}
    assert nn.Module.__dict__["__call__"] is BARE_CALL
