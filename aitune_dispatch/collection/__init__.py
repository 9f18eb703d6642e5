"""Collection: activity sources that turn a recorded pass into kernel and correlation tables."""

from .base import Activity, ActivitySource
from .cpu import CPU_KERNEL_PREFIX, CpuOpTimer

__all__ = ["CPU_KERNEL_PREFIX", "Activity", "ActivitySource", "CpuOpTimer"]


def make_cuda_source() -> ActivitySource:
    """The CUDA activity source (CUPTI); raises with the reason when it cannot start."""
    from .cupti_source import CuptiSource

    return CuptiSource()
