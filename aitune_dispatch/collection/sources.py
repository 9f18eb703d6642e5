"""Which activity source collects a run: one factory per ``config.device``, registered here.

A new source (ROCm, say) is a module of this folder with an :class:`~.base.ActivitySource` and one
:func:`register_source` call below; ``config.DEVICES`` names its device. ``docs/design.md``, "Layout".
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..config import ProfileConfig
from .base import ActivitySource
from .cpu import CpuOpTimer

_log = logging.getLogger(__name__)

SourceFactory = Callable[[ProfileConfig], ActivitySource]
_SOURCES: dict[str, SourceFactory] = {}


def register_source(device: str, factory: SourceFactory) -> SourceFactory | None:
    """Make ``factory(config)`` the activity source of runs on ``device`` (one of ``config.DEVICES``).

    Returns the factory it replaces (None: the first for ``device``), so that a caller can put it back.
    """
    previous = _SOURCES.get(device)
    _SOURCES[device] = factory
    return previous


def make_source(config: ProfileConfig) -> ActivitySource:
    """The activity source for one run of ``config``: CUPTI on ``"cuda"``, the CPU op timer on ``"cpu"``.

    Parameters
    ----------
    config:
        The run's options; on CUDA ``config.decoder`` names the decoder (None: the native one).

    Returns
    -------
    ActivitySource
        A source for one pass.

    Raises
    ------
    RuntimeError
        CUDA unavailable on ``device="cuda"`` (the message names ``device='cpu'``), cupti-python missing,
        or the decoder unavailable; the message says what to install or pass.
    """
    if config.device not in _SOURCES:
        raise ValueError(f"no activity source is registered for device {config.device!r}; known: {sorted(_SOURCES)}")
    source = _SOURCES[config.device](config)
    _log.info("activity source: %s; tracer: %s", getattr(source, "label", type(source).__name__), config.op_tracer)
    return source


def make_cuda_source(decoder: str | None = "native") -> ActivitySource:
    """The CUDA activity source (CUPTI) with the decoder named (``config.DECODERS``; None: native).

    Raises RuntimeError where cupti-python is missing or the decoder cannot be loaded; the message says what
    to install or pass.
    """
    from .cupti_source import CuptiSource, load_cupti

    cupti = load_cupti()
    external_kind = int(cupti.ExternalCorrelationKind.CUSTOM2)
    if decoder in (None, "native"):
        from .native import NativeRecordSink

        try:
            return CuptiSource(NativeRecordSink(external_kind), cupti)
        except (ImportError, OSError, RuntimeError) as error:
            raise RuntimeError(
                f"the native CUPTI decoder is unavailable ({error}); rebuild the package "
                "(pip install -e . builds native_shims/) or pass decoder='python'"
            ) from error
    from .python import PythonRecordSink

    return CuptiSource(PythonRecordSink(cupti, external_kind), cupti)


def _cuda(config: ProfileConfig) -> ActivitySource:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            "CUDA is required to profile module and function kernel candidates. "
            "ModuleFunctionKernelProfiler needs CUDA by default and torch.cuda.is_available() is "
            "False; pass device='cpu' to profile aten ops with the CPU activity source instead"
        )
    return make_cuda_source(config.decoder)


register_source("cuda", _cuda)
register_source("cpu", lambda config: CpuOpTimer())
