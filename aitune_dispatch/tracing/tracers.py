"""A tracer of the backend ``backends.py`` chose, for one pass (``docs/design.md``, "The native tracing backend")."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from torch import nn

from . import native
from .contract import CorrelationTarget, Tracer
from .functional import refresh_functionals
from .python import PythonTracer


def make_tracer(
    backend: str,
    modules: Iterable[tuple[nn.Module, int]],
    function_names: frozenset[str] | None,
    target: CorrelationTarget,
    all_functions: bool,
    running_before: Mapping[int, threading.Thread | None] | None = None,
    interception: str = "mode",
) -> Tracer:
    """A single-use tracer of ``backend`` for one pass; ``running_before`` is the snapshot taken when
    ``profile()`` began, so threads a warm-up pass starts count as the function's own; ``interception``
    ``"objects"`` has the native tracer hook the function objects (``backends.resolve_interception``)."""
    refresh_functionals()
    if backend == "native":
        kind = target.correlation_kind
        functions = target.correlation_functions if kind >= 0 else None  # what the C++ side pushes with
        return native.NativeTracer(
            modules, function_names, kind, all_functions, running_before, functions, interception == "objects"
        )
    return PythonTracer(modules, function_names, target, all_functions, running_before)
