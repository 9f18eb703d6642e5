"""One recorded run behind ``profile()``, start to finish: the lock, traced warm-up so compiles and
graph captures are seen, start/stop, decode, join, attribution and metadata with each phase's seconds
(``docs/design.md``, "What a pass pays once" and "torch.compile and CUDA graphs")."""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import pyarrow as pa
import torch
from torch import nn

from . import backends, collection, interrupts, schema
from .collection import devices
from .collection.distributed import rank_metadata
from .config import ProfileConfig
from .joining import join
from .provenance import ProvenanceCapture, compile_backends, stand_ins, uses_compile
from .results import ProfileResult, views
from .schema import Sample
from .tracing import (
    ModuleTracker,
    Tracer,
    TraceSession,
    TraceTables,
    make_tracer,
    other_threads_running,
    trace_warnings,
    unseen,
)

_log = logging.getLogger(__name__)
_process_lock = threading.Lock()  # activity sources are process-global: one capture at a time


class Step(NamedTuple):
    """Where a capture is: ``done`` of ``total`` units of ``phase`` (``done == 0`` announces it; ``warmup``
    counts passes, ``pass`` samples, the others one unit)."""

    phase: str
    done: int
    total: int


OnProgress = Callable[[Step], object]


def run_pass(
    function: Callable[..., Any], samples: list[Sample] | None, after_each: Callable[[int, int], object] | None = None
) -> None:
    """One pass: ``function(*args, **kwargs)`` for every sample (``function()`` without any), each
    followed by ``after_each(done, total)``."""
    calls: list[Sample] = [((), {})] if samples is None else samples
    for done, (args, kwargs) in enumerate(calls, start=1):
        with interrupts.delivered():  # Ctrl-C reaches the user's code; ours runs with it held
            function(*args, **kwargs)
        if after_each is not None:
            after_each(done, len(calls))


class PhaseClock:
    """Seconds spent in each phase of a run (kept in the metadata), and the run's progress reports."""

    def __init__(self, on_progress: OnProgress | None) -> None:
        self._on_progress = on_progress
        self._last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def tell(self, phase: str, done: int, total: int = 1) -> None:
        """Report ``Step(phase, done, total)`` to ``on_progress``, if there is one."""
        if self._on_progress is not None:
            self._on_progress(Step(phase, done, total))

    def reporter(self, phase: str) -> Callable[[int, int], object] | None:
        """``(done, total) -> tell(phase, done, total)``, or None without ``on_progress`` (nothing to call)."""
        return None if self._on_progress is None else functools.partial(self.tell, phase)

    def restart(self) -> None:
        """Start timing the next phase now."""
        self._last = time.perf_counter()

    def lap(self, phase: str) -> None:
        """``phase`` has ended: keep its seconds (since the previous lap) and log them."""
        now = time.perf_counter()
        self.laps[phase] = now - self._last
        self._last = now
        _log.debug("phase %s: %.6f s", phase, self.laps[phase])

    def metadata(self) -> dict[str, str]:
        """``seconds_<phase>`` of every phase timed so far."""
        return {schema.seconds_key(phase): f"{seconds:.6f}" for phase, seconds in self.laps.items()}


@contextmanager
def _one_capture() -> Iterator[None]:
    if not _process_lock.acquire(blocking=False):
        raise RuntimeError(
            "profile() is already running in this process (called from inside a profiled "
            "function, or from another thread); profile one thing at a time"
        )
    try:
        yield
    finally:
        _process_lock.release()


def record(
    config: ProfileConfig,
    function: Callable[..., Any],
    samples: list[Sample] | None,
    root: nn.Module,
    on_progress: OnProgress | None = None,
    *,
    warmup_iterations: int = 0,
) -> ProfileResult:
    """Warm up, then record one pass of ``function`` over ``samples`` while ``root``'s hierarchy is observed.

    The warm-up passes are traced with their rows discarded. RuntimeError where another capture runs,
    CUDA is unavailable or another CUPTI client took the callbacks; the message says what to do.
    """
    config, compiled, compilers = _run_config(config, function, root)
    with interrupts.held(), _one_capture():  # no Ctrl-C half-way through installing or removing
        running_before = other_threads_running()
        source = collection.make_source(config)
        clock = PhaseClock(on_progress)
        provenance = _provenance(config, source, compiled, compilers)
        with unseen.no_grad(), provenance:  # no_grad as the spec says, its switching unseen by a user's mode
            _warm_up(function, samples, warmup_iterations, clock, root, provenance)
            return _recorded(config, function, samples, root, source, clock, provenance, running_before)


@contextmanager
def region(config: ProfileConfig, root: nn.Module | None) -> Iterator[list[ProfileResult]]:
    """Record whatever the ``with`` block runs as one pass while ``root``'s hierarchy is observed (None:
    every outermost module call is a root, ``tracing.ModuleTracker``); the list yielded holds the result
    once the block has ended without an exception.

    The public face is :func:`aitune_dispatch.region.recording`. Unlike :func:`record` there is no
    warm-up and no ``torch.no_grad()`` (a training step's backward must run as written); compiles and
    graph captures inside the block are seen as a recorded pass's. Ctrl-C is held while we install and
    remove, delivered while the block runs; everything is removed on any exception from the block.
    """
    if root is None:  # nothing to look at before the block: its code is taken for eager
        config, compiled, compilers = backends.for_run(config, False), False, ()
    else:
        config, compiled, compilers = _run_config(config, root, root)
    done: list[ProfileResult] = []
    with interrupts.held(), _one_capture():
        running_before = other_threads_running()
        source = collection.make_source(config)
        clock = PhaseClock(None)
        provenance = _provenance(config, source, compiled, compilers)
        with provenance:
            modules = ModuleTracker(root, ())
            session = TraceSession(modules, _tracer(config, modules, source, running_before))
            with _recording(session, source, clock, config.cuda, passes=1), interrupts.delivered():
                yield done
            done.append(post_process(config, session, source, clock, provenance))


def _run_config(
    config: ProfileConfig, function: Callable[..., Any], root: nn.Module
) -> tuple[ProfileConfig, bool, tuple[str, ...]]:
    """The config for this run (its backends chosen knowing whether compiled code is involved), whether
    it is, and the backends of that compiled code."""
    compiled = uses_compile(function, root)
    compilers = compile_backends(function, root, stand_ins(function, root)) if compiled else ()
    return backends.for_run(config, compiled), compiled, compilers


def _provenance(
    config: ProfileConfig, source: collection.ActivitySource, compiled: bool, compilers: tuple[str, ...]
) -> ProvenanceCapture:
    """The run's compile and graph-capture observation (``provenance/``)."""
    return ProvenanceCapture(
        config.device, source, str(config.op_tracer), config.all_functions, compiled, compilers,
        interception=str(config.interception),
    )  # fmt: skip


def _tracer(
    config: ProfileConfig,
    modules: ModuleTracker,
    source: collection.ActivitySource,
    running_before: dict[int, threading.Thread | None],
) -> Tracer:
    """The recorded pass's tracer, of the config's backend, pushing ids to ``source``."""
    return make_tracer(
        str(config.op_tracer), modules.module_ids(), config.function_names, source, config.all_functions,
        running_before, str(config.interception),
    )  # fmt: skip


def _aliases(function: Callable[..., Any], root: nn.Module) -> tuple[nn.Module, ...]:
    """Wrappers that stand for modules of the hierarchy, those a pipeline calls too; read again each pass."""
    return stand_ins(function, root)


def _warm_up(
    function: Callable[..., Any],
    samples: list[Sample] | None,
    passes: int,
    clock: PhaseClock,
    root: nn.Module,
    provenance: ProvenanceCapture,
) -> None:
    """``passes`` traced warm-up passes (``provenance.warm_up``), each reported to ``on_progress``."""
    clock.tell("warmup", 0, passes)
    started = time.perf_counter()
    done = 0

    def one_pass() -> None:
        nonlocal done
        run_pass(function, samples)
        done += 1
        clock.tell("warmup", done, passes)

    provenance.warm_up(one_pass, passes, root, _aliases(function, root))
    clock.laps["warmup"] = time.perf_counter() - started


def _recorded(
    config: ProfileConfig,
    function: Callable[..., Any],
    samples: list[Sample] | None,
    root: nn.Module,
    source: collection.ActivitySource,
    clock: PhaseClock,
    provenance: ProvenanceCapture,
    running_before: dict[int, threading.Thread | None],
) -> ProfileResult:
    modules = ModuleTracker(root, _aliases(function, root))
    session = TraceSession(modules, _tracer(config, modules, source, running_before))
    _traced_pass(function, samples, session, source, clock, config.cuda)
    return post_process(config, session, source, clock, provenance, called=samples != [])


def post_process(
    config: ProfileConfig,
    session: TraceSession,
    source: collection.ActivitySource,
    clock: PhaseClock,
    provenance: ProvenanceCapture,
    *,
    called: bool = True,
) -> ProfileResult:
    """Everything after the recorded pass: decode, join, attribute, build the result
    (``benchmarks/post_memory.py`` measures it on synthetic records)."""
    modules = session.modules
    clock.tell("decode", 0)
    trace = session.tables()
    provenance.recorded(trace)  # the graph nodes the recorded pass created, with its trace
    hooks_compiled = provenance.hooks_compiled(modules)  # no forward seen is then no mistake
    # without Inductor's provenance (torch 2.8) a compiled module call looks like one that never ran
    unknown = provenance.compiled_unknown(modules) if not hooks_compiled and not trace.module_calls.num_rows else None
    trace_messages = trace_warnings(
        trace, modules, called=called, hooks_compiled=hooks_compiled, compiled_unknown=unknown
    )
    for message in trace_messages:
        warnings.warn(message, RuntimeWarning, stacklevel=6)  # profile()'s caller
    modules_table = session.modules_table()
    activity = source.activity(trace.ops)
    clock.lap("decode")
    clock.tell("join", 0)
    joined = join(activity, trace, modules_table)
    # compiled kernels and CUDA graph replays (provenance/): the activity, the calls it adds, kernel_sources
    attributed, provenance_metadata, provenance_messages = provenance.attribute(
        joined, trace.calls, modules_table, modules
    )
    joined = attributed.activity
    clock.lap("join")
    _log.info(
        "recorded %d activity rows (%s source, %s tracer) in %.3f s",
        joined.num_rows,
        activity.source,
        config.op_tracer,
        sum(clock.laps.values()),
    )
    result = ProfileResult(
        activity=joined,
        launches=activity.launches,
        ops=trace.ops,
        calls=attributed.calls,
        modules=modules_table,
        module_calls=trace.module_calls,
        kernel_sources=attributed.kernel_sources,
        function_data=session.function_data(),
        source=activity.source,
        module_objects=tuple(session.modules.modules),
        dropped_records=activity.dropped_records,
        warnings=(*activity.warnings, *trace_messages, *provenance_messages),
        metadata=run_metadata(config, source, trace, activity, joined, clock, provenance_metadata),
    )
    return _said_if_silently_empty(result)


def _said_if_silently_empty(result: ProfileResult) -> ProfileResult:
    """``result``, with a warning where its ``profiling_df`` is empty though the pass ran ops or kernels and
    no other warning of this profile() said why (``views.empty_result_warning``: the fused fast path of
    ``nn.TransformerEncoder`` in eval, a model built on raw torch ops)."""
    message = None if result.warnings else views.empty_result_warning(result)
    if message is None:
        return result
    warnings.warn(message, RuntimeWarning, stacklevel=7)  # profile()'s caller
    return dataclasses.replace(result, warnings=(message,))


def _traced_pass(
    function: Callable[..., Any],
    samples: list[Sample] | None,
    session: TraceSession,
    source: collection.ActivitySource,
    clock: PhaseClock,
    cuda: bool,
) -> None:
    """The recorded pass, timed as the user's calls alone (``docs/design.md``, "What a pass pays once")."""
    with _recording(session, source, clock, cuda, passes=1 if samples is None else len(samples)):
        run_pass(function, samples, clock.reporter("pass"))


@contextmanager
def _recording(
    session: TraceSession, source: collection.ActivitySource, clock: PhaseClock, cuda: bool, passes: int
) -> Iterator[None]:
    """The source started and the session entered around the block (the recorded pass), each phase timed
    and announced; the source stops also on an exception from the block."""
    if cuda:
        torch.cuda.synchronize()
    clock.tell("start", 0)
    clock.restart()
    with unseen.calls_unseen():
        source.start()
    try:
        clock.tell("pass", 0, passes)  # outside the session: on_progress is not the user's profiled code
        with session:
            clock.lap("start")
            yield
            if cuda:
                torch.cuda.synchronize()
            clock.lap("pass")
        clock.tell("flush", 0)
    finally:
        with unseen.calls_unseen():
            source.stop()
    clock.lap("flush")


def run_metadata(
    config: ProfileConfig,
    source: collection.ActivitySource,
    trace: TraceTables,
    activity: collection.Activity,
    joined: pa.Table,
    clock: PhaseClock,
    provenance: dict[str, str] | None = None,
) -> dict[str, str]:
    """``ProfileResult.metadata``: versions, options, backends, GPUs, ranks, clock and phase seconds."""
    return {
        schema.META_TORCH: torch.__version__,
        schema.META_DEVICE: config.device,
        schema.META_ALLOW_TF32: str(bool(torch.backends.cuda.matmul.allow_tf32)),
        schema.META_TRACER: str(config.op_tracer),
        schema.META_DECODER: getattr(source, "sink_name", "none"),
        schema.META_CORRELATION: getattr(source, "correlation", "none"),
        schema.META_THREADS_TRACED: str(sum(thread.traced for thread in trace.threads)),
        schema.META_CORRELATION_PUSHES: str(trace.ops_pushed + trace.scopes_pushed),
        schema.META_FUNCTIONS: config.functions,
        schema.META_INTERCEPTION: str(config.interception),
        **(devices.current_gpu_metadata() if config.cuda else {}),
        **(devices.device_metadata(joined) if config.cuda else {}),  # only when kernels ran on several GPUs
        **rank_metadata(),  # only under an initialised torch.distributed process group
        schema.META_CLOCK_OFFSET: "0",  # activity timestamps are converted to the host clock (collection)
        schema.META_TICKS_PER_NS: f"{activity.clock_ticks_per_ns:.9f}",
        **(provenance or {}),
        **clock.metadata(),
    }
