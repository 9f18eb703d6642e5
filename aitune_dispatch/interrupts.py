"""Ctrl-C during ``profile()``: delivered while the user's code runs, held while ours installs or removes.

:func:`held` brackets ``record()``, :func:`delivered` marks the user's code inside it, and
:func:`enter_critical` / :func:`leave_critical` the code of ours within the user's that must not stop
half-way; why and what it costs: ``docs/design.md``, "Ctrl-C".
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
        self.released = False  # held() has ended: a user's handler that chains to us gets the original

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.released or (self.delivering and not self.critical):
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

    Only our handler is removed afterwards: one the block's code installed in its place is kept.
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
        _remove(holder, original)
        holder.released = True
        holder.deliver()


def _remove(holder: _Held, original: Handler) -> None:
    """Put ``original`` back, unless the user's code installed a handler of its own during the block:
    that one stays, as it would have bare."""
    if signal.getsignal(signal.SIGINT) is holder:
        signal.signal(signal.SIGINT, original)


@contextmanager
def delivered() -> Iterator[None]:
    """Inside :func:`held`, let SIGINT's handler run at once for the block (the user's code).

    An interrupt noted while held is delivered on entry, so it surfaces in the user's code.
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
