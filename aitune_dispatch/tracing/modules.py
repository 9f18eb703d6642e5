"""Module-hierarchy tracking through global forward hooks that react only to the profiled hierarchy,
with the recursion limit raised by the frames they add (``docs/design.md``, "Fast paths and the
has_torch_function gate"; fixed hook keys: "torch.compile and CUDA graphs")."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
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

    def raise_to(self, extra: int) -> None:
        """Raise the limit to ``extra`` frames above the previous one, where it is still ours and lower."""
        if sys.getrecursionlimit() == self._raised and self._previous + extra > self._raised:
            self._raised = self._previous + extra
            sys.setrecursionlimit(self._raised)

    def remove(self) -> None:
        """Put the limit back, where it is still ours: a limit the profiled code set stays."""
        if sys.getrecursionlimit() == self._raised:
            sys.setrecursionlimit(self._previous)


def _nesting(parents: list[int]) -> int:
    """The hierarchy's depth (1 for a root without children); a discovered root may come after the
    modules it adopted, so each depth is found by walking up."""
    depths: dict[int, int] = {}
    for start in range(len(parents)):
        chain, node = [], start
        while node != schema.NO_MODULE and node not in depths:
            chain.append(node)
            node = parents[node]
        base = 0 if node == schema.NO_MODULE else depths[node]
        for offset, item in enumerate(reversed(chain), start=1):
            depths[item] = base + offset
    return max(depths.values(), default=0)


Added = Callable[[Sequence[tuple[nn.Module, int]]], object]


def _ignore_added(pairs: Sequence[tuple[nn.Module, int]]) -> None:
    """Where no tracer is told of modules discovered during the pass."""


class ModuleTracker:
    """Names the modules of a hierarchy and tracks which one encloses each op, per thread."""

    def __init__(self, root: nn.Module | None, aliases: tuple[nn.Module, ...] = ()) -> None:
        """``root`` None discovers the roots during the pass (:meth:`install`; ``docs/design.md``,
        "Roots discovered during the pass")."""
        self.modules: list[nn.Module] = []
        self.names: list[str] = []
        self.parents: list[int] = []
        self.discovering = root is None
        self._roots: list[int] = []  # discovered roots, in order of first call
        self._taken: set[str] = set()  # every name a discovered root was given (never given again)
        self._lock = threading.Lock()
        self._local = threading.local()  # per thread: the known modules whose forwards are running
        self._ids: dict[int, int] = {}  # id(module) -> module_id
        ids = self._ids
        if root is not None:
            self._add_tree(root, "")
        self._aliases: list[tuple[nn.Module, int]] = []
        for alias in aliases:
            original = getattr(alias, "_orig_mod", None)
            if id(original) in ids:
                self._aliases.append((alias, ids[id(original)]))
        self._handles: list[Any] = []
        self._allowance: _RecursionAllowance | None = None
        self._added: Added = _ignore_added

    def _add_tree(self, root: nn.Module, root_name: str) -> None:
        """Give every module of ``root``'s hierarchy not yet known an id (in ``named_modules`` order),
        named ``root_name`` + its path; a known one (an earlier root) is adopted: it takes its path here."""
        ids = self._ids
        ids_by_name: dict[str, int] = {}
        for path, module in root.named_modules():
            parent = ids_by_name[path.rpartition(".")[0]] if path else schema.NO_MODULE
            name = f"{root_name}.{path}" if root_name and path else (path or root_name)
            module_id = ids.get(id(module))
            if module_id is None:
                module_id = ids[id(module)] = len(self.modules)
                self.modules.append(module)
                self.names.append(name)
                self.parents.append(parent)
            elif path:  # an earlier root (or its submodule) called before this one: now below it
                self._adopt(module_id, name, parent)
            ids_by_name[path] = module_id

    def _adopt(self, module_id: int, name: str, parent: int) -> None:
        """``module_id``, known from an earlier root, is ``name`` below ``parent`` in a later root's tree."""
        if module_id in self._roots:
            self._roots.remove(module_id)
        self.names[module_id], self.parents[module_id] = name, parent

    def _root_name(self, module: nn.Module) -> str:
        """The class's name, then ``_1``, ``_2``... for further roots of it, in order of first call."""
        base = type(module).__name__
        name, number = base, 0
        while name in self._taken:
            number += 1
            name = f"{base}_{number}"
        self._taken.add(name)
        return name

    def _discover(self, module: nn.Module) -> None:
        """``module``, called outside every root, becomes a root; the tracer learns its new modules."""
        with self._lock:
            if id(module) in self._ids:
                return  # another thread discovered it first
            original = getattr(module, "_orig_mod", None)  # a torch.compile wrapper stands for its module
            target = original if isinstance(original, nn.Module) else module
            known = len(self.modules)
            if id(target) not in self._ids:
                self._add_tree(target, self._root_name(target))
                self._roots.append(self._ids[id(target)])
            pairs = [(m, i) for i, m in enumerate(self.modules[known:], start=known)]
            if target is not module:
                self._ids[id(module)] = self._ids[id(target)]
                self._aliases.append((module, self._ids[id(target)]))
                pairs.append((module, self._ids[id(target)]))
            self._added(pairs)
            if self._allowance is not None:
                self._allowance.raise_to(_nesting(self.parents) + _frames_of_ours())

    def _discovering_hooks(
        self, entered: Callable[[nn.Module], object], exited: Callable[[nn.Module], object]
    ) -> tuple[Callable[[nn.Module], object], Callable[[nn.Module], object]]:
        """``entered`` / ``exited`` with root discovery before them: a module not yet known, called while
        no forward of a known module runs on this thread, becomes a root."""
        local, ids = self._local, self._ids

        def discovering_entered(module: nn.Module) -> None:
            running = getattr(local, "running", None)
            if running is None:
                running = local.running = []
            if not running and id(module) not in ids:
                self._discover(module)
            module_id = ids.get(id(module))
            if module_id is not None:
                running.append(module_id)
            entered(module)

        def discovering_exited(module: nn.Module) -> None:
            exited(module)
            running = getattr(local, "running", None)
            if running and running[-1] == ids.get(id(module)):
                running.pop()

        return discovering_entered, discovering_exited

    def module_ids(self) -> list[tuple[nn.Module, int]]:
        """``(module, module_id)`` for every module of the hierarchy and every wrapper standing for one."""
        pairs = [(module, module_id) for module_id, module in enumerate(self.modules)]
        return pairs + [(alias, module_id) for alias, module_id in self._aliases]

    def install(
        self,
        entered: Callable[[nn.Module], object],
        exited: Callable[[nn.Module], object],
        added: Added | None = None,
    ) -> None:
        """Install the two global forward hooks, reporting forwards to ``entered`` / ``exited``; while
        discovering, ``added`` is told of each new root's ``(module, module_id)`` pairs before its first
        forward is reported."""
        global _entered, _exited
        if _installed:
            raise RuntimeError("another ModuleTracker is installed; profile one thing at a time")
        try:
            _installed.append(self)
            if self.discovering:
                if added is None:
                    raise ValueError("a ModuleTracker without a root tells the tracer of its roots: pass added=")
                self._added = added
                entered, exited = self._discovering_hooks(entered, exited)
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
            self._added = _ignore_added
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

