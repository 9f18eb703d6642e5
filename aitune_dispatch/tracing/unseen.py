"""Torch calls of our own that a user's TorchFunctionMode or tensor subclass must not see.

A mode the user entered around ``profile()`` (or a tensor subclass among the inputs) sees every torch
call made while it is active, ours included: the recorded pass's ``no_grad`` switch, a metadata read
that keys a sample, a torch module imported on first use. What it sees must be the profiled code's
calls alone, as without the profiler, so our own run under :data:`calls_unseen` (torch-function dispatch
disabled: modes and subclasses alike). The profiled function itself never runs under it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

calls_unseen = torch._C.DisableTorchFunction
"""Context manager: torch calls inside it reach no TorchFunctionMode and no ``__torch_function__``."""


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
