"""Shared fixtures; ``gpu``-marked tests skip cleanly where CUDA is unavailable."""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA (run benchmarks/gpu_run.sh on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


class _OpLog(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        self.ops.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def bare_ops(function: Callable[..., Any], *args: Any, **kwargs: Any) -> collections.Counter[str]:
    """The aten ops one uninstrumented call dispatches (a dispatch mode alone changes nothing)."""
    with torch.no_grad(), _OpLog() as log:
        function(*args, **kwargs)
    return collections.Counter(log.ops)


@pytest.fixture(name="bare_ops")
def bare_ops_fixture() -> Callable[..., collections.Counter[str]]:
    """:func:`bare_ops`, for tests."""
    return bare_ops


@pytest.fixture
def cpu_profiler():
    from aitune_dispatch import ModuleFunctionKernelProfiler

    return ModuleFunctionKernelProfiler(device="cpu")
