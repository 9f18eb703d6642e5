"""Module-hierarchy tracking: global forward hooks that only react to the profiled hierarchy.

Global hooks (``register_module_forward_*_hook``) rather than per-module ones, because some fast
paths (``nn.TransformerEncoderLayer``) are switched off by hooks found on the module itself.

Also keeps modules whose fast path is gated on ``has_torch_function`` on the path they take
without the profiler (DESIGN.md fact 6), by binding a gate-free copy of their ``forward`` on the
instance for the duration of the pass. Everything is undone by :meth:`ModuleTracker.remove`.
"""

from __future__ import annotations

import types
from typing import Any

import pyarrow as pa
import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from .. import schema
from .gates import GateFreeCopies, reads_gate
from .recorder import TraceRecorder

_MISSING = object()


def _is_compiling() -> bool:
    return bool(torch.compiler.is_compiling())


class ModuleTracker:
    """Names the modules of a hierarchy and tracks which one encloses each op, per thread."""

    def __init__(self, root: nn.Module, aliases: tuple[nn.Module, ...] = ()) -> None:
        self.modules: list[nn.Module] = []
        self.names: list[str] = []
        self.parents: list[int] = []
        ids_by_name: dict[str, int] = {}
        self._ids: dict[int, int] = {}
        for name, module in root.named_modules():
            ids_by_name[name] = self._ids[id(module)] = len(self.modules)
            self.modules.append(module)
            self.names.append(name)
            parent = ids_by_name[name.rpartition(".")[0]] if name else schema.NO_MODULE
            self.parents.append(parent)
        # wrappers that stand for a module of the hierarchy (torch.compile's OptimizedModule)
        for alias in aliases:
            original = getattr(alias, "_orig_mod", None)
            if id(original) in self._ids:
                self._ids[id(alias)] = self._ids[id(original)]
        self._handles: list[Any] = []
        self._forwards: list[tuple[nn.Module, Any]] = []

    def install(self, recorder: TraceRecorder, copies: GateFreeCopies) -> None:
        """Install the global hooks and bind gate-free forwards where a fast path reads the gate."""
        ids = self._ids
        compiling = _is_compiling

        # while Dynamo traces a compiled region the hooks are no-ops: they add no graph breaks
        def pre_hook(module: nn.Module, args: Any) -> None:
            module_id = ids.get(id(module))
            if module_id is not None and not compiling():
                recorder.enter_module(module_id)

        def post_hook(module: nn.Module, args: Any, output: Any) -> None:
            module_id = ids.get(id(module))
            if module_id is not None and not compiling():
                recorder.exit_module(module_id)

        try:
            self._handles.append(register_module_forward_pre_hook(pre_hook))
            self._handles.append(register_module_forward_hook(post_hook, always_call=True))
            for module in self.modules:
                forward = type(module).forward
                if isinstance(forward, types.FunctionType) and reads_gate(forward):
                    self._forwards.append((module, module.__dict__.get("forward", _MISSING)))
                    module.__dict__["forward"] = types.MethodType(copies.copy(forward), module)
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove every hook and bound forward; safe to call twice."""
        while self._handles:
            self._handles.pop().remove()
        while self._forwards:
            module, previous = self._forwards.pop()
            if previous is _MISSING:
                module.__dict__.pop("forward", None)
            else:
                module.__dict__["forward"] = previous

    def table(self) -> pa.Table:
        """The hierarchy as an Arrow table of schema :data:`schema.MODULES`."""
        return pa.table(
            {
                "module_id": pa.array(range(len(self.modules)), pa.int64()),
                "module_name": pa.array(self.names, pa.string()),
                "module_type": pa.array([type(m).__qualname__ for m in self.modules], pa.string()),
                "parent_module_id": pa.array(self.parents, pa.int64()),
            },
            schema=schema.MODULES,
        )

