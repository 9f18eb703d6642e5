"""The one place that picks every backend: the tracer and the CUPTI decoder, each native or pure Python.

The compiled half is preferred where built, falling back with one warning per process that names
the build fix; a requested backend that is not built raises now, not mid-profile (``docs/design.md``,
"The native tracing backend").
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import replace

from .collection import native as native_decoder
from .config import ProfileConfig
from .tracing import native as native_tracer


@functools.lru_cache(maxsize=1)
def default_tracer() -> str:
    """``"native"`` where the tracer is built for this torch, else ``"python"``, warning once per process."""
    try:
        native_tracer.load()
    except ImportError as error:
        warnings.warn(f"{error}; tracing with the slower pure-Python backend", RuntimeWarning, 3)
        return "python"
    return "native"


def resolve_tracer(requested: str | None) -> str:
    """``requested`` (ImportError, saying how to build it, where native is not built), or the process default."""
    if requested is None:
        return default_tracer()
    if requested == "native":
        native_tracer.load()
    return requested


@functools.lru_cache(maxsize=1)
def native_mode_compiles() -> bool:
    """Whether this torch's Dynamo compiles code under the native function mode, measured once per process.

    Dynamo guards on the mode stack, so a function compiled bare must compile a second graph under a
    transparent ``NativeFunctionMode``; one that cannot trace the mode runs the frame eagerly
    (``docs/design.md``, "torch.compile and CUDA graphs"). Dynamo's counters are left as they were.
    """
    import torch
    from torch._dynamo.utils import counters

    saved = {key: dict(value) for key, value in counters.items()}

    def probe(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.relu(x) + 1

    compiled = torch.compile(probe, backend="eager", dynamic=False)
    x = torch.ones(2)
    try:
        compiled(x)
        before = counters["stats"]["unique_graphs"]
        with native_tracer.NativeFunctionMode():
            compiled(x)
        return counters["stats"]["unique_graphs"] > before
    except Exception:  # noqa: BLE001 - a torch that cannot compile here: do not trust the native mode with it
        return False
    finally:
        counters.clear()
        for key, value in saved.items():
            counters[key].update(value)


@functools.lru_cache(maxsize=1)
def hooks_available() -> bool:
    """Whether the native tracer can hook this CPython's function objects; where only the object layout
    stands in the way (CPython >= 3.12), one warning per process says the mode is used instead."""
    import sys

    reason = native_tracer.hooks_unsupported()
    if reason is not None and sys.version_info >= (3, 12) and native_tracer.available():
        warnings.warn(
            f"{reason}: functional calls are seen through a TorchFunctionMode instead (interception='mode'); "
            "rebuild the native tracer for this CPython (python setup.py build_ext --inplace)",
            RuntimeWarning,
            4,
        )
    return reason is None


def resolve_interception(requested: str | None, tracer: str, all_functions: bool, compiled: bool = False) -> str:
    """``requested``, or ``"objects"`` where the native tracer hooks this CPython and only functional
    calls count, else ``"mode"``; a requested ``"objects"`` that cannot be is refused, saying why.

    Compiled code takes the mode by default: Dynamo guards on the mode stack, so a graph compiled
    before ``profile()`` compiles again in its warm-up, where Inductor's provenance sees its kernels;
    under the hooks that graph runs as it is, and its kernels are attributed only where an earlier
    ``profile()`` saw it compiled (``docs/design.md``, "Functional calls at the function object").
    """
    if requested == "mode":
        return "mode"
    possible = tracer == "native" and not all_functions
    if requested is None:
        return "objects" if possible and not compiled and hooks_available() else "mode"
    if not possible:
        raise ValueError(
            "interception='objects' needs the native tracer and functions='functional'; "
            f"this run has op_tracer={tracer!r}, functions={'all' if all_functions else 'functional'!r}"
        )
    reason = native_tracer.hooks_unsupported()
    if reason is not None:
        raise RuntimeError(f"interception='objects' is not possible here: {reason}; pass interception='mode' (or None)")
    return "objects"


def tracer_for_run(backend: str, compiled: bool) -> str:
    """``backend``, unless compiled code would not stay compiled under it: then ``"python"``, with a warning."""
    if backend != "native" or not compiled or native_mode_compiles():
        return backend
    import torch

    warnings.warn(
        f"torch {torch.__version__}'s torch.compile cannot trace the native function mode, so compiled "
        "regions would run eagerly under it: tracing this compiled model with the pure-Python backend "
        "(op_tracer='python'), which keeps them compiled",
        RuntimeWarning,
        4,
    )
    return "python"


@functools.lru_cache(maxsize=1)
def default_decoder() -> str:
    """``"native"`` where the compiled CUPTI decoder is built and finds libcupti, else ``"python"``, warning once."""
    try:
        native_decoder.loaded_module()
    except (ImportError, OSError, RuntimeError) as error:
        warnings.warn(f"{error}; decoding with the slower cupti-python decoder", RuntimeWarning, 3)
        return "python"
    return "native"


def resolve_decoder(requested: str | None) -> str:
    """``requested``, or the process default; a requested native decoder that is not built is refused, with
    the fix, where the source is made (``collection.make_cuda_source``)."""
    return default_decoder() if requested is None else requested


def for_run(config: ProfileConfig, compiled: bool) -> ProfileConfig:
    """``config`` with the run's tracer (one that keeps compiled code compiled), interception and, on
    CUDA, decoder chosen; with the function objects hooked no mode is pushed, so compiled code stays compiled."""
    tracer = resolve_tracer(config.op_tracer)
    interception = resolve_interception(config.interception, tracer, config.all_functions, compiled)
    if interception == "mode":
        tracer = tracer_for_run(tracer, compiled)
    decoder = resolve_decoder(config.decoder) if config.cuda else config.decoder
    return replace(config, op_tracer=tracer, decoder=decoder, interception=interception)
