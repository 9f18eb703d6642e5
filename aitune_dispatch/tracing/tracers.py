"""A tracer of the chosen backend for one pass (``backends.py`` at the package root chooses it).

The backends' names are ``config.OP_TRACERS``; see ``docs/design.md``, "The native tracing backend".
"""

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
) -> Tracer:
    """A single-use tracer of ``backend`` for one pass over ``modules`` (``(module, module_id)`` pairs).

    ``running_before``: the threads that are not the profiled function's, as
    ``other_threads_running()`` said when ``profile()`` began (so that threads the function starts in
    a warm-up pass count as its own); None: the threads running when the pass begins.
    The native backend pushes through the target's ``correlation_functions`` (asked as the pass
    starts), the Python one calls its callbacks. The pass runs what ``torch.nn.functional`` holds
    now (functionals the user wrapped or replaced since the last pass included; see
    ``functional.refresh_functionals``).
    """
    refresh_functionals()
    if backend == "native":
        kind = target.correlation_kind
        functions = target.correlation_functions if kind >= 0 else None  # what the C++ side pushes with
        return native.NativeTracer(modules, function_names, kind, all_functions, running_before, functions)
    return PythonTracer(modules, function_names, target, all_functions, running_before)
