"""What a finished trace says the user must be told: work that ran but could not be recorded.

Pure functions over the recorder and the module tracker after the pass; each returns messages
(the profiler warns them and keeps them in ``ProfileResult.warnings``), never raises.
"""

from __future__ import annotations

import torch

from .modules import ModuleTracker
from .recorder import TraceRecorder


def never_ran_warning(recorder: TraceRecorder, tracker: ModuleTracker) -> list[str]:
    """A message when no module of the hierarchy ran during the pass."""
    if len(recorder.mcall_module):
        return []
    root = type(tracker.modules[0]).__qualname__
    return [
        f"module {root} (module=) never ran during the recorded pass: no forward of it or of its "
        "submodules was seen, so profiling_df is empty; pass module= the nn.Module that the profiled "
        "function calls (a module called as module.forward(...) bypasses forward hooks: call module(...))"
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


def trace_warnings(recorder: TraceRecorder, tracker: ModuleTracker) -> list[str]:
    """Every message for one finished pass, in a stable order."""
    return [*scripted_warning(tracker), *never_ran_warning(recorder, tracker)]
