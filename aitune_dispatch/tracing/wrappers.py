"""Finds the torch.compile wrappers of the profiled hierarchy's modules that a pipeline can reach, so
each stands for its module; the garbage-collector search is kept for the "never ran" warning
(``docs/design.md``, "torch.compile and CUDA graphs")."""

from __future__ import annotations

import functools
import gc
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

DEPTH = 3  # references followed from the profiled callable (global -> object attribute -> list item)
MOST = 10_000  # objects looked at, at most


def _optimized_classes() -> tuple[type, ...]:
    """``OptimizedModule`` and its subclasses; none before Dynamo is loaded (no wrapper exists then)."""
    optimized = getattr(sys.modules.get("torch._dynamo.eval_frame"), "OptimizedModule", None)
    if optimized is None:
        return ()
    classes = [optimized]
    for klass in classes:
        classes.extend(klass.__subclasses__())
    return tuple(classes)


def _wrapped(candidate: Any, classes: tuple[type, ...]) -> Any:
    """The wrapper's ``_orig_mod``, read from its dict so no ``__getattr__`` runs; else None."""
    if type(candidate) not in classes:
        return None
    return vars(candidate).get("_modules", {}).get("_orig_mod")


def _code_names(code: types.CodeType) -> Iterator[str]:
    """The global names a code object and its nested code objects use."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _code_names(constant)


def _references(value: Any) -> list[Any]:
    """What ``value`` refers to that a call may use, read without running its code (``type()`` only:
    ``isinstance`` may read a proxy's ``__class__``; the instance dict, no property)."""
    kind = type(value)
    if kind is types.MethodType:
        return [value.__self__, value.__func__]
    if kind is types.FunctionType:
        cells = [cell.cell_contents for cell in value.__closure__ or () if _filled(cell)]
        scope = value.__globals__
        named = [scope[name] for name in dict.fromkeys(_code_names(value.__code__)) if name in scope]
        return [*cells, *named, *(value.__defaults__ or ()), *(value.__kwdefaults__ or {}).values()]
    if kind is functools.partial:
        return [value.func, *value.args, *value.keywords.values()]
    if kind in (list, tuple, set, frozenset):
        return list(value)
    if kind is dict:
        return list(value.values())
    if issubclass(kind, (type, types.ModuleType, str, bytes, int, float, complex, bool, torch.Tensor)):
        return []  # a class, a Python module, a scalar or a tensor: not where a compiled model is kept
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except Exception:  # noqa: BLE001 - no instance dict (slots, a C type): nothing to follow
        attributes = None
    call = next((vars(klass)["__call__"] for klass in kind.__mro__ if "__call__" in vars(klass)), None)
    return [
        *(attributes.values() if type(attributes) is dict else ()),
        *((call,) if type(call) is types.FunctionType else ()),
    ]


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def _reachable(function: Any) -> Iterator[Any]:
    """What ``function`` can reach without running code, ``DEPTH`` references deep, each once; modules
    are yielded and not followed (their trees are the caller's to walk)."""
    seen: set[int] = set()
    level = [function]
    if issubclass(type(function), nn.Module):  # a pipeline module: what its forward names, too
        level.append(getattr(type(function), "forward", None))
    for _ in range(DEPTH + 1):
        following: list[Any] = []
        for value in level:
            if id(value) in seen or len(seen) >= MOST:
                continue
            seen.add(id(value))
            yield value
            if not issubclass(type(value), nn.Module):
                following.extend(_references(value))
        level = following


def reachable_wrappers(function: Any, root: nn.Module) -> tuple[nn.Module, ...]:
    """Each torch.compile wrapper of ``root``'s modules, outside the hierarchy, that ``function`` can reach
    without running code, once."""
    classes = _optimized_classes()
    if not classes:
        return ()
    members = {id(module) for module in root.modules()}
    found: dict[int, nn.Module] = {}
    for value in _reachable(function):
        if issubclass(type(value), nn.Module):
            for module in value.modules():  # a module's tree: every wrapper among its submodules
                if id(_wrapped(module, classes)) in members and id(module) not in members:
                    found[id(module)] = module
    return tuple(found.values())


def _compiles_a_call_of(value: Any, members: set[int]) -> bool:
    """Whether ``value`` is ``torch.compile`` of a method bound to one of ``members`` (by ``id``), as
    HF's ``generate()`` keeps ``torch.compile(model.__call__)`` in ``model._compiled_call``."""
    if type(value) is not types.FunctionType:
        return False
    original = value.__dict__.get("_torchdynamo_orig_callable")
    return type(original) is types.MethodType and id(original.__self__) in members


def reaches_compiled_calls(function: Any, root: nn.Module) -> bool:
    """Whether ``function``, or a module of ``root``'s hierarchy in its instance dict, holds ``torch.compile``
    of a method of one of those modules (a module call compiled without a wrapper), read without running code."""
    if "torch._dynamo" not in sys.modules:
        return False  # nothing was compiled in this process
    modules = list(root.modules())
    members = {id(module) for module in modules}
    held = (value for module in modules for value in vars(module).values())
    return any(_compiles_a_call_of(value, members) for value in (*_reachable(function), *held))


def live_wrappers(root: nn.Module) -> tuple[nn.Module, ...]:
    """Every live torch.compile wrapper of ``root``'s modules outside its hierarchy: one garbage
    collector pass, as an instance refers to its class."""
    classes = _optimized_classes()
    if not classes:
        return ()
    members = {id(module) for module in root.modules()}
    return tuple(
        candidate
        for candidate in gc.get_referrers(*classes)
        if id(_wrapped(candidate, classes)) in members and id(candidate) not in members
    )
