"""Runs our own torch calls (``no_grad``, sample-key metadata reads, lazy imports) with torch-function
dispatch disabled, so a user's mode or tensor subclass sees only the profiled code's calls, as without
the profiler."""

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
