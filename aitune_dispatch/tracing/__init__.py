"""Tracing: everything that runs inside the user's forward (module stack, functional calls, ops)."""

from ..schema import FunctionData, Sample
from .buffers import other_threads_running
from .contract import CorrelationTarget, ThreadInfo, Tracer, TraceTables
from .diagnostics import trace_warnings
from .dispatch import OpObserver
from .functional import functional_names, functions_to_intercept
from .modules import ModuleTracker
from .session import TraceSession
from .tracers import make_tracer

__all__ = [
    "CorrelationTarget",
    "FunctionData",
    "ModuleTracker",
    "OpObserver",
    "Sample",
    "ThreadInfo",
    "TraceSession",
    "TraceTables",
    "Tracer",
    "functional_names",
    "functions_to_intercept",
    "make_tracer",
    "other_threads_running",
    "trace_warnings",
]
