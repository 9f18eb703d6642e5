"""Takes our own mode off torch's mode stacks from beneath any mode the profiled function left
entered, since torch's ``__exit__`` pops whatever is on top (``docs/design.md``, "Nested functional calls")."""

from __future__ import annotations

import collections
import sys
import warnings
from types import TracebackType
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack, _pop_mode, _push_mode

_C = torch._C

_OUR_PACKAGE = __name__.partition(".")[0]


def exit_function_mode(
    mode: Any, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
) -> None:
    """Exit our TorchFunctionMode ``mode``, leaving modes above it in place; warns of them, or that ours
    was already popped."""
    depth = _C._len_torch_function_stack()
    position = next((i for i in reversed(range(depth)) if _C._get_function_stack_at(i) is mode), None)
    if position is None:
        _warn_removed(mode, "function-mode")
        return
    above = [_C._pop_torch_function_stack() for _ in range(depth - 1 - position)][::-1]  # bottom first
    try:
        mode.__exit__(exc_type, exc, tb)  # pops the top entry: ours now
    finally:
        for entry in above:
            _C._push_on_torch_function_stack(entry)
    if above:
        _warn_left(above, mode, "function-mode")


def exit_dispatch_mode(
    mode: TorchDispatchMode,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    tb: TracebackType | None,
) -> None:
    """As :func:`exit_function_mode` for our TorchDispatchMode; the modes put back are re-entered so the
    flags they saved are those they would hold had ours never been entered."""
    stack = _get_current_dispatch_mode_stack()
    position = next((i for i in reversed(range(len(stack))) if stack[i] is mode), None)
    if position is None:
        _warn_removed(mode, "dispatch-mode")
        return
    above = stack[position + 1 :]  # bottom first; in torch's user-mode stack, as ours is (no mode key)
    reentered = []
    for entry in reversed(above):
        _pop_mode()
        reentered.append(_forget_entry_flags(entry))
    reentered.reverse()
    try:
        mode.__exit__(exc_type, exc, tb)  # pops the top entry: ours now, and restores the flags it saved
    finally:
        for entry, flags_saved in zip(above, reentered):
            if flags_saved:
                TorchDispatchMode.__enter__(entry)  # torch's own bookkeeping: save the flags, push
            else:
                _push_mode(entry)
    if above:
        _warn_left(above, mode, "dispatch-mode")


def _flag_lists(entry: Any) -> list[Any]:
    # TorchDispatchMode.__enter__ appends to one deque per flag (old_dispatch_mode_flags, ...); which
    # there are depends on the torch version
    return [
        value
        for name, value in vars(entry).items()
        if name.startswith("old_") and name.endswith("_flags") and isinstance(value, (list, collections.deque))
    ]


def _forget_entry_flags(entry: Any) -> bool:
    """Drop the flags ``entry`` saved when last entered; False where it saved none (a raw push)."""
    lists = _flag_lists(entry) if isinstance(entry, TorchDispatchMode) else []
    if not lists or not all(lists):
        return False
    for flags in lists:
        flags.pop()
    return True


def _names(modes: list[Any]) -> str:
    counts = collections.Counter(type(mode).__qualname__ for mode in modes)
    return ", ".join(name if count == 1 else f"{name} (x{count})" for name, count in counts.items())


def _warn_left(above: list[Any], ours: Any, stack: str) -> None:
    names = _names(above)
    warnings.warn(
        f"{names} {'was' if len(above) == 1 else 'were'} left entered by the profiled function (entered, never "
        f"exited): {'it stays' if len(above) == 1 else 'they stay'} on torch's {stack} stack where the profiled "
        f"function left {'it' if len(above) == 1 else 'them'}, and aitune_dispatch took its own "
        f"{type(ours).__name__} from beneath; exit every mode the profiled function enters (`with mode:`)",
        RuntimeWarning,
        stacklevel=_callers_level(),
    )


def _warn_removed(ours: Any, stack: str) -> None:
    warnings.warn(
        f"the profiled function took aitune_dispatch's {type(ours).__name__} off torch's {stack} stack "
        "(it exited a mode it had not entered, and torch popped ours instead): what ran after that was "
        "not recorded; exit only the modes the profiled function enters",
        RuntimeWarning,
        stacklevel=_callers_level(),
    )


def _callers_level() -> int:
    """The ``stacklevel`` of profile()'s caller (the first frame outside us and contextlib)."""
    frame, level = sys._getframe(2), 2  # the frame that called the warning helper
    while frame is not None and (
        frame.f_globals.get("__name__", "").startswith(_OUR_PACKAGE) or frame.f_globals.get("__name__") == "contextlib"
    ):
        frame, level = frame.f_back, level + 1
    return level
