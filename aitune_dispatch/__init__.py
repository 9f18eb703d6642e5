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

from . import display

if TYPE_CHECKING:
    from .benchmarking import activate, benchmark
    from .profiler import ModuleFunctionKernelProfiler
    from .results import ProfileResult, ResultFormatError, TensorMeta, compare, describe_results, load, merge
    from .schema import PACKAGE_VERSION as __version__  # noqa: F401 - lazy below

logging.getLogger(__name__).addHandler(logging.NullHandler())


def _notebook_html(result: Any) -> str:
    """A result's notebook view, drawn by the reports stage (imported on the first display)."""
    from .reports.html import notebook_html

    return notebook_html(result)


display.set_notebook_renderer(_notebook_html)  # results show in notebooks without importing reports

__all__ = [
    "ModuleFunctionKernelProfiler",
    "ProfileResult",
    "ResultFormatError",
    "TensorMeta",
    "activate",
    "benchmark",
    "compare",
    "describe_results",
    "load",
    "merge",
]

_LAZY = {
    "__version__": ".schema",
    "ModuleFunctionKernelProfiler": ".profiler",
    "ProfileResult": ".results",
    "ResultFormatError": ".results",
    "TensorMeta": ".results",
    "activate": ".benchmarking",
    "benchmark": ".benchmarking",
    "compare": ".results",
    "describe_results": ".results",
    "load": ".results",
    "merge": ".results",
}

_RENAMED = {"__version__": "PACKAGE_VERSION"}  # where the attribute's name differs in its module


def __getattr__(name: str) -> Any:
    """Import a public attribute on first access (keeps ``import aitune_dispatch`` torch-free)."""
    module_name = _LAZY.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(module_name, __name__)
    value = getattr(module, _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
