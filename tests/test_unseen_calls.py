"""A user's TorchFunctionMode or tensor subclass sees the profiled code's calls, and none of ours."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode, resolve_name

from aitune_dispatch import ModuleFunctionKernelProfiler


def name(func) -> str:  # noqa: ANN001
    return resolve_name(func) or getattr(func, "__qualname__", repr(func))


class LoggingMode(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.seen.append(name(func))
        return func(*args, **(kwargs or {}))


class LoggingTensor(torch.Tensor):
    seen: list[str] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # noqa: ANN001
        cls.seen.append(name(func))
        return super().__torch_function__(func, types, args, kwargs)


class Block(nn.Module):
    """Functionals with tensors, tuples, floats and keyword arguments to key."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.norm = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(F.gelu(self.linear(x)))
        x = F.dropout(x, p=0.0, training=False)
        return F.softmax(x, dim=-1) + F.pad(x, (0, 0), value=0.5)


def model() -> nn.Module:
    return nn.Sequential(Block(), nn.ReLU(), Block()).eval()


def profilers() -> list[ModuleFunctionKernelProfiler]:
    return [ModuleFunctionKernelProfiler(device="cpu"), ModuleFunctionKernelProfiler(device="cpu", functions="all")]


@pytest.mark.parametrize("which", [0, 1], ids=["functional", "all"])
def test_a_mode_around_profile_sees_what_it_sees_bare(tracing_backend, which):
    net, x = model(), torch.randn(2, 8)
    bare = LoggingMode()
    with bare:
        net(x)
        net(x)  # one warm-up pass and the recorded one
    profiler = profilers()[which]
    around = LoggingMode()
    with around:
        profiler.profile(net, [((x,), {})], warmup_iterations=1)
    assert around.seen == bare.seen


def test_a_mode_inside_the_profiled_function_sees_what_it_sees_bare(cpu_profiler):
    net, x = model(), torch.randn(2, 8)
    bare = LoggingMode()
    with bare:
        net(x)
    inside = LoggingMode()

    def function(x: torch.Tensor) -> torch.Tensor:
        with inside:
            return net(x)

    cpu_profiler.profile(function, [((x,), {})], module=net, warmup_iterations=0)
    assert inside.seen == bare.seen


@pytest.mark.parametrize("which", [0, 1], ids=["functional", "all"])
def test_a_tensor_subclass_sees_what_it_sees_bare(tracing_backend, which):
    net, x = model(), torch.randn(2, 8).as_subclass(LoggingTensor)
    LoggingTensor.seen = []
    net(x)
    bare = list(LoggingTensor.seen)
    LoggingTensor.seen = []
    _, function_data = profilers()[which].profile(net, [((x,), {})], warmup_iterations=0)
    assert LoggingTensor.seen == bare
    assert function_data["linear"][0][0] >= 1  # the subclass's calls were still keyed and counted
