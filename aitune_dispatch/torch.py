"""``import aitune_dispatch.torch as ait`` mirrors ``import aitune.torch as ait`` for the profiler."""

from .profiler import ModuleFunctionKernelProfiler

__all__ = ["ModuleFunctionKernelProfiler"]
