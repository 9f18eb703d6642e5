"""Ctrl-C during ``profile()``: delivered while the user's code runs, held while ours installs or removes.

A KeyboardInterrupt is raised at whatever bytecode the main thread runs when SIGINT arrives. Inside
the user's function that is what the user asked for, and every ``finally`` of ours unwinds it. Inside
our own setup or teardown (between taking the process lock and entering its ``try``, half-way
through restoring hooks, modes and gates) it would leave the profiler installed for the rest of the
process. So :func:`held` keeps SIGINT's handler from running during ``record()``, and
:func:`delivered` lets it run again around each call of the user's function. A signal that arrives
while held runs the original handler (by default: raises KeyboardInterrupt) as soon as the user's
code runs again, or once ``record()`` has cleaned up.

Only the main thread can set handlers and receive signals; elsewhere both are no-ops, and so they
are where SIGINT is ignored or left to the OS (``SIG_IGN``, ``SIG_DFL``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

__all__ = ["delivered", "held"]

Handler = Callable[[int, FrameType | None], Any]


class _Held:
    """The handler in place while SIGINT is held: it notes the signal for the original handler."""

    def __init__(self, original: Handler) -> None:
        self.original = original
        self.pending: FrameType | None | bool = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.pending = frame if frame is not None else True

    def deliver(self) -> None:
        """Run the original handler for a signal noted while held (it raises KeyboardInterrupt by default)."""
        if self.pending is not False:
            frame = self.pending if isinstance(self.pending, FrameType) else None
            self.pending = False
            self.original(signal.SIGINT, frame)


def _holdable() -> Handler | None:
    """SIGINT's Python handler, where this thread may replace it; else None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    current = signal.getsignal(signal.SIGINT)
    return current if callable(current) and not isinstance(current, _Held) else None


@contextmanager
def held() -> Iterator[None]:
    """Hold SIGINT for the block; run its handler afterwards if it arrived (after the block's own cleanup).

    Returns
    -------
    context manager
        Nested ``held()`` blocks hold once; the outermost one delivers.
    """
    original = _holdable()
    if original is None:
        yield
        return
    holder = _Held(original)
    signal.signal(signal.SIGINT, holder)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, original)
        holder.deliver()  # the block is done: an interrupt noted during it is raised now


@contextmanager
def delivered() -> Iterator[None]:
    """Inside :func:`held`, let SIGINT's handler run for the block (the user's code); elsewhere a no-op.

    An interrupt noted while held is delivered on entry, so it surfaces in the user's code, where
    the callers' ``finally`` blocks unwind it as any exception of the user's.
    """
    holder = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if not isinstance(holder, _Held):
        yield
        return
    signal.signal(signal.SIGINT, holder.original)
    try:
        holder.deliver()
        yield
    finally:
        signal.signal(signal.SIGINT, holder)
