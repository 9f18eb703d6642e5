"""The one place that picks the tracing backend: native (C++) where it is built, else pure Python.

Chosen once per process; falling back warns once, naming the build fix. The capture records the
choice in ``result.metadata["tracer"]`` (and, for compatibility, ``"op_tracer"``). The backends'
names are ``config.OP_TRACERS``; see ``docs/design.md``, "The native tracing backend".
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterable

from torch import nn

from ..config import OP_TRACERS
from . import native
from .contract import CorrelationTarget, Tracer
from .pure import PythonTracer

BACKENDS = OP_TRACERS


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
    """The backend to trace with: ``requested`` (checked to be loadable), or the process default.

    Parameters
    ----------
    requested:
        None, or one of ``config.OP_TRACERS`` (``ProfileConfig`` validated it).

    Returns
    -------
    str
        ``"native"`` or ``"python"``.

    Raises
    ------
    ImportError
        ``"native"`` where it is not built for this torch; the message says how to build it.
    """
    if requested is None:
        return default_backend()
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
