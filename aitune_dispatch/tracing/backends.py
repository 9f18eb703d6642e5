"""The one place that picks the tracing backend: native (C++) where it is built, else pure Python.

Chosen once per process; falling back warns once, naming the build fix. The profiler records the
choice in ``result.metadata["tracer"]`` (and, for compatibility, ``"op_tracer"``).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable

from torch import nn

from . import native
from .contract import CorrelationTarget, Tracer
from .pure import PythonTracer

BACKENDS = ("native", "python")


@functools.lru_cache(maxsize=1)
def default_backend() -> str:
    """``"native"`` where it is built for this torch, else ``"python"``, warning once per process."""
    try:
        native.load()
    except ImportError as error:
        warnings.warn(f"{error}; tracing with the slower pure-Python backend", RuntimeWarning, 3)
        return "python"
    return "native"


def resolve_backend(requested: str | None) -> str:
    """The backend to trace with: ``requested`` validated (and loadable), or the process default."""
    if requested is None:
        return default_backend()
    if requested not in BACKENDS:
        raise ValueError(f"op_tracer must be None, 'native' or 'python'; got {requested!r}")
    if requested == "native":
        native.load()  # ImportError with the fix, now rather than mid-profile
    return requested


def make_tracer(
    backend: str,
    modules: Iterable[tuple[nn.Module, int]],
    function_names: frozenset[str] | None,
    target: CorrelationTarget,
    all_functions: bool,
) -> Tracer:
    """A single-use tracer of ``backend`` for one pass over ``modules`` (``(module, module_id)`` pairs)."""
    if backend == "native":
        return native.NativeTracer(modules, function_names, target.correlation_kind, all_functions)
    return PythonTracer(modules, function_names, target, all_functions)
