"""Ctrl-C during ``profile()``: delivered while the user's code runs, held while ours installs or removes.

A KeyboardInterrupt is raised at whatever bytecode the main thread runs when SIGINT arrives. Inside
the user's function that is what the user asked for, and every ``finally`` of ours unwinds it. Inside
our own setup or teardown (between taking the process lock and entering its ``try``, half-way
through restoring hooks, modes and gates) it would leave the profiler installed for the rest of the
process. So :func:`held` puts a handler of ours in SIGINT's place for ``record()``: it notes the
signal and runs the original handler (by default: raises KeyboardInterrupt) once it is safe, as soon
as the user's code runs again or once ``record()`` has cleaned up. :func:`delivered` marks the
user's code, where the original handler runs at once, except inside a critical section (between
:func:`enter_critical` and :func:`leave_critical`): code
of ours that runs inside the user's (the fast-path gates taking our mode off the stack and putting it
back), which must not stop half-way.

Only the main thread can set handlers and receive signals; elsewhere all of these are no-ops, and so
they are where SIGINT is ignored or left to the OS (``SIG_IGN``, ``SIG_DFL``). Entering and leaving a
critical section is two integer updates (no system call): the gates run on every fast-path forward.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["delivered", "enter_critical", "held", "leave_critical"]

Handler = Callable[[int, FrameType | None], Any]
_MAIN = threading.main_thread().ident


class _Held:
    """SIGINT's handler during ``record()``: runs the original one now where that is safe, else notes the signal."""

    def __init__(self, original: Handler) -> None:
        self.original = original
        self.pending = False
        self.frame: FrameType | None = None
        self.delivering = False  # inside delivered(): the user's code
        self.critical = 0  # depth of critical() sections on the main thread

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.delivering and not self.critical:
            self.original(signum, frame)
        else:
            self.pending, self.frame = True, frame

    def deliver(self) -> None:
        """Run the original handler for a signal noted while held (it raises KeyboardInterrupt by default)."""
        if self.pending:
            frame, self.pending, self.frame = self.frame, False, None
            self.original(signal.SIGINT, frame)


_holder: _Held | None = None  # while held() is active on the main thread


@contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT for the block; run its handler afterwards if it arrived (after the block's own cleanup).

    Returns
    -------
    context manager
        A no-op off the main thread, where SIGINT has no Python handler, or inside another ``held()``.
    """
    global _holder
    original = signal.getsignal(signal.SIGINT) if threading.get_ident() == _MAIN else None
    if not callable(original) or _holder is not None:  # off the main thread, no Python handler, nested
        yield
        return
    holder = _Held(original)
    signal.signal(signal.SIGINT, holder)
    _holder = holder
    try:
        yield
    finally:
        _holder = None
        signal.signal(signal.SIGINT, original)
        holder.deliver()  # the block is done: an interrupt noted during it is raised now


@contextmanager
def delivered() -> Iterator[None]:
    """Inside :func:`held`, let SIGINT's handler run at once for the block (the user's code).

    An interrupt noted while held is delivered on entry, so it surfaces in the user's code, where
    the callers' ``finally`` blocks unwind it as any exception of the user's.
    """
    holder = _holder if threading.get_ident() == _MAIN else None
    if holder is None:
        yield
        return
    holder.delivering = True
    try:
        holder.deliver()
        yield
    finally:
        holder.delivering = False


def enter_critical() -> None:
    """Begin code of ours inside the user's that must not be interrupted half-way (pair with :func:`leave_critical`)."""
    holder = _holder
    if holder is not None and threading.get_ident() == _MAIN:
        holder.critical += 1


def leave_critical() -> None:
    """End a critical section; an interrupt noted during it is delivered now, where the user's code runs."""
    holder = _holder
    if holder is not None and threading.get_ident() == _MAIN:
        holder.critical -= 1
        if not holder.critical and holder.delivering:
            holder.deliver()
