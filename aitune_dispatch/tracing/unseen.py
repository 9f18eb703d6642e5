"""Runs our own torch calls (``no_grad``, sample-key metadata reads, lazy imports) with torch-function
dispatch disabled, so a user's mode or tensor subclass sees only the profiled code's calls, as without
the profiler."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

_T = TypeVar("_T")
_get_state = torch._C._get_torch_function_state
_set_state = torch._C._set_torch_function_state

calls_unseen = torch._C.DisableTorchFunction
"""Context manager: torch calls inside it reach no TorchFunctionMode and no ``__torch_function__``.
Only for code that Ctrl-C does not reach (``interrupts.held()``); inside the user's code use :func:`unseen`."""


def unseen(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)`` inside :data:`calls_unseen`, for code of ours that runs inside the user's.

    A KeyboardInterrupt can be raised between the block's last line and the call of its ``__exit__``
    (a line event of the ``with`` statement, where a Ctrl-C lands): ``__exit__`` is then skipped, and
    the thread would keep torch-function dispatch disabled, every later mode and subclass unseen, for
    the rest of the process. The state is put back from out here, where the ``with`` as a whole is.
    """
    state = _get_state()
    try:
        with calls_unseen():
            return function(*args)
    except BaseException:
        _set_state(state)
        raise


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """``torch.no_grad()`` whose switching (``torch._C._set_grad_enabled``) no mode or subclass sees."""
    with calls_unseen():
        enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
    try:
        yield
    finally:
        with calls_unseen():
            torch._C._set_grad_enabled(enabled)
