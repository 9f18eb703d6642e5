"""Collection: activity sources that turn a recorded pass into kernel and correlation tables.

:func:`make_source` picks the source of a run (``sources.py``, the registry). Collection owns the
clock (:mod:`.clock`): activity timestamps leave collection on the host clock.
"""

from ..config import DECODERS
from ..schema import CPU_KERNEL_PREFIX
from .base import Activity, ActivitySource
from .cpu import CpuOpTimer, activity_from_ops
from .sources import make_cuda_source, make_source, register_source

__all__ = [
    "CPU_KERNEL_PREFIX",
    "DECODERS",
    "activity_from_ops",
    "Activity",
    "ActivitySource",
    "CpuOpTimer",
    "make_cuda_source",
    "make_source",
    "register_source",
]
