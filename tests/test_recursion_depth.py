"""The profiled code nests as deeply under profile() as bare, at the recursion limit in force."""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

# Frames a profiled pass may still cost at its deepest point, in module nesting levels: the handlers
# of our hooks and modes run one or two frames deeper than the bare forward (the Python backend's
# functional handler keys the sample through a few helpers), and one module level is three or four
# frames, so they cost at most two levels; one more for the bisection's rounding.
TOLERANCE = 3


class Nest(nn.Module):
    def __init__(self, inner: nn.Module | None) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(x)
        return x if self.inner is None else self.inner(x)


def nest(levels: int) -> nn.Module:
    model: nn.Module | None = None
    for _ in range(levels):
        model = Nest(model)
    assert model is not None
    return model


def deepest(run: Callable[[nn.Module], object], high: int) -> int:
    """The most nesting levels ``run`` gets through without a RecursionError (bisection in [1, high])."""
    low = 1
    while low < high:
        middle = (low + high + 1) // 2
        model = nest(middle)
        try:
            run(model)
        except RecursionError:
            high = middle - 1
        else:
            low = middle
    return low


def test_profiled_code_nests_as_deeply_as_bare(cpu_profiler):
    x = torch.randn(2)
    limit = sys.getrecursionlimit()

    def bare(model: nn.Module) -> None:
        with torch.no_grad():
            model(x)

    def profiled(model: nn.Module) -> None:
        cpu_profiler.profile(model, [((x,), {})], warmup_iterations=1)

    bare_depth = deepest(bare, limit)
    profiled_depth = deepest(profiled, bare_depth + 50)
    assert profiled_depth >= bare_depth - TOLERANCE, (bare_depth, profiled_depth)
    assert sys.getrecursionlimit() == limit  # whatever profile() raised it to is put back
    # and what a profiled pass leaves behind after a RecursionError still lets the next one run
    profiling_df, _ = cpu_profiler.profile(nest(3), [((x,), {})], warmup_iterations=0)
    assert set(profiling_df["function_name"]) == {"relu"}


def test_a_limit_the_profiled_function_sets_is_left_as_it_set_it(cpu_profiler):
    limit = sys.getrecursionlimit()
    model = nest(2)

    def sets_the_limit(x: torch.Tensor) -> torch.Tensor:
        sys.setrecursionlimit(limit + 123)
        return model(x)

    try:
        cpu_profiler.profile(sets_the_limit, [((torch.randn(2),), {})], module=model, warmup_iterations=0)
        assert sys.getrecursionlimit() == limit + 123
    finally:
        sys.setrecursionlimit(limit)
