"""What ``profile()`` records for compiled and graphed models, from its first warm-up pass to the join.

One :class:`ProvenanceCapture` brackets a whole ``profile()``: it observes Inductor throughout, runs
the warm-up passes traced while graph captures are observed, and attributes the joined activity,
saying in metadata and warnings what could not be attributed and why (``docs/design.md``,
"torch.compile and CUDA graphs").
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from types import CodeType, TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import nn

from .. import schema, torch_compat
from ..collection.cupti_source import torch_profiler_active
from ..tracing import ModuleTracker, TraceSession, TraceTables, make_tracer
from ..tracing.functional import wrapped_chain
from ..tracing.unseen import calls_unseen
from ..tracing.wrappers import reachable_wrappers, reaches_compiled_calls
from .attribution import Attribution, attribute, captured_nodes
from .compile_backends import non_inductor_warning
from .graphs import GraphNodeObserver, loaded_decoder
from .inductor import (
    ANOTHER_INSTANCE,
    CURRENT,
    Hierarchy,
    InductorProvenance,
    Program,
    remember,
    remembered_programs,
    site_tables,
)
from .observer import Observation, observations, profile_running


class _Uncorrelated:
    """A correlation target that pushes nothing (graph captures not observed, or the CPU source)."""

    correlation_kind = -1

    def op_started(self, op_id: int, op: str) -> None:
        """Nothing to push."""

    def op_finished(self, op_id: int) -> None:
        """Nothing to pop."""

    def scope_entered(self, context_id: int) -> None:
        """Nothing to push."""

    def scope_exited(self) -> None:
        """Nothing to pop."""

    def correlation_functions(self) -> None:
        """None: nothing is pushed."""


def _is_compiled(module: Any) -> bool:
    """A torch.compile wrapper (of a module or a function), or a module compiled in place (``module.compile()``)."""
    return (
        hasattr(module, "_orig_mod")
        or hasattr(module, "_torchdynamo_orig_callable")
        or getattr(module, "_compiled_call_impl", None) is not None
    )


def stand_ins(function: Any, root: nn.Module) -> tuple[nn.Module, ...]:
    """The wrappers whose forwards stand for a module of ``root``'s hierarchy while ``function`` runs.

    None for ``root`` itself, the wrapper for a ``torch.compile`` of it, else the compiled wrappers a
    pipeline may call (``tracing.wrappers.reachable_wrappers``); ``ModuleTracker``'s ``aliases``.
    """
    if function is root:
        return ()
    direct = (function,) if isinstance(function, nn.Module) else ()
    if direct and hasattr(function, "_orig_mod"):  # no other wrapper is called through this one
        return direct
    return (*direct, *reachable_wrappers(function, root))


def uses_compile(function: Any, root: nn.Module) -> bool:
    """Whether ``function`` is compiled, the hierarchy holds a compiled module (``torch.compile`` of a child),
    ``function`` is a pipeline that may call a compiled wrapper of the hierarchy (:func:`stand_ins`), or a
    compiled call of one of its modules is within reach (``torch.compile(model.__call__)``)."""
    return (
        _is_compiled(function)
        or any(_is_compiled(module) for module in root.modules())
        or any(_is_compiled(wrapper) for wrapper in stand_ins(function, root))
        or reaches_compiled_calls(function, root)  # torch.compile(model.__call__), kept by HF's generate()
    )


def _shared_graphs(
    current: list[Program], earlier: list[Program], hierarchy: Hierarchy, tracker: ModuleTracker, activity: pa.Table
) -> dict[str, list[str]]:
    """By the module a graph was compiled for, the wrappers of its twins running that graph unattributed.

    Two ``torch.compile(MLP())`` children of one model run the graph compiled for the first; its
    sources name the first, so the second's launches are outside the graph's scope.
    """
    attributed = activity.filter(pc.equal(activity["attribution"], schema.ATTRIBUTION_INDUCTOR))
    attributed_modules = set(attributed["module_id"].to_pylist())
    shared: dict[str, list[str]] = {}
    programs = [(p, None) for p in current] + [(p, p.bound) for p in earlier if p.bound]
    for program, bound in programs:
        own = hierarchy.compiled_for(program, bound)
        if own is None:
            continue
        for twin in hierarchy.same_tree(own):
            wrapper = tracker.parents[twin]
            if wrapper < 0 or not hasattr(tracker.modules[wrapper], "_orig_mod"):
                continue  # not run through a torch.compile wrapper of its own: eager, or part of a larger graph
            prefix = tracker.names[twin] + "."
            below = {i for i, name in enumerate(tracker.names) if name.startswith(prefix)} | {twin, wrapper}
            names = shared.setdefault(tracker.names[own] or "the root", [])
            if not below & attributed_modules and tracker.names[wrapper] not in names:
                names.append(tracker.names[wrapper])
    return {own: names for own, names in shared.items() if names}


def _forward_codes(module: nn.Module) -> list[CodeType]:
    """The code of ``module``'s forward (one assigned on the instance included) and of every function of
    its ``__wrapped__`` chain: a decorated forward's frame is its decorator's (HF's ``can_return_tuple``)."""
    codes: list[CodeType] = []
    for forward in (module.__dict__.get("forward"), getattr(type(module), "forward", None)):
        if forward is not None:
            codes += [f.__code__ for f in wrapped_chain(forward) if isinstance(getattr(f, "__code__", None), CodeType)]
    return codes


def compiles_module_calls(
    tracker: ModuleTracker, hierarchy: Hierarchy, current: Iterable[Program], earlier: Iterable[Program] = ()
) -> bool:
    """Whether one of the programs was compiled from the forward of a module of ``tracker``'s hierarchy, that
    very object, that no ``torch.compile`` wrapper stands for (``torch.compile(module.__call__)``, as HF's
    ``generate()`` compiles its decoding step). Dynamo then starts the frame at the forward and traces the
    module's hooks as no-ops, so its launches run outside any traced module. ``earlier``: remembered
    programs, matched through the module objects they keep."""
    wrapped = {id(m._orig_mod) for m, _ in tracker.module_ids() if hasattr(m, "_orig_mod")}  # their hooks run
    programs = [(p, None) for p in current] + [(p, p.bound) for p in earlier if p.bound]
    for program, bound in programs:
        frame = program.frame() if program.frame is not None else None
        own = hierarchy.compiled_for(program, bound) if frame is not None else None
        if own is None:
            continue  # compiled for a module outside the hierarchy, or unknown: another instance's launches
        module = tracker.modules[own]
        if id(module) in wrapped or hasattr(module, "_orig_mod"):
            continue
        if any(code is frame for code in _forward_codes(module)):
            return True
    return False


def _replayed_observations(activity: pa.Table) -> list[Observation]:
    """The live observations (graphs captured before profile()) some of whose nodes the activity replayed."""
    in_graph = activity.filter(pc.not_equal(activity["graph_id"], schema.NOT_IN_GRAPH)) if activity.num_rows else None
    if in_graph is None or in_graph.num_rows == 0:
        return []
    nodes = np.unique(in_graph["graph_node_id"].to_numpy(zero_copy_only=False))
    return [o for o in observations() if np.isin(o.node_ids, nodes).any()]


def _native_decoder() -> Any | None:
    """The compiled decoder module with libcupti resolved, or None."""
    return loaded_decoder()


class ProvenanceCapture:
    """Context manager around one ``profile()``: compile and graph-capture observation; single-use.

    ``source`` is where op and scope ids are pushed while warm-up passes capture graphs. Only where
    ``compiled`` (:func:`uses_compile`) are graphs of earlier ``profile()`` calls matched: an eager
    run of the same model must not be attributed to its compiled graph's sites. ``compile_backends``
    (``compile_backends.compile_backends``) names the backends of that compiled code, for the warning
    where one is not Inductor.
    """

    def __init__(
        self,
        device: str,
        source: Any,
        backend: str,
        all_functions: bool = False,
        compiled: bool = True,
        compile_backends: tuple[str, ...] = (),
        interception: str = "mode",
    ) -> None:
        self._compiled = compiled
        self._compile_backends = compile_backends
        self._interception = interception
        self._device = device
        self._source = source
        self._backend = backend
        self._all = all_functions
        self._inductor = InductorProvenance(all_functions)
        self._graphs: GraphNodeObserver | None = None
        self._observing = False
        self._captures: list[tuple[pa.Table, TraceTables, int]] = []
        self._graph_status = "not observed: CPU activity source" if device == "cpu" else ""
        self._running = profile_running()
        self._observed = 0  # graphs captured before profile() whose replays were attributed

    def __enter__(self) -> ProvenanceCapture:
        self._running.__enter__()  # an observer's Inductor watch steps aside for this one
        with calls_unseen():  # its first use imports torch._inductor, whose import-time torch calls are ours
            self._inductor.__enter__()
        try:
            if self._device == "cuda" and not torch_profiler_active():  # else the source refuses to start
                kind = int(getattr(self._source, "correlation_kind", -1))
                self._graphs = GraphNodeObserver(kind, _native_decoder() if kind >= 0 else None)
                self._observing = kind >= 0 and self._graphs.start()
                self._graph_status = "observed" if self._observing else str(self._graphs.unavailable)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self._graphs is not None:
                self._graphs.stop()
        finally:
            try:
                self._inductor.__exit__(exc_type, exc, tb)
            finally:
                self._running.__exit__(exc_type, exc, tb)

    # -- passes --------------------------------------------------------------------------------------
    def warm_up(self, run: Callable[[], Any], iterations: int, root: nn.Module, aliases: tuple[nn.Module, ...]) -> None:
        """Run ``iterations`` passes of ``run`` traced as the recorded pass is (rows discarded), observing captures."""
        if iterations <= 0:
            return
        modules = ModuleTracker(root, aliases)
        target = self._source if self._observing else _Uncorrelated()
        tracer = make_tracer(
            self._backend, modules.module_ids(), frozenset(), target, self._all, interception=self._interception
        )
        with TraceSession(modules, tracer):
            for _ in range(iterations):
                run()
        self._keep_captures(tracer.tables(), capture=0)

    def hooks_compiled(self, tracker: ModuleTracker) -> bool:
        """Whether a graph compiled in this ``profile()``, or remembered where compiled code is involved,
        is the call of a module of ``tracker``, hooks included (:func:`compiles_module_calls`): no forward
        of it is seen, and that is no mistake."""
        hierarchy = Hierarchy.of(tracker.modules, tracker.names)
        earlier = remembered_programs() if self._compiled else []
        return compiles_module_calls(tracker, hierarchy, self._inductor.programs(), earlier)

    def compiled_unknown(self, tracker: ModuleTracker) -> str | None:
        """Why :meth:`hooks_compiled` cannot answer, where it cannot and a forward of ``tracker``'s
        hierarchy has code compiled by Dynamo (its cache holds entries for it); else None. Without
        Inductor's provenance (torch 2.8) no compiled graph names the module whose call it is, so a
        call compiled without a wrapper cannot be told from one that never ran."""
        if torch_compat.provenance_tracing_available():
            return None
        codes = {id(code): code for module in tracker.modules for code in _forward_codes(module)}
        if not any(torch_compat.dynamo_cache_entries(code) for code in codes.values()):
            return None
        hook = torch_compat.PROVENANCE_HOOK
        return f"torch {torch.__version__}'s Inductor calls its {hook} only with its debug trace on"

    def recorded(self, trace: TraceTables) -> None:
        """The recorded pass has ended: keep the graph nodes it created, with its trace."""
        self._keep_captures(trace, capture=1)

    def _keep_captures(self, trace: TraceTables, capture: int) -> None:
        if self._graphs is None or not self._observing:
            return
        rows = self._graphs.take()
        if rows.num_rows:
            self._captures.append((rows, trace, capture))

    # -- the join ------------------------------------------------------------------------------------
    def attribute(
        self, activity: pa.Table, calls: pa.Table, modules_table: pa.Table, tracker: ModuleTracker
    ) -> tuple[Attribution, dict[str, str], tuple[str, ...]]:
        """Attribute the recorded pass's compiled kernels and graph replays: the attribution, metadata, warnings."""
        hierarchy = Hierarchy.of(tracker.modules, tracker.names)
        current = self._inductor.programs()
        compiled = any(_is_compiled(module) for module, _ in tracker.module_ids())  # stand-in wrappers included
        replayed = _replayed_observations(activity)
        observed_compiled = any(o.compiled for o in replayed)
        earlier = remembered_programs() if self._compiled or compiled or observed_compiled else []
        sites, site_sources = site_tables(current, earlier, hierarchy)
        # a module compiled in place (model.compile(), torch.compile(model.__call__)) runs its hooks
        # compiled: its launches have no module
        in_place = any(
            getattr(m, "_compiled_call_impl", None) is not None for m in tracker.modules
        ) or compiles_module_calls(tracker, hierarchy, current, earlier)
        ids = {id(module): module_id for module, module_id in tracker.module_ids()}
        traced = list(self._captures)
        # graphs captured before profile() under aitune_dispatch.observe_graph_captures: captures 2, 3, ...
        traced += [(o.nodes, o.trace_for(ids), 2 + k) for k, o in enumerate(replayed)]
        captured = [
            captured_nodes(
                rows, trace.ops, trace.calls, trace.contexts, capture, sites, site_sources, modules_table, in_place
            )
            for rows, trace, capture in traced
        ]
        self._observed = len(replayed)
        nodes = pa.concat_tables(captured) if captured else schema.empty(schema.CAPTURED_NODES)
        result = attribute(activity, calls, modules_table, sites, site_sources, nodes, in_place)
        remember(current, tracker.modules, tracker.names)  # for later runs, which do not compile again
        shared = _shared_graphs(current, earlier, hierarchy, tracker, result.activity)
        return result, self._metadata(result, sites, len(current)), self._warnings(result, compiled, shared)

    def _inductor_status(self, sites: pa.Table, current: int) -> str:
        if self._inductor.unavailable:
            return f"unavailable: {self._inductor.unavailable}"
        priority = sites["priority"].to_numpy() if sites.num_rows else ()
        now = int(sum(1 for p in priority if p == CURRENT))
        earlier = len(priority) - now
        graphs = len(set(sites["program_id"].to_pylist())) - current if sites.num_rows else 0
        programs = dict(zip(sites["program_id"].to_pylist(), sites["priority"].to_pylist())) if sites.num_rows else {}
        others = sum(1 for p in programs.values() if p == ANOTHER_INSTANCE)
        other = (
            f" (of them, {others} compiled for another instance of the same modules, which Dynamo runs for this "
            "one: matched by path and type)"
            if others
            else ""
        )
        failed = f"; {self._inductor.failures} kernel call sites unreadable" if self._inductor.failures else ""
        return (
            f"observed: {now} kernel call sites of {current} graphs compiled in this profile(), {earlier} of "
            f"{graphs} remembered from earlier ones{other}{failed}"
        )

    def _metadata(self, result: Attribution, sites: pa.Table, current: int) -> dict[str, str]:
        graph_status = self._graph_status or "not observed"
        if self._graphs is not None and self._graphs.lost:
            graph_status += f"; {self._graphs.lost} graph-node events lost"
        if self._observed:
            graph_status += (
                f"; {self._observed} graphs captured before profile() attributed from their observed capture "
                "(aitune_dispatch.observe_graph_captures)"
            )
        return {
            schema.META_INDUCTOR: self._inductor_status(sites, current),
            schema.META_GRAPH_CAPTURE: graph_status,
            schema.META_COMPILED_KERNELS: str(result.compiled_rows),
            schema.META_GRAPH_KERNELS: f"{result.graph_rows} ({result.graph_rows_from_capture} attributed from their "
            "capture or Inductor provenance)",
        }

    def _warnings(self, result: Attribution, compiled: bool, shared: dict[str, list[str]]) -> tuple[str, ...]:
        messages = non_inductor_warning(self._compile_backends)
        if self._compiled and self._backend == "python" and not torch_compat.dispatch_mode_compiles():
            messages.append(
                f"torch {torch.__version__}'s Dynamo does not compile while a TorchDispatchMode is active, so "
                "under op_tracer='python' the compiled regions of this profile() ran eagerly: their kernels are "
                "attributed as eager code's, not as the compiled graph's. Trace with op_tracer='native' (built "
                "by python setup.py build_ext --inplace) to keep them compiled, or use torch 2.13 or newer, "
                "whose Dynamo compiles under it"
            )
        for own, others in shared.items():
            names = ", ".join(repr(name) for name in others)
            messages.append(
                f"the graph Dynamo compiled for {own} also runs for {names} (the same modules: Dynamo runs one "
                "graph for every instance whose guards pass), so their compiled kernels could not be told from "
                f"{own}'s and stay on the compiled module, without a functional call. Profile each of them on its "
                f"own, with module=<the model>.{others[0]}: it is then attributed by path and type"
            )
        if self._inductor.unavailable and compiled:
            messages.append(
                f"compiled kernels cannot be attributed to functional calls: {self._inductor.unavailable}; they "
                "stay on the module whose forward was compiled"
            )
        elif compiled and result.unmatched_inductor_rows and not shared:
            why = self._inductor.unavailable or "their graph was compiled before profile() could see it"
            messages.append(
                f"{result.unmatched_inductor_rows} kernels generated by Inductor could not be attributed to a "
                f"functional call ({why}); they stay on the module whose forward was compiled. Profile the model "
                "before its first compiled call (or after torch._dynamo.reset()) so that it compiles inside profile()"
            )
        unmapped = result.graph_rows - result.graph_rows_from_capture
        if unmapped:
            why = "" if self._observing else f" ({self._graph_status})"
            messages.append(
                f"{unmapped} kernels were replayed by CUDA graphs whose capture profile() did not see{why}; they "
                f"are attributed to the replaying module with op {schema.GRAPH_LAUNCH_OP} (result.graph_replays() "
                "totals them per graph). Start aitune_dispatch.observe_graph_captures(model) before the graphs are "
                "captured, or capture them inside the profiled function (warm-up passes count)"
            )
        for message in messages:
            warnings.warn(message, RuntimeWarning, stacklevel=8)  # profile()'s caller, as capture's warnings
        return tuple(messages)
