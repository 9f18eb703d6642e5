"""aitune_dispatch: which CUDA kernels each torch.nn.functional call launches, and why.

A drop-in replacement for NVIDIA AITune's ``ModuleFunctionKernelProfiler``. Attributes load lazily
(PEP 562), so saved results load, describe and compare on a machine without torch; the profiler,
``benchmark`` and ``activate`` import torch on first access. Runs log to ``logging.getLogger("aitune_dispatch")``
(INFO: each run's activity source and tracer; DEBUG: seconds per phase); what a user must act on stays a warning.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from . import display

if TYPE_CHECKING:
    from .benchmarking import activate, benchmark
    from .graph_captures import observe_graph_captures
    from .profiler import ModuleFunctionKernelProfiler
    from .provenance.observer import GraphCaptureObserver
    from .region import Recording, recording, step
    from .results import ProfileResult, ResultFormatError, TensorMeta, compare, describe_results, load, merge
    from .schema import PACKAGE_VERSION as __version__  # noqa: F401 - lazy below

logging.getLogger(__name__).addHandler(logging.NullHandler())


def _notebook_html(result: Any) -> str:
    """A result's notebook view, drawn by the reports stage (imported on the first display)."""
    from .reports.html import notebook_html

    return notebook_html(result)


display.set_notebook_renderer(_notebook_html)  # results show in notebooks without importing reports

__all__ = [
    "GraphCaptureObserver",
    "ModuleFunctionKernelProfiler",
    "ProfileResult",
    "Recording",
    "ResultFormatError",
    "TensorMeta",
    "activate",
    "benchmark",
    "compare",
    "describe_results",
    "load",
    "merge",
    "observe_graph_captures",
    "recording",
    "step",
]

_LAZY = {
    "GraphCaptureObserver": ".provenance.observer",
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
    "observe_graph_captures": ".graph_captures",
    "Recording": ".region",
    "recording": ".region",
    "step": ".region",
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
