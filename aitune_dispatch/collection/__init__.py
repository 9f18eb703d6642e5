"""Collection: the activity sources that turn a recorded pass into kernel and correlation tables on
the host clock (``docs/design.md``, "The clock")."""

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
