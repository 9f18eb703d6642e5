"""Copies of Python functions whose ``has_torch_function`` gates ignore torch-function *modes*.

Two problems share this tool (DESIGN.md facts 5 and 6):

* inside ``__torch_function__`` our mode is popped, so the functional calls nested in a
  Python-level functional are invisible; running a gate-free copy of the functional with the mode
  re-armed makes them visible without recursing into the handler again;
* an active mode makes ``has_torch_function`` true, which switches modules such as
  ``nn.MultiheadAttention`` off their fast path; a copy of their ``forward`` whose gate ignores
  modes keeps them on the path they take without the profiler.

The gates stay honest for tensor subclasses and other objects that define ``__torch_function__``:
only the contribution of modes is removed.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

import torch

_disabled_impl = torch._C._disabled_torch_function_impl
_Tensor = torch.Tensor
_GATE_NAMES = ("has_torch_function", "has_torch_function_unary", "has_torch_function_variadic")


def _overrides(obj: Any) -> bool:
    cls = type(obj)
    if cls is _Tensor:
        return False
    impl = getattr(cls, "__torch_function__", None)
    return impl is not None and impl is not _disabled_impl and getattr(impl, "__func__", None) is not _disabled_impl


def has_torch_function(relevant_args: Iterable[Any]) -> bool:
    """``torch.overrides.has_torch_function`` as it would answer with no mode active."""
    return any(_overrides(arg) for arg in relevant_args)


def has_torch_function_unary(arg: Any) -> bool:
    """``has_torch_function_unary`` as it would answer with no mode active."""
    return _overrides(arg)


def has_torch_function_variadic(*args: Any) -> bool:
    """``has_torch_function_variadic`` as it would answer with no mode active."""
    return any(_overrides(arg) for arg in args)


_HONEST = {
    "has_torch_function": has_torch_function,
    "has_torch_function_unary": has_torch_function_unary,
    "has_torch_function_variadic": has_torch_function_variadic,
}


class _OverridesView(types.ModuleType):
    """``torch.overrides`` with honest, mode-blind gates."""

    def __init__(self) -> None:
        super().__init__("torch.overrides")
        self.__dict__.update(_HONEST)

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.overrides, name)


class _TorchView(types.ModuleType):
    """``torch`` whose ``overrides`` attribute is :class:`_OverridesView`."""

    def __init__(self) -> None:
        super().__init__("torch")
        self.overrides = _OverridesView()

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)


_TORCH_VIEW = _TorchView()


def reads_gate(function: Callable[..., Any]) -> bool:
    """True when ``function``'s own code consults a ``has_torch_function`` gate."""
    code = getattr(function, "__code__", None)
    return code is not None and any(name in code.co_names for name in _GATE_NAMES)


class GateFreeCopies:
    """Builds and caches gate-free copies of functions, sharing one patched globals per module."""

    def __init__(self) -> None:
        self._globals: dict[tuple[int, bool], dict[str, Any]] = {}
        self._copies: dict[Callable[..., Any], Callable[..., Any]] = {}

    def _patched_globals(self, original: dict[str, Any], view_torch: bool) -> dict[str, Any]:
        key = (id(original), view_torch)
        found = self._globals.get(key)
        if found is None:
            found = dict(original)
            for name, gate in _HONEST.items():
                if name in found:
                    found[name] = gate
            if view_torch and found.get("torch") is torch:
                found["torch"] = _TORCH_VIEW
            self._globals[key] = found
        return found

    def copy(self, function: types.FunctionType) -> types.FunctionType:
        """A copy of ``function`` that reads honest, mode-blind gates."""
        found = self._copies.get(function)
        if found is None:
            found = types.FunctionType(
                function.__code__,
                # only code that reads ``torch.overrides.<gate>`` pays for the torch view
                self._patched_globals(function.__globals__, "overrides" in function.__code__.co_names),
                function.__name__,
                function.__defaults__,
                function.__closure__,
            )
            found.__kwdefaults__ = function.__kwdefaults__
            found.__dict__.update(function.__dict__)
            found.__wrapped_original__ = function  # type: ignore[attr-defined]
            self._copies[function] = found
        return found
