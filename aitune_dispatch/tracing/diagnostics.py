"""Warnings about work a finished trace ran but could not record, as pure functions returning messages
(``docs/design.md``, "Threads")."""

from __future__ import annotations

import numpy as np
import torch

from .contract import TraceTables
from .modules import ModuleTracker
from .wrappers import live_wrappers

PROFILING_THREAD = 0  # the thread that began the pass gets the first index


def _names(names: list[str]) -> str:
    """Each name once, in order of first use (threads started per call often share one name)."""
    return ", ".join(repr(name) for name in dict.fromkeys(names))


def thread_warnings(trace: TraceTables) -> list[str]:
    """Forwards of the hierarchy on threads other than the profiling thread, one message per kind."""
    threads = trace.threads
    forward_threads = np.asarray(trace.module_calls.column("thread").to_numpy(), dtype=np.int64)
    per_thread = np.bincount(forward_threads, minlength=len(threads))
    started = [t for t in threads if t.traced and t.index != PROFILING_THREAD and per_thread[t.index]]
    foreign = [t for t in threads if not t.traced and t.skipped_forwards]
    messages = []
    if started:
        count = int(sum(per_thread[t.index] for t in started))
        messages.append(
            f"{count} forward(s) of the profiled modules ran on thread(s) {_names([t.name for t in started])}, "
            "started by the profiled function: profile() records functional calls and aten ops on the "
            "thread that calls it only, so the functional calls and ops inside those forwards were not "
            "recorded and none of their kernels is in profiling_df (last_result.module_calls has the "
            "forwards); call the modules on the thread that calls profile() to attribute their kernels"
        )
    if foreign:
        count = sum(t.skipped_forwards for t in foreign)
        messages.append(
            f"{count} forward(s) of the profiled modules ran on thread(s) {_names([t.name for t in foreign])}, "
            "which were already running when profile() began: they are not the profiled "
            "function's and are left out of the result; do not run the profiled modules on other threads "
            "while profiling"
        )
    return messages


def never_ran_warning(
    trace: TraceTables, tracker: ModuleTracker, hooks_compiled: bool = False, compiled_unknown: str | None = None
) -> list[str]:
    """A message when no module of the hierarchy ran on any thread (:func:`thread_warnings` covers
    skipped threads), saying what to pass where a live compile wrapper was unreachable; none where
    ``hooks_compiled`` (a module's call ran compiled, hooks and all: no forward can be seen).
    ``compiled_unknown``: why it cannot be known whether compiled code was a module's call (torch 2.8's
    Inductor records no provenance), where compiled code was involved; the message then says so."""
    if trace.module_calls.num_rows or any(t.skipped_forwards for t in trace.threads if not t.traced):
        return []
    if getattr(tracker.modules[0], "_compiled_call_impl", None) is not None:
        return []  # compiled in place (root.compile()): its hooks run compiled, so no forward is seen
    root = type(tracker.modules[0]).__qualname__
    standing = {id(module) for module, _ in tracker.module_ids()}
    unseen = [w for w in live_wrappers(tracker.modules[0]) if id(w) not in standing]
    if unseen:
        position = {id(module): i for i, module in enumerate(tracker.modules)}
        wrapped = _names([tracker.names[position[id(w._orig_mod)]] or "<root>" for w in unseen])
        return [
            f"module {root} (module=) never ran as itself during the recorded pass, and {len(unseen)} "
            f"torch.compile wrapper(s) of {wrapped} exist that the profiled function could not be seen to "
            "reach (through its closure, globals, arguments or attributes): a compiled module runs inside "
            "its wrapper's forward, without forward hooks of its own, so profiling_df is empty; pass "
            "module= the wrapper (compiled = torch.compile(model); module=compiled), or profile the "
            "wrapper itself"
        ]
    if hooks_compiled:
        return []  # its call ran compiled, hooks and all (torch.compile(model.__call__)): no forward is seen
    if compiled_unknown:
        return [
            f"module {root} (module=) never ran as itself during the recorded pass, and Dynamo holds code "
            "compiled from a forward of its hierarchy: a module call compiled without a torch.compile wrapper "
            "(torch.compile(model.__call__), as HF's generate() compiles its decoding step) runs its forward "
            "hooks as no-ops, so no forward is seen, and whether that is what happened cannot be told here "
            f"({compiled_unknown}), so its kernels are in no module and profiling_df is empty "
            "(last_result.unattributed() lists them). Use torch 2.13 or newer, whose Inductor says where each "
            "kernel came from, or compile through a wrapper created before profile() (compiled = "
            "torch.compile(model)) and pass module=compiled"
        ]
    return [
        f"module {root} (module=) never ran during the recorded pass: no forward of it or of its "
        "submodules was seen, so profiling_df is empty; pass module= the nn.Module that the profiled "
        "function calls (a module called as module.forward(...) bypasses forward hooks: call module(...)); "
        "a module the function runs compiled is seen through its torch.compile wrapper, where that "
        "wrapper exists before profile() begins: create it once, outside the profiled function (compiled "
        "= torch.compile(model)), or pass module= the wrapper"
    ]


def scripted_warning(tracker: ModuleTracker) -> list[str]:
    """A message naming the outermost TorchScript modules of the hierarchy, which run as opaque modules."""
    scripted = [isinstance(module, torch.jit.ScriptModule) for module in tracker.modules]
    outermost = [
        f"{tracker.names[i] or '<root>'} ({getattr(tracker.modules[i], 'original_name', '?')})"
        for i, is_scripted in enumerate(scripted)
        if is_scripted and (tracker.parents[i] < 0 or not scripted[tracker.parents[i]])
    ]
    if not outermost:
        return []
    return [
        f"TorchScript module(s) {', '.join(outermost)} run as opaque modules: TorchScript runs no Python, so "
        "the functional calls and submodules inside are not seen; their ops and kernels are attributed "
        "to the scripted module, without a functional call, and are not in profiling_df (see "
        "last_result.unattributed()); profile the eager module (before torch.jit.script / "
        "torch.jit.trace) to see its functional calls"
    ]


def trace_warnings(
    trace: TraceTables,
    tracker: ModuleTracker,
    *,
    called: bool = True,
    hooks_compiled: bool = False,
    compiled_unknown: str | None = None,
) -> list[str]:
    """Every message for one finished pass, in a stable order; ``called`` False for empty ``data``;
    ``hooks_compiled`` and ``compiled_unknown`` as :func:`never_ran_warning` takes them."""
    never_ran = never_ran_warning(trace, tracker, hooks_compiled, compiled_unknown) if called else []
    return [*scripted_warning(tracker), *thread_warnings(trace), *never_ran]
