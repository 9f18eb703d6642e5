"""Tracing: everything that runs inside the user's forward (module stack, functional calls, ops)."""

from ..schema import FunctionData, Sample
from .backends import BACKENDS, backend_for_run, make_tracer, resolve_backend
from .contract import CorrelationTarget, ThreadInfo, Tracer, TraceTables
from .diagnostics import trace_warnings
from .dispatch import OpObserver
from .functional import functional_names, functions_to_intercept
from .modules import ModuleTracker
from .recorder import other_threads_running
from .session import TraceSession

__all__ = [
    "BACKENDS",
    "CorrelationTarget",
    "FunctionData",
    "ModuleTracker",
    "OpObserver",
    "Sample",
    "ThreadInfo",
    "TraceSession",
    "TraceTables",
    "backend_for_run",
    "Tracer",
    "functional_names",
    "functions_to_intercept",
    "make_tracer",
    "other_threads_running",
    "resolve_backend",
    "trace_warnings",
]
