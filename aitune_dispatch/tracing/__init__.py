"""Tracing: everything that runs inside the user's forward (module stack, functional calls, ops)."""

from .backends import BACKENDS, make_tracer, resolve_backend
from .contract import CorrelationTarget, Tracer, TraceTables
from .dispatch import OpObserver
from .functional import functional_names
from .modules import ModuleTracker
from .samples import FunctionData, Sample
from .session import TraceSession

__all__ = [
    "BACKENDS",
    "CorrelationTarget",
    "FunctionData",
    "ModuleTracker",
    "OpObserver",
    "Sample",
    "TraceSession",
    "TraceTables",
    "Tracer",
    "functional_names",
    "make_tracer",
    "resolve_backend",
]
