"""aitune_dispatch: which CUDA kernels each torch.nn.functional call launches, and why.

A drop-in replacement for NVIDIA AITune's ``ModuleFunctionKernelProfiler``.

Attributes load lazily (PEP 562): ``import aitune_dispatch`` imports neither torch nor the
profiler, so saved results can be loaded, described and compared on a machine without torch.
``aitune_dispatch.ModuleFunctionKernelProfiler``, ``benchmark`` and ``activate`` import torch on first
access.

Phases and backend choices are logged on ``logging.getLogger("aitune_dispatch")`` (INFO: the
activity source and tracer of each run; DEBUG: seconds per phase); problems a user must act on
stay warnings. ``logging.basicConfig(level=logging.INFO)`` shows them.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .benchmarking import activate, benchmark
    from .profiler import ModuleFunctionKernelProfiler
    from .results import ProfileResult, TensorMeta, describe_results, load, merge
    from .results.comparison import compare

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "ModuleFunctionKernelProfiler",
    "ProfileResult",
    "TensorMeta",
    "activate",
    "benchmark",
    "compare",
    "describe_results",
    "load",
    "merge",
]
__version__ = "0.1.0"

_LAZY = {
    "ModuleFunctionKernelProfiler": ".profiler",
    "ProfileResult": ".results",
    "TensorMeta": ".results",
    "activate": ".benchmarking",
    "benchmark": ".benchmarking",
    "compare": ".results",
    "describe_results": ".results",
    "load": ".results",
    "merge": ".results",
}


def __getattr__(name: str) -> Any:
    """Import a public attribute on first access (keeps ``import aitune_dispatch`` torch-free)."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
