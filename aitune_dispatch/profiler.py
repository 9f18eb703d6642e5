"""``ModuleFunctionKernelProfiler``: the drop-in facade over tracing, collection, joining, results."""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pandas as pd
import torch
from torch import nn

from . import collection, schema
from .joining import join_activity
from .provenance_capture import ProvenanceCapture, uses_compile
from .results import ProfileResult, describe_results
from .results.profile_result import FunctionData
from .tracing import (
    ModuleTracker,
    TraceSession,
    functional_names,
    functions_to_intercept,
    make_tracer,
    resolve_backend,
    trace_warnings,
)

_DEVICES = ("cuda", "cpu")
_log = logging.getLogger(__name__)  # a child of the "aitune_dispatch" logger: phases and backend choices
_process_lock = threading.Lock()  # activity sources are process-global: one profile at a time


def _normalize_function_names(function_names: Iterable[str] | None) -> frozenset[str] | None:
    if function_names is None:
        return None
    if isinstance(function_names, (str, bytes)):
        raise TypeError(f"function_names must be a set of names such as {{{function_names!r}}}, not a single string")
    names = frozenset(function_names)
    bad = [name for name in names if not isinstance(name, str)]
    if bad:
        raise TypeError(f"function_names must contain strings; got {bad!r}")
    return names


def _normalize_device(device: str | torch.device | None) -> str:
    if device is None:
        return "cuda"
    try:
        kind = torch.device(device).type
    except (RuntimeError, TypeError):
        kind = None
    if kind not in _DEVICES:
        raise ValueError(f"device must be None, 'cuda' or 'cpu'; got {device!r}")
    return kind


def normalize_samples(data: Iterable[Any] | None) -> list[tuple[tuple[Any, ...], dict[str, Any]]] | None:
    """``data`` as a list of ``(args tuple, kwargs dict)``; a ValueError names a malformed item."""
    if data is None:
        return None
    samples = []
    for index, item in enumerate(data):
        if not (isinstance(item, (tuple, list)) and len(item) == 2):
            raise ValueError(
                f"data[{index}] must be an (args, kwargs) pair such as ((x,), {{}}); got {type(item).__name__}"
            )
        args, kwargs = item
        if not isinstance(args, (tuple, list)) or not isinstance(kwargs, Mapping):
            raise ValueError(
                f"data[{index}] must be (args tuple, kwargs dict); got ({type(args).__name__}, {type(kwargs).__name__})"
            )
        samples.append((tuple(args), dict(kwargs)))
    return samples


def run_pass(function: Callable[..., Any], samples: list[tuple[tuple[Any, ...], dict[str, Any]]] | None) -> None:
    """One pass: ``function(*args, **kwargs)`` for every sample, or ``function()`` without data."""
    if samples is None:
        function()
        return
    for args, kwargs in samples:
        function(*args, **kwargs)


def _gpu_metadata() -> dict[str, str]:
    """The current GPU's name, compute capability, memory and SM count (the trace's deviceProperties)."""
    try:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
    except (RuntimeError, AssertionError):  # no usable device: leave the facts out
        return {}
    return {
        "gpu_name": str(props.name),
        "gpu_compute_capability": f"{props.major}.{props.minor}",
        "gpu_memory_bytes": str(int(props.total_memory)),
        "gpu_sm_count": str(int(props.multi_processor_count)),
    }


class _PhaseClock:
    """Seconds spent in each phase of a recorded run, kept in the result's metadata."""

    def __init__(self) -> None:
        self._last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.laps[phase] = now - self._last
        self._last = now
        _log.debug("phase %s: %.6f s", phase, self.laps[phase])

    def metadata(self) -> dict[str, str]:
        return {f"seconds_{phase}": f"{seconds:.6f}" for phase, seconds in self.laps.items()}


class ModuleFunctionKernelProfiler:
    """Attributes every kernel of one recorded pass to a module, a functional call and an aten op.

    Drop-in for AITune's class of the same name. Not reentrant: ``profile()`` cannot be called from
    inside a profiled function, and one runs at a time per process.

    Parameters
    ----------
    function_names:
        The ``torch.nn.functional`` names (``{"linear", "relu"}``) whose distinct input samples are
        collected into ``function_data``; None collects every intercepted function's. Kernels are
        attributed to every functional call either way. A name the profiler does not intercept
        gives one warning.
    device:
        None (the default) or ``"cuda"``: CUPTI kernels; ``"cpu"``: aten ops timed on the host, for
        machines without a GPU (each op becomes one row whose kernel is ``cpu::<op>``).
    decoder:
        CUDA only: the CUPTI record decoder, ``"native"``, ``"python"``, or None for native with a
        warned fallback.
    functions:
        ``"functional"`` (the spec): only ``torch.nn.functional`` calls; ``"all"`` (opt-in) also
        attributes ops that no functional call encloses to the innermost torch-level API call
        (``torch.addmm``, ``torch.Tensor.add``…), which collect samples only when named in
        ``function_names``.
    op_tracer:
        The tracing backend: ``"native"`` (function mode, module and call stacks, op recording and
        sample keys in C++; no Python frame of ours per torch call), ``"python"`` (a pure-Python
        TorchFunctionMode and TorchDispatchMode), or None for native where it was built; both
        record the same rows.

    Raises
    ------
    TypeError, ValueError
        An argument of the wrong type or value; the message names the accepted ones.
    ImportError
        ``op_tracer="native"`` where the native tracer is not built (the message says how to build it).
    """

    def __init__(
        self,
        function_names: Iterable[str] | None = None,
        *,
        device: str | torch.device | None = None,
        decoder: str | None = None,
        functions: str = "functional",
        op_tracer: str | None = None,
    ) -> None:
        self.function_names = _normalize_function_names(function_names)
        self.device = _normalize_device(device)
        if decoder not in (None, *collection.DECODERS):
            raise ValueError(f"decoder must be None, 'native' or 'python'; got {decoder!r}")
        self.decoder = decoder
        if functions not in ("functional", "all"):
            raise ValueError(f"functions must be 'functional' (the spec) or 'all'; got {functions!r}")
        self.functions = functions
        self.op_tracer = resolve_backend(op_tracer)
        self._last_result: ProfileResult | None = None
        self._unknown_warned = False

    @property
    def last_result(self) -> ProfileResult | None:
        """The full result of the last ``profile()`` call (attributed or not), or None."""
        return self._last_result

    def release(self) -> None:
        """Drop the last result, and with it the sample tensors it holds."""
        self._last_result = None

    def profile(
        self,
        function: Callable[..., Any],
        data: Iterable[Any] | None = None,
        *,
        module: nn.Module | None = None,
        warmup_iterations: int = 3,
    ) -> tuple[pd.DataFrame, FunctionData]:
        """Warm up, record one pass, and return ``(profiling_df, function_data)`` as the spec does.

        Parameters
        ----------
        function:
            An ``nn.Module`` (its hierarchy is profiled) or any callable (a pipeline function; then
            pass ``module``).
        data:
            The samples of one pass: an iterable of ``(args, kwargs)`` pairs such as
            ``[((x,), {}), ((y,), {"mask": m})]``, each called as ``function(*args, **kwargs)``;
            None calls ``function()`` once.
        module:
            The ``nn.Module`` whose hierarchy is observed when ``function`` is not that module.
        warmup_iterations:
            Uninstrumented passes (under ``torch.no_grad()``) before the recorded one.

        Returns
        -------
        tuple[pandas.DataFrame, dict]
            ``profiling_df``: one row per attributed kernel, columns ``module_name, module,
            function_name, op, kernel, kernel_us`` (µs); ``function_data``: ``function_name ->
            [(count, (args, kwargs)), ...]``, one entry per distinct sample. The full result,
            unattributed kernels included, is ``last_result``.

        Raises
        ------
        RuntimeError
            CUDA unavailable with the default device, profile() already running, or another CUPTI
            client (torch.profiler) took the activity callbacks; the message says what to do.
        ValueError, TypeError
            Malformed ``data``, ``module`` or ``warmup_iterations``; the message names the item.
        """
        result = self.profile_result(function, data, module=module, warmup_iterations=warmup_iterations)
        return result.profiling_df(), result.function_data

    def profile_result(
        self,
        function: Callable[..., Any],
        data: Iterable[Any] | None = None,
        *,
        module: nn.Module | None = None,
        warmup_iterations: int = 3,
    ) -> ProfileResult:
        """Like :meth:`profile`, returning the full :class:`ProfileResult` (also kept as ``last_result``).

        Parameters
        ----------
        function, data, module, warmup_iterations:
            As for :meth:`profile`.

        Returns
        -------
        ProfileResult
            Every recorded kernel, attributed or not, with the trace and the samples.
        """
        root = self._resolve_module(function, module)
        if isinstance(warmup_iterations, bool) or not isinstance(warmup_iterations, int) or warmup_iterations < 0:
            raise ValueError(
                "warmup_iterations must be greater than or equal to 0. Pass an int >= 0 (0 skips the "
                f"warmup); got {warmup_iterations!r}"
            )
        samples = normalize_samples(data)
        self._warn_unknown_names()
        self._last_result = None  # the previous run's samples are released before this one runs
        if not _process_lock.acquire(blocking=False):
            raise RuntimeError(
                "profile() is already running in this process (called from inside a profiled "
                "function, or from another thread); profile one thing at a time"
            )
        try:
            source = self._make_source()
            # compiled and graphed models: compiles and graph captures are observed from the first warm-up pass
            provenance = ProvenanceCapture(
                self.device, source, self.op_tracer, self.functions == "all", compiled=uses_compile(function, root)
            )
            with torch.no_grad(), provenance:
                warmup_started = time.perf_counter()
                aliases = _aliases(function, root)
                provenance.warm_up(lambda: run_pass(function, samples), warmup_iterations, root, aliases)
                warmup_s = time.perf_counter() - warmup_started
                result = self._record(function, samples, root, source, warmup_s, provenance)
        finally:
            _process_lock.release()
        self._last_result = result
        return result

    @staticmethod
    def get_functions_to_patch() -> list[tuple[str, Callable[..., Any]]]:
        """The ``(name, function)`` pairs whose calls the profiler intercepts, sorted by name.

        Same as the reference's method of this name, but informational: nothing is patched (calls
        are seen through a ``TorchFunctionMode``). Every public ``torch.nn.functional`` function that
        dispatches to a function mode, whatever ``function_names`` says (that only selects samples);
        the names are the ``function_name`` values of ``profiling_df``. ``functions="all"`` also
        intercepts torch-level APIs, which this list leaves out.
        """
        return functions_to_intercept()

    def describe_results(
        self, profiling_df: pd.DataFrame, function_data: FunctionData, top_k: int = 10
    ) -> pd.DataFrame:
        """The spec's summary: one row per functional call, most expensive first.

        Parameters
        ----------
        profiling_df, function_data:
            What :meth:`profile` returned.
        top_k:
            The most rows returned.

        Returns
        -------
        pandas.DataFrame
            Columns ``function_name, calls, num_distinct_samples, num_modules, time_spent_us,
            time_spent_pct, tensor_size_MB``; ``time_spent_pct`` is over all functions (attributed
            time), not only the top_k.
        """
        return describe_results(profiling_df, function_data, top_k)

    # -- internals ------------------------------------------------------------------------------------
    @staticmethod
    def _resolve_module(function: Callable[..., Any], module: nn.Module | None) -> nn.Module:
        if not callable(function):
            raise TypeError(f"function must be callable; got {type(function).__name__}")
        if module is None:
            if isinstance(function, nn.Module):
                # torch.compile(model) profiles the hierarchy of the model it wraps
                original = getattr(function, "_orig_mod", None)
                return original if isinstance(original, nn.Module) else function
            raise ValueError(
                "module must be provided when function is not an nn.Module. Pass module=<the nn.Module "
                "to observe>, e.g. profile(inference_fn, module=pipe.transformer)"
            )
        if not isinstance(module, nn.Module):
            raise TypeError(f"module must be an nn.Module; got {type(module).__name__}")
        return module

    def _warn_unknown_names(self) -> None:
        if self.function_names is None or self._unknown_warned:
            return
        known = functional_names()
        unknown = sorted(n for n in self.function_names - known if not n.startswith("torch."))
        if unknown:
            warnings.warn(
                f"function_names has names that are not torch.nn.functional functions this profiler "
                f"intercepts, so no samples will be collected for them: {unknown}",
                stacklevel=3,
            )
        self._unknown_warned = True

    def _make_source(self) -> collection.ActivitySource:
        if self.device == "cpu":
            _log.info("activity source: CPU op timer; tracer: %s", self.op_tracer)
            return collection.CpuOpTimer()
        if not torch.cuda.is_available():
            raise RuntimeError(
                "ModuleFunctionKernelProfiler needs CUDA by default and torch.cuda.is_available() is "
                "False; pass device='cpu' to profile aten ops with the CPU activity source instead"
            )
        source = collection.make_cuda_source(self.decoder)
        _log.info("activity source: %s; tracer: %s", type(source).__name__, self.op_tracer)
        return source

    def _record(
        self,
        function: Callable[..., Any],
        samples: list[tuple[tuple[Any, ...], dict[str, Any]]] | None,
        root: nn.Module,
        source: collection.ActivitySource,
        warmup_s: float = 0.0,
        provenance: ProvenanceCapture | None = None,
    ) -> ProfileResult:
        modules = ModuleTracker(root, _aliases(function, root))
        tracer = make_tracer(self.op_tracer, modules.module_ids(), self.function_names, source, self.functions == "all")
        session = TraceSession(modules, tracer)
        cuda = self.device == "cuda"
        if cuda:
            torch.cuda.synchronize()
        clock = _PhaseClock()
        clock.laps["warmup"] = warmup_s
        source.start()
        clock.lap("start")
        try:
            with session:
                run_pass(function, samples)
            if cuda:
                torch.cuda.synchronize()
            clock.lap("pass")
        finally:
            source.stop()
        clock.lap("flush")
        trace = session.tables()
        if provenance is not None:
            provenance.recorded(trace)
        trace_messages = trace_warnings(trace, modules)
        for message in trace_messages:
            warnings.warn(message, RuntimeWarning, stacklevel=4)
        modules_table = session.modules_table()
        activity = source.activity(trace.ops)
        clock.lap("decode")
        joined = join_activity(
            activity.kernels,
            activity.correlation,
            trace.ops,
            trace.calls,
            modules_table,
            activity.scope_correlation,
            trace.contexts,
        )
        calls, kernel_sources = trace.calls, schema.empty(schema.KERNEL_SOURCES)
        provenance_metadata: dict[str, str] = {}
        provenance_messages: tuple[str, ...] = ()
        if provenance is not None:  # compiled kernels and CUDA graph replays (provenance.py)
            attributed, provenance_metadata, provenance_messages = provenance.attribute(
                joined, trace.calls, modules_table, modules
            )
            joined, calls, kernel_sources = attributed.activity, attributed.calls, attributed.kernel_sources
        clock.lap("join")
        _log.info(
            "recorded %d activity rows (%s source, %s tracer) in %.3f s",
            joined.num_rows,
            activity.source,
            self.op_tracer,
            sum(clock.laps.values()),
        )
        return ProfileResult(
            activity=joined,
            ops=trace.ops,
            calls=calls,
            modules=modules_table,
            module_calls=trace.module_calls,
            function_data=session.function_data(),
            source=activity.source,
            module_objects=tuple(session.modules.modules),
            dropped_records=activity.dropped_records,
            warnings=(*activity.warnings, *trace_messages, *provenance_messages),
            metadata={
                "torch": torch.__version__,
                "device": self.device,
                "op_tracer": self.op_tracer,
                "tracer": self.op_tracer,
                "decoder": getattr(source, "sink_name", "none"),
                "threads_traced": str(sum(thread.traced for thread in trace.threads)),
                "functions": self.functions,
                **(_gpu_metadata() if cuda else {}),
                "activity_minus_host_ns": "0",  # activity timestamps are converted to the host clock
                "activity_ticks_per_ns": f"{activity.clock_ticks_per_ns:.9f}",
                **provenance_metadata,
                **clock.metadata(),
            },
            kernel_sources=kernel_sources,
        )


def _aliases(function: Callable[..., Any], root: nn.Module) -> tuple[nn.Module, ...]:
    """Wrappers that stand for the profiled root (torch.compile's OptimizedModule)."""
    return (function,) if isinstance(function, nn.Module) and function is not root else ()
