"""A profiled function that enters a mode and never exits it: ours leave, the user's stay, a warning says so."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _get_current_dispatch_mode_stack,
    is_in_torch_dispatch_mode,
)

from aitune_dispatch import ModuleFunctionKernelProfiler
from aitune_dispatch.tracing import native


@pytest.fixture
def mode_profiler(tracing_backend: str) -> ModuleFunctionKernelProfiler:
    """A CPU profiler that sees functional calls through its TorchFunctionMode, the mode these tests are about."""
    return ModuleFunctionKernelProfiler(device="cpu", interception="mode")


class CountingFunctionMode(TorchFunctionMode):
    """Counts the functionals it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.relus = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.relus += func is F.relu
        return func(*args, **(kwargs or {}))


class CountingDispatchMode(TorchDispatchMode):
    """Counts the aten ops it sees."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops += 1
        return func(*args, **(kwargs or {}))


def function_stack() -> list[object]:
    return [torch._C._get_function_stack_at(i) for i in range(torch._C._len_torch_function_stack())]


def ours(stack: list[object]) -> list[object]:
    """The entries of a mode stack that are aitune_dispatch's."""
    return [mode for mode in stack if type(mode).__module__.startswith("aitune_dispatch")]


MODES = {
    "function": (CountingFunctionMode, function_stack),
    "dispatch": (CountingDispatchMode, _get_current_dispatch_mode_stack),
}


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval()


@pytest.mark.parametrize("kind", sorted(MODES))
@pytest.mark.parametrize("raises", [False, True])
def test_a_mode_left_entered_stays_and_ours_leave(mode_profiler, tracing_backend, kind, raises):
    mode_type, stack = MODES[kind]
    # the native backend installs no dispatch mode: nothing of ours to take from beneath, nothing to say
    warns = kind == "function" or tracing_backend == "python"
    net = model()
    below = mode_type()  # the user's, entered around profile(): it stays below everything
    left: list[object] = []

    def unbalanced(x: torch.Tensor) -> torch.Tensor:
        mode = mode_type()
        mode.__enter__()  # never exited
        left.append(mode)
        out = net(x)
        if raises and len(left) == 3:  # the recorded pass (after two warm-up passes)
            raise ValueError("inference failed")
        return out

    data = [((torch.randn(2, 4),), {})]
    with below:
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if raises:
                    with pytest.raises(ValueError, match="inference failed"):
                        mode_profiler.profile(unbalanced, data, module=net, warmup_iterations=2)
                else:
                    profiling_df, _ = mode_profiler.profile(unbalanced, data, module=net, warmup_iterations=2)
                    assert "relu" in set(profiling_df["function_name"])  # the pass was recorded
            after = stack()
            # nothing of ours stays; the user's modes stay where torch left them, in their order
            assert ours(after) == []
            assert after[-4:] == [below, *left]
            assert not native.available() or not native.load().running()
            messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
            named = [m for m in messages if mode_type.__name__ in m and "left entered" in m]
            assert bool(named) == warns, messages
            # later calls work, reach the user's modes, and are not recorded
            seen = [getattr(m, "relus", None) if kind == "function" else m.ops for m in left]
            for _ in range(50):
                F.relu(torch.randn(3))
            now = [getattr(m, "relus", None) if kind == "function" else m.ops for m in left]
            assert now[-1] > seen[-1]
            assert ours(stack()) == []
        finally:
            for mode in reversed(left):  # the test cleans up what its function left, top first
                mode.__exit__(None, None, None)
    assert stack() == []
    if kind == "dispatch":  # torch's dispatch-mode flags read as if ours had never been there
        assert not is_in_torch_dispatch_mode()


def test_both_kinds_left_entered_together(mode_profiler):
    net = model()
    left: list[object] = []

    def unbalanced(x: torch.Tensor) -> torch.Tensor:
        for mode in (CountingFunctionMode(), CountingDispatchMode()):
            mode.__enter__()
            left.append(mode)
        return net(x)

    try:
        with pytest.warns(RuntimeWarning, match="left entered"):
            mode_profiler.profile(unbalanced, [((torch.randn(2, 4),), {})], module=net, warmup_iterations=1)
        assert ours(function_stack()) == [] and ours(_get_current_dispatch_mode_stack()) == []
        assert function_stack() == left[0::2] and _get_current_dispatch_mode_stack() == left[1::2]
        # the next profile() works and records (the user's modes now sit below ours)
        net2 = model()
        profiling_df, _ = mode_profiler.profile(net2, [((torch.randn(2, 4),), {})], warmup_iterations=0)
        assert {"linear", "relu"} <= set(profiling_df["function_name"])
    finally:
        for mode in reversed(left):
            mode.__exit__(None, None, None)
    assert function_stack() == [] and _get_current_dispatch_mode_stack() == []
    assert not is_in_torch_dispatch_mode()


def test_a_mode_exited_once_too_often_is_reported(mode_profiler):
    """The profiled function exits a mode it did not enter: torch pops ours instead, and we say so."""
    net = model()
    outer = CountingFunctionMode()
    outer.__enter__()
    try:

        def overexits(x: torch.Tensor) -> torch.Tensor:
            outer.__exit__(None, None, None)  # pops whatever is on top: our mode
            return net(x)

        with pytest.warns(RuntimeWarning, match="took aitune_dispatch's"):
            mode_profiler.profile(overexits, [((torch.randn(2, 4),), {})], module=net, warmup_iterations=0)
        assert ours(function_stack()) == []
    finally:
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()


@pytest.mark.skipif(native.hooks_unsupported() is not None, reason="function-object hooks unavailable")
def test_under_the_function_object_hooks_a_mode_left_entered_is_no_concern_of_ours(tracing_backend):
    """No mode of ours is pushed with interception="objects": nothing is taken from beneath, nothing said."""
    if tracing_backend != "native":
        pytest.skip("the hooks are the native tracer's")
    net = model()
    left: list[object] = []

    def unbalanced(x: torch.Tensor) -> torch.Tensor:
        mode = CountingFunctionMode()
        mode.__enter__()
        left.append(mode)
        return net(x)

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            profiler = ModuleFunctionKernelProfiler(device="cpu", interception="objects")
            data = [((torch.randn(2, 4),), {})]
            profiling_df, _ = profiler.profile(unbalanced, data, module=net, warmup_iterations=1)
        assert {"linear", "relu"} <= set(profiling_df["function_name"])
        assert not [w for w in caught if "left entered" in str(w.message)]
        assert function_stack() == left and ours(function_stack()) == []
        assert left[-1].relus == 1  # the user's mode saw the recorded pass's relu
    finally:
        for mode in reversed(left):
            mode.__exit__(None, None, None)
    assert function_stack() == []
