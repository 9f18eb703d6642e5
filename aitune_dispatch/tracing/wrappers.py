"""torch.compile wrappers that stand for modules of the profiled hierarchy when a pipeline calls them.

A pipeline that calls ``compiled = torch.compile(model)`` runs ``model`` inside ``compiled``'s forward.
For a built-in container (``nn.Sequential``) Dynamo compiles the call itself, hooks included, so
``model``'s forward hooks never run and only the wrapper's forward is seen; profiled with
``module=model``, nothing of ``model`` seemed to run. Each wrapper of a module of the hierarchy is
therefore made to stand for that module (``ModuleTracker``'s aliases).

Wrappers are looked for in what the profiled callable can reach without running any code: its
closure, the globals its code names, its defaults, ``self`` of a bound method, the parts of a
``functools.partial``, the attributes of an object, and the items of lists, tuples and dicts found
there, a few levels deep; every module reached is searched to its leaves. That costs microseconds.
Finding every live wrapper instead takes one pass of the garbage collector over all objects
(about 30 ms for 400,000): :func:`live_wrappers` does, for the "never ran" warning only.
"""

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
    """The module a wrapper wraps (``_orig_mod``), read from its dict: no ``__getattr__`` runs; None otherwise."""
    if type(candidate) not in classes:
        return None
    return vars(candidate).get("_modules", {}).get("_orig_mod")


def _code_names(code: types.CodeType) -> Iterator[str]:
    """The global names a code object and the code objects nested in it (lambdas, comprehensions) use."""
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _code_names(constant)


def _references(value: Any) -> list[Any]:
    """What ``value`` refers to that a call may use, read without running its code.

    Only ``type()`` is asked (``isinstance`` may read a proxy's ``__class__``) and attributes are read
    from the instance dict (no property, no ``__getattr__``).
    """
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
    # a callable object's __call__, as its class defines it: the globals it names
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


def reachable_wrappers(function: Any, root: nn.Module) -> tuple[nn.Module, ...]:
    """The torch.compile wrappers of ``root``'s modules that ``function`` can reach (see the module docstring).

    Parameters
    ----------
    function:
        The profiled callable (a pipeline function, a bound method, a callable object or module).
    root:
        The profiled hierarchy's root (``module=``).

    Returns
    -------
    tuple[nn.Module, ...]
        Each ``OptimizedModule`` whose ``_orig_mod`` is a module of the hierarchy and that is not one, once.
    """
    classes = _optimized_classes()
    if not classes:
        return ()
    members = {id(module) for module in root.modules()}
    found: dict[int, nn.Module] = {}
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
            if issubclass(type(value), nn.Module):
                for module in value.modules():  # a module's tree: every wrapper among its submodules
                    if id(_wrapped(module, classes)) in members and id(module) not in members:
                        found[id(module)] = module
                continue
            following.extend(_references(value))
        level = following
    return tuple(found.values())


def live_wrappers(root: nn.Module) -> tuple[nn.Module, ...]:
    """Every live torch.compile wrapper of ``root``'s modules outside its hierarchy, wherever it is kept.

    The wrappers are the objects that refer to their class (an instance's type is one of its
    references): one pass of the garbage collector over every object it tracks.
    """
    classes = _optimized_classes()
    if not classes:
        return ()
    members = {id(module) for module in root.modules()}
    return tuple(
        candidate
        for candidate in gc.get_referrers(*classes)
        if id(_wrapped(candidate, classes)) in members and id(candidate) not in members
    )
