"""Module-hierarchy tracking through global forward hooks that react only to the profiled hierarchy,
with the recursion limit raised by the frames they add (``docs/design.md``, "Fast paths and the
has_torch_function gate"; fixed hook keys: "torch.compile and CUDA graphs")."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import torch
from torch import nn
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from .. import encoded, schema

_is_compiling = torch.compiler.is_compiling


def _ignore(module: nn.Module) -> None:
    """What the hooks report to while no pass is traced."""


# the same two hooks in every profile(): Dynamo guards on them, so only their targets are swapped
_entered: Callable[[nn.Module], object] = _ignore
_exited: Callable[[nn.Module], object] = _ignore
_installed: list[object] = []  # the ModuleTracker whose hooks are installed


# Dynamo guards on the hook dicts' keys too, which grow per registration (negative: handle ids never are)
_PRE_HOOK_KEY = -0x41D15_0001
_HOOK_KEY = -0x41D15_0002


def _stable_key(handle: Any, key: int) -> Any:
    """Move a just-registered global hook to ``key`` in its dicts; ``handle.remove()`` still works."""
    refs = (getattr(handle, "hooks_dict_ref", None), *getattr(handle, "extra_dict_ref", ()))
    dicts = [d for d in (ref() if callable(ref) else None for ref in refs) if d is not None]
    if not dicts or handle.id not in dicts[0] or any(key in d for d in dicts):
        return handle  # an unfamiliar torch, or the key is taken: torch's key (recompiles, still correct)
    for d in dicts:
        if handle.id in d:
            d[key] = d.pop(handle.id)
    handle.id = key
    return handle


# checked first: while Dynamo traces a compiled region the hooks are no-ops (no graph breaks)
def _pre_hook(module: nn.Module, args: Any) -> None:
    if not _is_compiling():
        _entered(module)


def _post_hook(module: nn.Module, args: Any, output: Any) -> None:
    if not _is_compiling():
        _exited(module)


def _frames_of_ours() -> int:
    """How many frames of aitune_dispatch's are on this thread's stack."""
    package = __name__.partition(".")[0]
    frame, count = sys._getframe(1), 0
    while frame is not None:
        count += frame.f_globals.get("__name__", "").partition(".")[0] == package
        frame = frame.f_back
    return count


class _RecursionAllowance:
    """The recursion limit raised by ``extra`` frames until :meth:`remove`."""

    def __init__(self, extra: int) -> None:
        self._previous = sys.getrecursionlimit()
        self._raised = self._previous + extra
        sys.setrecursionlimit(self._raised)

    def remove(self) -> None:
        """Put the limit back, where it is still ours: a limit the profiled code set stays."""
        if sys.getrecursionlimit() == self._raised:
            sys.setrecursionlimit(self._previous)


def _nesting(parents: list[int]) -> int:
    """The hierarchy's depth (1 for a root without children)."""
    depths: list[int] = []
    for parent in parents:  # a parent comes before its children (named_modules order)
        depths.append(1 if parent == schema.NO_MODULE else depths[parent] + 1)
    return max(depths, default=0)


class ModuleTracker:
    """Names the modules of a hierarchy and tracks which one encloses each op, per thread."""

    def __init__(self, root: nn.Module, aliases: tuple[nn.Module, ...] = ()) -> None:
        self.modules: list[nn.Module] = []
        self.names: list[str] = []
        self.parents: list[int] = []
        ids_by_name: dict[str, int] = {}
        ids: dict[int, int] = {}
        for name, module in root.named_modules():
            ids_by_name[name] = ids[id(module)] = len(self.modules)
            self.modules.append(module)
            self.names.append(name)
            parent = ids_by_name[name.rpartition(".")[0]] if name else schema.NO_MODULE
            self.parents.append(parent)
        self._aliases: list[tuple[nn.Module, int]] = []
        for alias in aliases:
            original = getattr(alias, "_orig_mod", None)
            if id(original) in ids:
                self._aliases.append((alias, ids[id(original)]))
        self._handles: list[Any] = []
        self._allowance: _RecursionAllowance | None = None

    def module_ids(self) -> list[tuple[nn.Module, int]]:
        """``(module, module_id)`` for every module of the hierarchy and every wrapper standing for one."""
        pairs = [(module, module_id) for module_id, module in enumerate(self.modules)]
        return pairs + [(alias, module_id) for alias, module_id in self._aliases]

    def install(self, entered: Callable[[nn.Module], object], exited: Callable[[nn.Module], object]) -> None:
        """Install the two global forward hooks, reporting forwards to ``entered`` / ``exited``."""
        global _entered, _exited
        if _installed:
            raise RuntimeError("another ModuleTracker is installed; profile one thing at a time")
        try:
            _installed.append(self)
            _entered, _exited = entered, exited
            self._handles.append(_stable_key(register_module_forward_pre_hook(_pre_hook), _PRE_HOOK_KEY))
            self._handles.append(_stable_key(register_module_forward_hook(_post_hook, always_call=True), _HOOK_KEY))
            self._allowance = _RecursionAllowance(_nesting(self.parents) + _frames_of_ours())
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Remove both hooks; safe to call twice."""
        global _entered, _exited
        try:
            while self._handles:
                self._handles.pop().remove()
            if self._allowance is not None:
                allowance, self._allowance = self._allowance, None
                allowance.remove()  # can raise RecursionError where profile() itself runs that deep
        finally:
            if self in _installed:
                _installed.remove(self)
                _entered = _exited = _ignore

    def table(self) -> pa.Table:
        """The hierarchy as an Arrow table of schema :data:`schema.MODULES`."""
        return pa.table(
            {
                "module_id": pa.array(range(len(self.modules)), pa.int64()),
                "module_name": encoded.of_values(self.names),
                "module_type": encoded.of_values([type(m).__qualname__ for m in self.modules]),
                "parent_module_id": pa.array(self.parents, pa.int64()),
            },
            schema=schema.MODULES,
        )

