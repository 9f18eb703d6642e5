"""aitune_dispatch: which CUDA kernels each torch.nn.functional call launches, and why.

A drop-in replacement for NVIDIA AITune's ``ModuleFunctionKernelProfiler``.
"""

from .profiler import ModuleFunctionKernelProfiler
from .results import ProfileResult, describe_results

__all__ = ["ModuleFunctionKernelProfiler", "ProfileResult", "describe_results"]
__version__ = "0.1.0"
