"""CUDA graphs captured before ``profile()``: what launched each node, recorded at capture, used at replay.

Serving engines and static-cache decoders capture their graphs once, at start-up. While a
:class:`GraphCaptureObserver` is active, every ``torch.cuda.CUDAGraph`` capture in the process is
traced as a capture inside ``profile()`` is (modules, functional calls, ops; Inductor's call sites for
compiled graphs) and kept as an :class:`Observation`, bound to its graph and modules by weak
reference. A later ``profile()`` attributes replays of those graphs from it (``ProvenanceCapture``).
The tracing is installed from ``capture_begin`` to ``capture_end`` only: replays and code that
captures nothing run as they would unobserved (``docs/compiled.md``, "Graphs captured before
profile()").
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn

from .. import schema
from ..tracing import ModuleTracker, TraceSession, TraceTables, make_tracer
from ..tracing.unseen import unseen
from .graphs import GraphNodeObserver, graph_row_count, graph_rows_table, loaded_decoder
from .inductor import InductorProvenance, Program, remember

_lock = threading.Lock()
_observations: list[Observation] = []  # live ones: an entry leaves when its graph is freed
_active: list[GraphCaptureObserver] = []  # at most one
_profiling = [0]  # profile() calls running (ProvenanceCapture): they observe their own captures


@dataclass(frozen=True, eq=False)
class Observation:
    """One observed capture: its graph nodes, the capture's trace, and the modules that trace names.

    ``modules[i]`` is a weak reference to the module the capture's trace calls ``module_id`` i, so a
    later ``profile()`` of a larger or smaller hierarchy maps it to its own ids by object. The trace's
    and the nodes' tables are built the first time a ``profile()`` needs them (``build_trace``,
    ``raw_nodes``), not inside the capture.
    """

    graph: weakref.ref[Any]
    raw_nodes: tuple[Any, ...] = field(repr=False)  # GraphNodeObserver.take_raw(): created and cloned nodes
    build_trace: Callable[[], TraceTables] = field(repr=False)
    modules: tuple[weakref.ref[nn.Module], ...]
    compiled: bool  # Inductor programs were seen while the observer ran (remembered for later runs)

    @functools.cached_property
    def nodes(self) -> pa.Table:
        """The capture's created and cloned graph nodes (schema :data:`schema.GRAPH_NODES`; built once)."""
        return graph_rows_table(self.raw_nodes)

    @functools.cached_property
    def trace(self) -> TraceTables:
        """The capture's trace (built once, on first use)."""
        return self.build_trace()

    @property
    def node_ids(self) -> np.ndarray:
        """Every graph node id of the capture, created or cloned (what replayed kernels report)."""
        return self.nodes["node_id"].to_numpy()

    def trace_for(self, current: dict[int, int]) -> TraceTables:
        """The trace with module ids mapped onto another tracker's (``id(module) -> module_id``);
        a module freed or outside that hierarchy becomes ``NO_MODULE``."""
        mapping = np.full(len(self.modules) + 1, schema.NO_MODULE, np.int64)
        for index, ref in enumerate(self.modules):
            module = ref()
            if module is not None:
                mapping[index] = current.get(id(module), schema.NO_MODULE)

        def remapped(table: pa.Table) -> pa.Table:
            ids = pc.fill_null(table["module_id"], schema.NO_MODULE).to_numpy().astype(np.int64)
            inside = (ids >= 0) & (ids < len(self.modules))
            new = mapping[np.where(inside, ids, len(self.modules))]  # the last entry: NO_MODULE
            return table.set_column(table.schema.get_field_index("module_id"), "module_id", pa.array(new, pa.int64()))

        return TraceTables(
            ops=remapped(self.trace.ops),
            calls=remapped(self.trace.calls),
            module_calls=self.trace.module_calls,
            contexts=remapped(self.trace.contexts),
            threads=self.trace.threads,
            scopes_pushed=self.trace.scopes_pushed,
            ops_pushed=self.trace.ops_pushed,
        )


def observations() -> list[Observation]:
    """The observations whose graphs are alive, oldest first."""
    with _lock:
        return [o for o in _observations if o.graph() is not None]


def forget_observations() -> None:
    """Drop every observation (tests; a graph freed drops its own)."""
    with _lock:
        _observations.clear()


def _drop(observation: Observation) -> None:
    with _lock:
        if observation in _observations:
            _observations.remove(observation)


class profile_running:  # noqa: N801 - used as a context manager, like contextlib's
    """Held by ``ProvenanceCapture`` around one ``profile()``: captures inside it are its own to observe,
    and the observer's Inductor watch steps aside for the one ``profile()`` enters."""

    def __enter__(self) -> profile_running:
        with _lock:
            _profiling[0] += 1
            observer = _active[0] if _active else None
        if observer is not None:
            observer._suspend_inductor()
        return self

    def __exit__(self, *exc: object) -> None:
        with _lock:
            _profiling[0] -= 1
            observer = _active[0] if _active and not _profiling[0] else None
        if observer is not None:
            observer._resume_inductor()


def _active_modules(tracked: dict[int, nn.Module]) -> list[nn.Module]:
    """The modules of ``tracked`` whose forward is running on this thread, outermost first (their
    ``nn.Module._call_impl`` frames): the scopes the module hooks would have entered."""
    call_impl = nn.Module._call_impl.__code__
    frame, found = sys._getframe(1), []
    while frame is not None:
        if frame.f_code is call_impl:
            module = frame.f_locals.get("self")
            if module is not None and id(module) in tracked and tracked[id(module)] is module:
                found.append(module)
        frame = frame.f_back
    return found[::-1]


class _Hierarchy:
    """The observed hierarchy, read once when the observer starts: what every capture's tracing names."""

    def __init__(self, root: nn.Module) -> None:
        self.tracker = ModuleTracker(root)
        self.module_ids = self.tracker.module_ids()
        self.tracked = {id(m): m for m in self.tracker.modules}
        self.refs = tuple(weakref.ref(m) for m in self.tracker.modules)


class _Capture:
    """One observed capture in progress: the traced session and the node subscription."""

    def __init__(self, observer: GraphCaptureObserver, graph: Any) -> None:
        self.graph = graph
        self.hierarchy = observer._hierarchy
        self.nodes = GraphNodeObserver(observer.kind, loaded_decoder())
        self.tracer: Any = None
        self.session: TraceSession | None = None
        self.entered: list[nn.Module] = []

    def begin(self, observer: GraphCaptureObserver) -> bool:
        """Subscribe and install the tracing; False (nothing installed) where CUPTI's callbacks are taken."""
        if not self.nodes.start():
            observer.unavailable = self.nodes.unavailable
            return False
        try:
            self.tracer = make_tracer(
                observer.backend, self.hierarchy.module_ids, frozenset(), observer.target, observer.all_functions,
                interception=observer.interception,
            )
            self.session = TraceSession(self.hierarchy.tracker, self.tracer)
            self.session.__enter__()
            for module in _active_modules(self.hierarchy.tracked):
                self.tracer.module_entered(module)
                self.entered.append(module)
        except BaseException:
            self.close()
            raise
        return True

    def close(self) -> Callable[[], TraceTables] | None:
        """Leave the scopes entered, remove the tracing, unsubscribe; the capture's trace to build later
        (None if none)."""
        try:
            if self.session is not None:
                try:
                    while self.entered:
                        self.tracer.module_exited(self.entered.pop())
                finally:
                    session, self.session = self.session, None
                    session.__exit__(None, None, None)
                return self.tracer.later_tables()
            return None
        finally:
            self.nodes.stop()


class GraphCaptureObserver:
    """Observes every CUDA graph capture in the process while active; a context manager, or start/stop.

    Built by ``aitune_dispatch.observe_graph_captures``, which picks the arguments as ``profile()``
    would. Captures begun inside ``profile()`` (which observes its own) or inside another capture
    are passed through and counted in ``skipped``.

    Parameters
    ----------
    root:
        The hierarchy whose modules name the captured nodes, read when the observer starts (as
        ``profile()`` reads its model when it begins): a module added to it later is not named.
    backend:
        The tracing backend, ``"native"`` or ``"python"``, as ``profile()``'s.
    all_functions:
        Whether torch-level calls count as functional calls (``functions="all"``).
    target:
        The (never started) CUPTI source whose external ids the capture's launches carry.
    interception:
        How functional calls are seen, ``"objects"`` or ``"mode"``, as ``profile()``'s.

    Attributes
    ----------
    captured:
        Captures observed so far.
    skipped:
        Captures seen and left alone.
    unavailable:
        Why a capture could not be observed (CUPTI's callbacks held by another tool), or None.
    seconds:
        Seconds the observer's own work added to the captures so far: ``"begin"`` (before
        ``capture_begin``: CUPTI subscription, tracing installed) and ``"end"``
        (after ``capture_end``: tracing removed, the trace and nodes kept), summed over captures.
    """

    def __init__(
        self, root: nn.Module, backend: str, all_functions: bool, target: Any, interception: str = "mode"
    ) -> None:
        self.root = root
        self.backend = backend
        self.interception = interception
        self.all_functions = all_functions
        self.target = target
        self.kind = int(getattr(target, "correlation_kind", -1))
        self.unavailable: str | None = None  # why a capture could not be observed, in words
        self.captured = 0  # captures observed
        self.skipped = 0  # captures begun inside profile() or inside another capture: not ours
        self.seconds = {"begin": 0.0, "end": 0.0}  # our own work around the captures, summed
        self._patched: list[tuple[str, Any]] = []
        self._capture: _Capture | None = None
        self._hierarchy: _Hierarchy | None = None  # read in start()
        self._inductor: InductorProvenance | None = None
        self._programs: list[Program] = []
        self._started = False

    # -- lifetime ------------------------------------------------------------------------------------
    def start(self) -> GraphCaptureObserver:
        """Begin observing: ``torch.cuda.CUDAGraph``'s capture methods are wrapped until ``stop()``.

        Returns
        -------
        GraphCaptureObserver
            This observer, started.

        Raises
        ------
        RuntimeError
            Where another observer is active (one observes the whole process) or this one was used.
        """
        if self._started:
            raise RuntimeError("a GraphCaptureObserver observes once; call observe_graph_captures() again")
        with _lock:
            if _active:
                raise RuntimeError(
                    "another graph-capture observer is active; stop it first (one observes the whole process)"
                )
            _active.append(self)
            profiling = bool(_profiling[0])
        self._started = True
        try:
            self._hierarchy = _Hierarchy(self.root)
            if not profiling:
                self._resume_inductor()
            self._patch()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop observing and put everything back (safe to call twice); observations stay usable.

        A capture still in progress is closed unrecorded; the capture methods are the class's own again.

        Returns
        -------
        None
        """
        try:
            self._end_capture(keep=False)
        finally:
            try:
                self._unpatch()
            finally:
                try:
                    self._suspend_inductor()
                finally:
                    with _lock:
                        if self in _active:
                            _active.remove(self)

    def __enter__(self) -> GraphCaptureObserver:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def active(self) -> bool:
        """Whether captures are being observed now."""
        return self in _active

    # -- Inductor ------------------------------------------------------------------------------------
    def _resume_inductor(self) -> None:
        if self._inductor is None and self.active:
            inductor = unseen(InductorProvenance, self.all_functions)
            unseen(inductor.__enter__)
            self._inductor = inductor

    def _suspend_inductor(self) -> None:
        inductor, self._inductor = self._inductor, None
        if inductor is not None:
            try:
                self._programs.extend(p for p in inductor.programs() if p not in self._programs)
            finally:
                inductor.__exit__(None, None, None)

    def _programs_so_far(self) -> list[Program]:
        current = self._inductor.programs() if self._inductor is not None else []
        return [*self._programs, *(p for p in current if p not in self._programs)]

    # -- the patch -----------------------------------------------------------------------------------
    def _patch(self) -> None:
        graph_class = torch.cuda.CUDAGraph
        for name, wrapper in (("capture_begin", self._begin_wrapper), ("capture_end", self._end_wrapper)):
            original = graph_class.__dict__.get(name)
            self._patched.append((name, original))
            setattr(graph_class, name, wrapper(getattr(graph_class, name)))

    def _unpatch(self) -> None:
        graph_class = torch.cuda.CUDAGraph
        while self._patched:
            name, original = self._patched.pop()
            if original is None:
                delattr(graph_class, name)
            else:
                setattr(graph_class, name, original)

    def _begin_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        observer = self

        def capture_begin(graph: Any, *args: Any, **kwargs: Any) -> Any:
            if _profiling[0] or observer._capture is not None:
                observer.skipped += 1
                return original(graph, *args, **kwargs)
            started = time.perf_counter()
            capture = _Capture(observer, graph)
            began = unseen(capture.begin, observer)
            observer.seconds["begin"] += time.perf_counter() - started
            if began:
                observer._capture = capture
            try:
                return original(graph, *args, **kwargs)
            except BaseException:
                observer._end_capture(keep=False)
                raise

        capture_begin.__wrapped__ = original  # type: ignore[attr-defined]
        return capture_begin

    def _end_wrapper(self, original: Callable[..., Any]) -> Callable[..., Any]:
        observer = self

        def capture_end(graph: Any, *args: Any, **kwargs: Any) -> Any:
            if observer._capture is None or observer._capture.graph is not graph:
                return original(graph, *args, **kwargs)
            ended = False
            try:
                result = original(graph, *args, **kwargs)  # instantiates: the clones are observed too
                ended = True
                return result
            finally:
                observer._end_capture(keep=ended)

        capture_end.__wrapped__ = original  # type: ignore[attr-defined]
        return capture_end

    def _end_capture(self, keep: bool) -> None:
        capture, self._capture = self._capture, None
        if capture is None:
            return
        started = time.perf_counter()
        try:
            self._keep(capture, keep)
        finally:
            self.seconds["end"] += time.perf_counter() - started

    def _keep(self, capture: _Capture, keep: bool) -> None:
        """Close ``capture`` and, where it ended well and created nodes, keep its observation."""
        trace = unseen(capture.close)
        nodes = unseen(capture.nodes.take_raw)
        if not keep or trace is None or graph_row_count(nodes) == 0:
            return
        programs = self._programs_so_far()
        if programs:  # later profile() calls find their call sites, as for graphs compiled in an earlier one
            tracker = capture.hierarchy.tracker
            remember(programs, tracker.modules, tracker.names)
        observation = Observation(
            graph=weakref.ref(capture.graph),
            raw_nodes=nodes,
            build_trace=trace,
            modules=capture.hierarchy.refs,
            compiled=bool(programs),
        )
        with _lock:
            _observations.append(observation)
        weakref.finalize(capture.graph, _drop, observation)
        self.captured += 1
