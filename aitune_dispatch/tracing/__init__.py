"""Tracing: everything that runs inside the user's forward (module stack, functional calls, ops)."""

from .dispatch import OpObserver
from .functional import functional_names, functions_to_intercept
from .samples import FunctionData, Sample
from .session import TraceSession

__all__ = ["FunctionData", "OpObserver", "Sample", "TraceSession", "functional_names", "functions_to_intercept"]
