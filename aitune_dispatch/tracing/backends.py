"""The one place that picks the tracing backend: native (C++) where it is built, else pure Python.

Chosen once per process; falling back warns once, naming the build fix. The capture records the
choice in ``result.metadata["tracer"]`` (and, for compatibility, ``"op_tracer"``). The backends'
names are ``config.OP_TRACERS``; see ``docs/design.md``, "The native tracing backend".
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Iterable, Mapping

from torch import nn

from ..config import OP_TRACERS
from . import native
from .contract import CorrelationTarget, Tracer
from .functional import refresh_functionals
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


@functools.lru_cache(maxsize=1)
def native_mode_compiles() -> bool:
    """Whether this torch's Dynamo compiles code that runs under the native function mode.

    Measured once per process on a tiny function (``backend="eager"``): compiled once bare, then
    called under an (unconfigured, transparent) ``NativeFunctionMode``. Dynamo guards on the mode
    stack, so it must compile a second graph; a torch whose Dynamo cannot trace the native mode
    (torch 2.11 on the H200) runs the frame eagerly instead, which would change what runs. Dynamo's
    counters are left as they were.
    """
    import torch
    from torch._dynamo.utils import counters

    saved = {key: dict(value) for key, value in counters.items()}

    def probe(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(x) + 1

    compiled = torch.compile(probe, backend="eager", dynamic=False)
    x = torch.ones(2)
    try:
        compiled(x)
        before = counters["stats"]["unique_graphs"]
        with native.NativeFunctionMode():
            compiled(x)
        return counters["stats"]["unique_graphs"] > before
    except Exception:  # noqa: BLE001 - a torch that cannot compile here: do not trust the native mode with it
        return False
    finally:
        counters.clear()
        for key, value in saved.items():
            counters[key].update(value)


def backend_for_run(backend: str, compiled: bool) -> str:
    """The backend one run traces with: ``backend``, unless compiled code would not stay compiled under it.

    Parameters
    ----------
    backend:
        The resolved backend (``"native"`` or ``"python"``).
    compiled:
        Whether the profiled code runs ``torch.compile``'d code.

    Returns
    -------
    str
        ``backend``; ``"python"`` (with a warning) for compiled code where this torch's Dynamo cannot
        compile under the native function mode, so that profiling does not turn compiled regions eager.
    """
    if backend != "native" or not compiled or native_mode_compiles():
        return backend
    import torch

    warnings.warn(
        f"torch {torch.__version__}'s torch.compile cannot trace the native function mode, so compiled "
        "regions would run eagerly under it: tracing this compiled model with the pure-Python backend "
        "(op_tracer='python'), which keeps them compiled",
        RuntimeWarning,
        4,
    )
    return "python"


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
    The pass runs what ``torch.nn.functional`` holds now (functionals the user wrapped or replaced
    since the last pass included; see ``functional.refresh_functionals``).
    """
    refresh_functionals()
    if backend == "native":
        return native.NativeTracer(modules, function_names, target.correlation_kind, all_functions, running_before)
    return PythonTracer(modules, function_names, target, all_functions, running_before)
