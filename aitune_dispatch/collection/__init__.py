"""Collection: activity sources that turn a recorded pass into kernel and correlation tables.

It owns the clock (:mod:`.clock`): activity timestamps leave collection on the host clock.
"""

import warnings

from ..config import DECODERS
from ..schema import CPU_KERNEL_PREFIX
from .base import Activity, ActivitySource
from .cpu import CpuOpTimer, activity_from_ops

__all__ = [
    "CPU_KERNEL_PREFIX",
    "DECODERS",
    "activity_from_ops",
    "Activity",
    "ActivitySource",
    "CpuOpTimer",
    "make_cuda_source",
]

_fallback_warned = False


def make_cuda_source(decoder: str | None = None) -> ActivitySource:
    """The CUDA activity source (CUPTI) with the requested decoder backend.

    Parameters
    ----------
    decoder:
        One of ``config.DECODERS``, or None: the compiled decoder of ``native_shims/``, falling
        back with a warning (once per process) to the pure cupti-python decoder where it is
        unavailable.

    Returns
    -------
    ActivitySource
        A :class:`~.cupti_source.CuptiSource` for one pass.

    Raises
    ------
    RuntimeError
        cupti-python is missing, or ``decoder="native"`` where it is unavailable; the message says
        what to install or pass.
    """
    from .cupti_source import CuptiSource, load_cupti
    from .python_sink import PythonRecordSink

    global _fallback_warned
    cupti = load_cupti()
    external_kind = int(cupti.ExternalCorrelationKind.CUSTOM2)
    if decoder in (None, "native"):
        try:
            from .native_sink import NativeRecordSink

            return CuptiSource(NativeRecordSink(external_kind), cupti)
        except (ImportError, OSError, RuntimeError) as error:
            if decoder == "native":
                raise RuntimeError(
                    f"the native CUPTI decoder is unavailable ({error}); rebuild the package "
                    "(pip install -e . builds native_shims/) or pass decoder='python'"
                ) from error
            if not _fallback_warned:
                warnings.warn(
                    f"native CUPTI decoder unavailable ({error}); using the slower cupti-python decoder",
                    RuntimeWarning,
                    stacklevel=3,
                )
                _fallback_warned = True
    return CuptiSource(PythonRecordSink(cupti, external_kind), cupti)
