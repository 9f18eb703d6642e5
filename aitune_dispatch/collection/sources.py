"""The registry of activity sources, one factory per ``config.device``, so a new source (ROCm, say) is a
module here and one :func:`register_source` call (``docs/design.md``, "Layout")."""

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
    """Make ``factory(config)`` the source of runs on ``device``; returns the factory it replaces, or None."""
    previous = _SOURCES.get(device)
    _SOURCES[device] = factory
    return previous


def make_source(config: ProfileConfig) -> ActivitySource:
    """The activity source for one run of ``config``; RuntimeError, saying what to install or pass, where
    it cannot be made."""
    if config.device not in _SOURCES:
        raise ValueError(f"no activity source is registered for device {config.device!r}; known: {sorted(_SOURCES)}")
    source = _SOURCES[config.device](config)
    _log.info("activity source: %s; tracer: %s", getattr(source, "label", type(source).__name__), config.op_tracer)
    return source


def make_cuda_source(decoder: str | None = "native", correlation: str | None = None) -> ActivitySource:
    """The CUPTI source with the decoder named (None: native) and how launches find their op (None: ``"launch"``
    with the native decoder, ``"push"`` with cupti-python's); RuntimeError where it cannot load."""
    from .cupti_source import CuptiSource, load_cupti

    cupti = load_cupti()
    external_kind = int(cupti.ExternalCorrelationKind.CUSTOM2)
    if decoder in (None, "native"):
        from .native import NativeRecordSink

        try:
            sink = NativeRecordSink(external_kind)
        except (ImportError, OSError, RuntimeError) as error:
            raise RuntimeError(
                f"the native CUPTI decoder is unavailable ({error}); rebuild the package "
                "(pip install -e . builds native_shims/) or pass decoder='python'"
            ) from error
        return CuptiSource(sink, cupti, correlation=correlation)
    from .python import PythonRecordSink

    return CuptiSource(PythonRecordSink(cupti, external_kind), cupti, correlation=correlation)


def _cuda(config: ProfileConfig) -> ActivitySource:
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError(
            "CUDA is required to profile module and function kernel candidates. "
            "ModuleFunctionKernelProfiler needs CUDA by default and torch.cuda.is_available() is "
            "False; pass device='cpu' to profile aten ops with the CPU activity source instead"
        )
    return make_cuda_source(config.decoder, config.correlation)


register_source("cuda", _cuda)
register_source("cpu", lambda config: CpuOpTimer())
