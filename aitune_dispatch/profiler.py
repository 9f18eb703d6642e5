"""``ModuleFunctionKernelProfiler``: the spec's facade; :mod:`.arguments` checks, :func:`.capture.record` works."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
import torch
from torch import nn

from . import arguments, capture
from .results import ProfileResult, describe_results
from .schema import FunctionData
from .tracing import functions_to_intercept


class ModuleFunctionKernelProfiler:
    """Attributes every kernel of one recorded pass to a module, a functional call and an aten op.

    Drop-in for AITune's class of the same name; not reentrant (one ``profile()`` at a time per process).

    Parameters
    ----------
    function_names:
        ``torch.nn.functional`` names (``{"linear"}``) whose distinct input samples ``function_data`` keeps;
        None: every intercepted function's. Opt-in, keyword-only: ``device="cpu"`` (aten ops timed on the
        host), ``decoder``, ``functions="all"``, ``op_tracer``, ``correlation``, ``interception`` (``ProfileConfig``).

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong type or value; the message names the accepted ones.
    ImportError
        ``op_tracer="native"`` where the native tracer is not built (the message says how to build it).
    """

    function_names, device, decoder, functions, op_tracer, correlation, interception = arguments.config_options(7)

    def __init__(
        self, function_names: Iterable[str] | None = None, *, device: str | torch.device | None = None,
        decoder: str | None = None, functions: str = "functional", op_tracer: str | None = None,
        correlation: str | None = None, interception: str | None = None) -> None:
        self.config = arguments.resolved_config(  # the profiler's state: validated, the tracer resolved
            function_names=function_names, device=device, decoder=decoder, functions=functions,
            op_tracer=op_tracer, correlation=correlation, interception=interception)
        self._last_result: ProfileResult | None = None
        self._unknown_warned = False

    @property
    def last_result(self) -> ProfileResult | None:
        """The full result of the last ``profile()`` call (attributed or not), or None."""
        return self._last_result

    def release(self) -> None:
        """Drop the last result, and with it the sample tensors it holds (``last_result`` becomes None).

        Returns
        -------
        None
        """
        self._last_result = None

    def profile(
        self, function: Callable[..., Any], data: Iterable[Any] | None = None, *, module: nn.Module | None = None,
        warmup_iterations: int = 3,
    ) -> tuple[pd.DataFrame, FunctionData]:
        """Warm up, record one pass, and return ``(profiling_df, function_data)`` as the spec does.

        Parameters
        ----------
        function:
            An ``nn.Module`` (its hierarchy is profiled) or any callable (a pipeline; then pass ``module``).
        data:
            ``(args, kwargs)`` pairs such as ``[((x,), {})]``, each called as ``function(*args, **kwargs)``;
            None calls ``function()``.
        module:
            The ``nn.Module`` observed when ``function`` is not that module.
        warmup_iterations:
            Passes before the recorded one, traced with their rows discarded (under ``torch.no_grad()``).

        Returns
        -------
        tuple[pandas.DataFrame, dict]
            ``profiling_df`` (``module_name, module, function_name, op, kernel, kernel_us`` per attributed
            kernel) and ``function_data`` (``name -> [(count, (args, kwargs)), ...]``); ``last_result``
            holds everything. A RuntimeError, ValueError or TypeError says what to do.
        """
        result = self.profile_result(function, data, module=module, warmup_iterations=warmup_iterations)
        return result.profiling_df(), result.function_data

    def profile_result(
        self, function: Callable[..., Any], data: Iterable[Any] | None = None, *, module: nn.Module | None = None,
        warmup_iterations: int = 3, on_progress: capture.OnProgress | None = None,
    ) -> ProfileResult:
        """Like :meth:`profile`, returning the full :class:`ProfileResult` (also kept as ``last_result``).

        Parameters
        ----------
        function, data, module, warmup_iterations:
            As for :meth:`profile`.
        on_progress:
            Told a ``capture.Step`` as each phase begins and after each warm-up pass and recorded sample.

        Returns
        -------
        ProfileResult
            Every recorded kernel, attributed or not, with the trace and the samples.
        """
        root, samples = arguments.resolve_root(function, module), arguments.check_data(data, warmup_iterations)
        arguments.check_on_progress(on_progress)
        self._unknown_warned = self._unknown_warned or arguments.warn_unknown_names(self.function_names)
        self._last_result = None  # the previous run's samples are released before this one runs
        result = capture.record(self.config, function, samples, root, on_progress, warmup_iterations=warmup_iterations)
        self._last_result = result
        return result

    # the reference's name for what is intercepted (informational: nothing is patched), and the spec's summary
    get_functions_to_patch = staticmethod(functions_to_intercept)
    describe_results = staticmethod(describe_results)
