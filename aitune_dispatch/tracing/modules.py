"""Module-hierarchy tracking through ``nn.Module.__call__``, swapped for a wrapper that reports each
call to the tracer while a pass is traced and reacts only to the profiled hierarchy, with the
recursion limit raised by the frames it adds (``docs/design.md``, "Module tracking")."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import CodeType
from typing import Any

import pyarrow as pa
import torch
from torch import nn

from .. import encoded, schema

_is_compiling = torch.compiler.is_compiling


def _ignore(module: nn.Module) -> None:
    """What the wrapper reports to while no pass is traced."""


_entered: Callable[[nn.Module], object] = _ignore
_exited: Callable[[nn.Module], object] = _ignore
_installed: list[object] = []  # the ModuleTracker whose wrapper is installed

# what ``nn.Module.__call__`` held before the wrapper went in: the same function in every profile()
# unless something else replaced it (Dynamo guards on the globals a traced call reads)
_call_through: Callable[..., Any] = nn.Module.__call__


def _traced_call(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``nn.Module.__call__`` while tracking is installed: the call as bare, between enter and exit.

    While Dynamo traces (``is_compiling``, checked first: no graph break) and for a module compiled in
    place (``module.compile()``: its call runs compiled) nothing is reported, as global forward hooks
    would run traced then. The module's own hooks run inside its scope."""
    if _is_compiling() or self._compiled_call_impl is not None:
        return _call_through(self, *args, **kwargs)
    _entered(self)
    try:
        return _call_through(self, *args, **kwargs)
    finally:
        _exited(self)


# the frame Dynamo starts at for ``torch.compile(module.__call__)`` made while the wrapper is installed (HF's
# generate() compiling its decoding step inside the profiled function): it stands for nn.Module's call
TRACKED_CALL_CODE: CodeType = _traced_call.__code__


def _reaches_ours(call: Any) -> bool:
    """Whether ``call`` is the wrapper or calls it (through its closure, the globals it names or its
    ``__wrapped__`` chain)."""
    seen: list[Any] = []
    while call is not None and not any(call is s for s in seen) and len(seen) < 16:
        if call is _traced_call:
            return True
        seen.append(call)
        code = getattr(call, "__code__", None)
        if code is not None:
            cells = []
            for cell in getattr(call, "__closure__", None) or ():
                try:
                    cells.append(cell.cell_contents)
                except ValueError:  # an empty cell
                    continue
            named = [getattr(call, "__globals__", {}).get(name) for name in code.co_names]
            if any(target is _traced_call for target in cells + named):
                return True
        call = getattr(call, "__wrapped__", None)
    return False


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
        self._swapped = False
        self._allowance: _RecursionAllowance | None = None

    def module_ids(self) -> list[tuple[nn.Module, int]]:
        """``(module, module_id)`` for every module of the hierarchy and every wrapper standing for one."""
        pairs = [(module, module_id) for module_id, module in enumerate(self.modules)]
        return pairs + [(alias, module_id) for alias, module_id in self._aliases]

    def install(self, entered: Callable[[nn.Module], object], exited: Callable[[nn.Module], object]) -> None:
        """Swap ``nn.Module.__call__`` for the wrapper, reporting calls to ``entered`` / ``exited``."""
        global _entered, _exited, _call_through
        if _installed:
            raise RuntimeError("another ModuleTracker is installed; profile one thing at a time")
        try:
            _installed.append(self)
            _entered, _exited = entered, exited
            current = nn.Module.__dict__["__call__"]
            # a replacement that calls ours (put there during an earlier pass) already reports through it:
            # wrapping it would call it again from inside ours, without end
            if not _reaches_ours(current):
                _call_through = current
                nn.Module.__call__ = _traced_call  # type: ignore[method-assign]
                self._swapped = True
            self._allowance = _RecursionAllowance(_nesting(self.parents) + _frames_of_ours())
        except BaseException:
            self.remove()
            raise

    def remove(self) -> None:
        """Put ``nn.Module.__call__`` back (unless something replaced the wrapper meanwhile: that stays, and
        the wrapper it calls reports nothing); safe to call twice."""
        global _entered, _exited
        try:
            if self._swapped:
                self._swapped = False
                if nn.Module.__dict__.get("__call__") is _traced_call:
                    nn.Module.__call__ = _call_through  # type: ignore[method-assign]
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

