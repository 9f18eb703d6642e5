"""One recorded run, start to finish: the lock, warm-up, start/stop, phases, decode, join, metadata.

:func:`record` is the whole pipeline behind ``ModuleFunctionKernelProfiler.profile()``: it takes a
validated :class:`~.config.ProfileConfig`, the callable, its samples (checked by :mod:`.arguments`)
and the root module, and returns the immutable :class:`~.results.ProfileResult`. A
:class:`~.provenance_capture.ProvenanceCapture` brackets the whole run (compiled and graphed
models): it runs the warm-up passes traced, with their rows discarded (under ``torch.no_grad()``,
like the recorded pass), so that compiles and CUDA graph captures happen where the profiler sees
them; the recorded pass is bracketed with the activity source and the trace session, decoded and
joined, and the capture then attributes compiled kernels and graph replays. It keeps the
seconds of every phase in ``metadata["seconds_<phase>"]`` (``schema.PHASES``). Whoever wants to
follow it passes ``on_progress``: a :class:`Step` at the start of every phase and after every
warm-up pass and recorded sample. One run at a time per process (activity sources are global).
"""

from __future__ import annotations

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
from .provenance import ProvenanceCapture, stand_ins, uses_compile
from .results import ProfileResult
from .schema import Sample
from .tracing import (
    ModuleTracker,
    TraceSession,
    TraceTables,
    make_tracer,
    other_threads_running,
    trace_warnings,
    unseen,
)

_log = logging.getLogger(__name__)  # a child of the "aitune_dispatch" logger: phases and backend choices
_process_lock = threading.Lock()  # activity sources are process-global: one capture at a time


class Step(NamedTuple):
    """Where a capture is: ``done`` of ``total`` units of ``phase`` (one of ``schema.PHASES``).

    ``done == 0`` announces the phase; ``warmup`` then counts passes and ``pass`` recorded
    samples (calls of the function); the other phases are one unit each.
    """

    phase: str
    done: int
    total: int


OnProgress = Callable[[Step], object]


def run_pass(
    function: Callable[..., Any], samples: list[Sample] | None, after_each: Callable[[int, int], object] | None = None
) -> None:
    """One pass: ``function(*args, **kwargs)`` for every sample, or ``function()`` without samples.

    Parameters
    ----------
    function:
        What is profiled.
    samples:
        What :func:`.arguments.normalize_samples` returned.
    after_each:
        Called as ``after_each(done, total)`` after each call, when given.

    Returns
    -------
    None
    """
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

    Parameters
    ----------
    config:
        The validated options (an unresolved ``op_tracer=None`` is resolved here).
    function:
        The callable profiled (``root`` itself, a wrapper standing for it, or a pipeline function).
    samples:
        What :func:`.arguments.normalize_samples` returned.
    root:
        The ``nn.Module`` whose hierarchy is profiled.
    on_progress:
        Told a :class:`Step` as each phase begins and after each warm-up pass and recorded sample.
    warmup_iterations:
        Passes before the recorded one (the caller validated it: an int >= 0), traced with their rows
        discarded, so that compiles and CUDA graph captures happen where the profiler sees them.

    Returns
    -------
    ProfileResult
        Every recorded kernel, attributed or not, with the trace, the samples and the metadata.

    Raises
    ------
    RuntimeError
        Another capture is running, CUDA is unavailable on ``device="cuda"``, or another CUPTI
        client took the activity callbacks; the message says what to do.
    """
    compiled = uses_compile(function, root)
    config = backends.for_run(config, compiled)
    with interrupts.held(), _one_capture():  # no Ctrl-C half-way through installing or removing
        # threads running now are not the profiled function's; those it starts, in warm-up passes too, are
        running_before = other_threads_running()
        source = collection.make_source(config)
        clock = PhaseClock(on_progress)
        # compiled and graphed models: compiles and graph captures are observed from the first warm-up pass
        provenance = ProvenanceCapture(
            config.device, source, str(config.op_tracer), config.all_functions, compiled=compiled
        )
        with unseen.no_grad(), provenance:  # no_grad as the spec says, its switching unseen by a user's mode
            _warm_up(function, samples, warmup_iterations, clock, root, provenance)
            return _recorded(config, function, samples, root, source, clock, provenance, running_before)


def _aliases(function: Callable[..., Any], root: nn.Module) -> tuple[nn.Module, ...]:
    """Wrappers that stand for modules of the profiled hierarchy (torch.compile's OptimizedModule), also
    those a pipeline function calls (``provenance_capture.stand_ins``); read again for each traced pass."""
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
    backend = str(config.op_tracer)
    tracer = make_tracer(
        backend, modules.module_ids(), config.function_names, source, config.all_functions, running_before
    )
    session = TraceSession(modules, tracer)
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
    """Everything after the recorded pass: decode the trace and the activity, join them, attribute, build the result.

    Parameters
    ----------
    config:
        The run's options (``op_tracer`` resolved).
    session:
        The recorded pass's trace session, after it has ended (its tracer holds the trace).
    source:
        The activity source that collected the pass, after ``stop()``.
    clock:
        The run's phase clock: ``decode`` and ``join`` are timed here.
    provenance:
        The capture bracketing the run (compiled kernels and CUDA graph replays).
    called:
        Whether the pass called the function (False for empty ``data``: no "never ran" warning).

    Returns
    -------
    ProfileResult
        The run's result (``benchmarks/post_memory.py`` measures this function on synthetic records).
    """
    modules = session.modules
    clock.tell("decode", 0)
    trace = session.tables()
    provenance.recorded(trace)  # the graph nodes the recorded pass created, with its trace
    trace_messages = trace_warnings(trace, modules, called=called)
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
    return ProfileResult(
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


def _traced_pass(
    function: Callable[..., Any],
    samples: list[Sample] | None,
    session: TraceSession,
    source: collection.ActivitySource,
    clock: PhaseClock,
    cuda: bool,
) -> None:
    """The recorded pass, timed as the user's calls alone (``seconds_pass``).

    Everything per ``profile()`` is outside that lap: the activity source starts and the session
    installs its hooks, modes, gates and op recorder, in ``start``; the session removes them and hands its columns
    over, and the source stops, in ``flush``. Our own torch calls there (the source's canary) are
    hidden from a user's modes.
    """
    if cuda:
        torch.cuda.synchronize()
    clock.tell("start", 0)
    clock.restart()
    with unseen.calls_unseen():
        source.start()
    try:
        clock.tell("pass", 0, 1 if samples is None else len(samples))
        with session:
            clock.lap("start")
            run_pass(function, samples, clock.reporter("pass"))
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
    """The run's facts in words: versions, options, backends, GPUs, ranks, clock and phase seconds.

    Parameters
    ----------
    config, source, trace, activity, joined, clock:
        The run's options, activity source, traced tables, decoded activity, joined activity
        (the GPUs its kernels ran on) and phase clock.
    provenance:
        How compiled kernels and CUDA graph replays were attributed (``ProvenanceCapture.attribute``'s
        ``schema.META_INDUCTOR`` ... entries), or None.

    Returns
    -------
    dict[str, str]
        ``ProfileResult.metadata`` (keys ``schema.META_*`` and ``seconds_<phase>``).
    """
    return {
        schema.META_TORCH: torch.__version__,
        schema.META_DEVICE: config.device,
        schema.META_OP_TRACER: str(config.op_tracer),
        schema.META_DECODER: getattr(source, "sink_name", "none"),
        schema.META_THREADS_TRACED: str(sum(thread.traced for thread in trace.threads)),
        schema.META_CORRELATION_PUSHES: str(trace.ops_pushed + trace.scopes_pushed),
        schema.META_FUNCTIONS: config.functions,
        **(devices.current_gpu_metadata() if config.cuda else {}),
        **(devices.device_metadata(joined) if config.cuda else {}),  # only when kernels ran on several GPUs
        **rank_metadata(),  # only under an initialised torch.distributed process group
        schema.META_CLOCK_OFFSET: "0",  # activity timestamps are converted to the host clock (collection)
        schema.META_TICKS_PER_NS: f"{activity.clock_ticks_per_ns:.9f}",
        **(provenance or {}),
        **clock.metadata(),
    }
