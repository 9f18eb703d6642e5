"""``has_torch_function`` gates that do not see our mode: gate-free copies of functionals, so nested
functional calls reach the mode (``docs/design.md``, "Nested functional calls"), and mode-blind gates
in ``torch.overrides``, so forwards keep their fast path (``docs/design.md``, "Fast paths and the
has_torch_function gate")."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

import torch

from ..interrupts import enter_critical, leave_critical

_C = torch._C
_is_compiling = torch.compiler.is_compiling
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


class GateFreeCopies:
    """Builds and caches gate-free copies of functions, sharing one patched globals per module."""

    def __init__(self) -> None:
        # (id of a module's globals, torch viewed) -> (those globals, the copies' patched globals)
        self._globals: dict[tuple[int, bool], tuple[dict[str, Any], dict[str, Any]]] = {}
        self._copies: dict[Callable[..., Any], Callable[..., Any]] = {}

    @staticmethod
    def _patched(original: dict[str, Any], view_torch: bool) -> dict[str, Any]:
        patched = dict(original)
        for name, gate in _HONEST.items():
            if name in patched:
                patched[name] = gate
        if view_torch and patched.get("torch") is torch:
            patched["torch"] = _TORCH_VIEW
        return patched

    def _patched_globals(self, original: dict[str, Any], view_torch: bool) -> dict[str, Any]:
        key = (id(original), view_torch)
        found = self._globals.get(key)
        if found is None:
            found = self._globals[key] = (original, self._patched(original, view_torch))
        return found[1]

    def refresh(self) -> None:
        """Give every copy its module's globals as they are now, in place: the copies hold these dicts."""
        for (_, view_torch), (original, patched) in self._globals.items():
            fresh = self._patched(original, view_torch)
            patched.update(fresh)
            for name in patched.keys() - fresh.keys():
                del patched[name]

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


# -- gates that do not see one mode ------------------------------------------------------------------
def _remove_from_stack(mode: object) -> list[Any] | None:
    """Take ``mode`` off this thread's stack, modes above it pushed back; the popped entries, or None."""
    depth = _C._len_torch_function_stack()
    lowest = next((i for i in range(depth) if _C._get_function_stack_at(i) is mode), None)
    if lowest is None:
        return None
    popped = [_C._pop_torch_function_stack() for _ in range(depth - lowest)]
    for entry in reversed(popped):
        if entry is not mode:
            _C._push_on_torch_function_stack(entry)
    return popped


def _restore_stack(popped: list[Any], mode: object) -> None:
    for entry in popped:
        if entry is not mode:
            _C._pop_torch_function_stack()
    for entry in reversed(popped):
        _C._push_on_torch_function_stack(entry)


def _blind_gate(previous: Callable[..., bool], mode: object) -> Callable[..., bool]:
    """``previous`` (a gate), answering as it would with ``mode`` off this thread's stack."""

    @functools.wraps(previous)
    def gate(*args: Any) -> bool:
        # no mode on this thread (other threads, or inside our handler, where it is popped) or a
        # compiled region being traced (Dynamo knows the original gate): nothing to hide
        if not _C._len_torch_function_stack() or _is_compiling():
            return previous(*args)
        enter_critical()  # a Ctrl-C half-way through the stack juggling would leave the stack torn
        try:
            popped = _remove_from_stack(mode)
            if popped is None:
                return previous(*args)
            try:
                return previous(*args)
            finally:
                _restore_stack(popped, mode)
        finally:
            leave_critical()  # raises a Ctrl-C noted meanwhile, with the stack whole again

    return gate


class ModeBlindGates:
    """Context manager: ``torch.overrides``' gates do not see ``mode`` while entered; single-use.

    The new gates ask what was there before, which is put back on exit unless someone replaced it meanwhile.
    """

    def __init__(self, mode: object) -> None:
        self._mode = mode
        self._installed: list[tuple[str, Any, Any]] = []

    def __enter__(self) -> ModeBlindGates:
        try:
            for name in _GATE_NAMES:
                previous = getattr(torch.overrides, name)
                gate = _blind_gate(previous, self._mode)
                setattr(torch.overrides, name, gate)
                self._installed.append((name, previous, gate))
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._restore()

    def _restore(self) -> None:
        while self._installed:
            name, previous, gate = self._installed.pop()
            if vars(torch.overrides).get(name) is gate:
                setattr(torch.overrides, name, previous)
