"""Shared fixtures; ``gpu``- and ``gpu_compile``-marked tests skip cleanly where CUDA is unavailable."""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        # torch.profiler's Kineto keeps CUPTI's one callback subscription once it has run, and profile() then
        # links launches through pushed ids instead of the launch callback: the tests that run it go last
        items[:] = [item for item in items if "kineto" not in item.keywords] + [
            item for item in items if "kineto" in item.keywords
        ]
        return
    skip = pytest.mark.skip(reason="needs CUDA (run benchmarks/gpu_run.sh on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords or "gpu_compile" in item.keywords:
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


# -- the shared results every renderer is tested against (tests/fixture_results.py) -------------------
@pytest.fixture(scope="session")
def demo_result():
    """The demo model profiled on CPU (one warm-up pass), once per session."""
    import fixture_results

    return fixture_results.demo_result()


@pytest.fixture(scope="session")
def h200_result():
    """The demo recorded on the lent H200 (tests/data/h200_demo_result), loaded once per session."""
    import fixture_results

    from aitune_dispatch import load

    return load(fixture_results.H200_RESULT)


@pytest.fixture(scope="session")
def h200_launches_result(h200_result):
    """The H200 recording under the name the launch tests use (it has launch records): ``h200_result``."""
    return h200_result


# -- the shared models (tests/fixture_models.py) ---------------------------------------------------
@pytest.fixture(scope="module")
def mixed_result():
    """The Mixed model profiled on CPU (no warm-up), once per test module that takes it."""
    import fixture_models

    return fixture_models.mixed_result()


@pytest.fixture
def cpu_profiler(request: pytest.FixtureRequest):
    """A CPU profiler of this test's tracing backend (the profiler resolves its backend when built, so
    the backend fixture must be set up first)."""
    from aitune_dispatch import ModuleFunctionKernelProfiler

    # the backend parameter of this test, if it has one (``request.fixturenames`` of a fixture's
    # request does not list the parametrized ``tracing_backend``, so it cannot tell)
    if "tracing_backend" in getattr(getattr(request.node, "callspec", None), "params", {}):
        request.getfixturevalue("tracing_backend")
    return ModuleFunctionKernelProfiler(device="cpu")


# -- both tracing backends through every test ------------------------------------------------------
# Every test runs once per tracing backend (native C++ and pure Python), as the profiler's default;
# tests marked ``single_backend`` choose backends themselves. The native run skips where the
# extension is not built, except under CI, where scripts/setup.sh must have built it.
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "single_backend: the test picks its tracing backends itself")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("single_backend") is None:
        metafunc.fixturenames.append("tracing_backend")
        metafunc.parametrize("tracing_backend", ["native", "python"], indirect=True)


@pytest.fixture
def tracing_backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The profiler's default tracing backend for this test."""

    from aitune_dispatch import backends
    from aitune_dispatch.tracing import native

    backend = request.param
    if backend == "native" and not native.available():
        if os.environ.get("CI"):
            native.load()  # fails with the build fix: CI tests both backends
        pytest.skip("native tracer not built (python setup.py build_ext --inplace)")
    monkeypatch.setattr(backends, "default_tracer", lambda: backend)
    return backend


@pytest.fixture
def op_tracer(tracing_backend: str) -> str:
    """The tracing backend of this test, for tests that pass it explicitly as ``op_tracer=``."""
    return tracing_backend


def bare_kernels(
    function: Callable[..., Any], samples: list[Any], *, graphed_only: bool = False
) -> collections.Counter[str]:
    """Kernel names of one pass captured by CUPTI alone: no hooks, no modes, no correlation ids.

    ``graphed_only`` keeps the kernels replayed by CUDA graphs (``graph_id != 0``), leaving out what
    the function launched eagerly around its replays (copies into static inputs, say).
    """
    from aitune_dispatch.collection import make_cuda_source

    source = make_cuda_source()
    with torch.no_grad():
        torch.cuda.synchronize()
        source.start()
        try:
            for args, kwargs in samples:
                function(*args, **kwargs)
            torch.cuda.synchronize()
        finally:
            source.stop()
    kernels = source.activity().kernels
    if graphed_only:
        import pyarrow.compute as pc

        kernels = kernels.filter(pc.not_equal(kernels.column("graph_id"), 0))
    return collections.Counter(kernels.column("name").to_pylist())


@pytest.fixture(name="bare_kernels")
def bare_kernels_fixture() -> Callable[..., collections.Counter[str]]:
    """:func:`bare_kernels`, for GPU tests."""
    return bare_kernels
