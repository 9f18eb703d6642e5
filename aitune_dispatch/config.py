"""The profiler's options, validated once at construction, and the one home of every option's vocabulary.

Every stage reads plain, valid fields of the frozen :class:`ProfileConfig`; no torch is imported, so
the command line offers the vocabulary without it (``docs/design.md``, "Layout").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

DEVICES = ("cuda", "cpu")  # where kernels are timed: CUPTI on the GPU, or aten ops on the host
DECODERS = ("native", "python")  # CUPTI record decoders: native_shims/cupti_decoder.c, or cupti-python
OP_TRACERS = ("native", "python")  # tracing backends: native_shims/tracer/, or Python modes
# how a CUDA launch finds its op: a callback at the launch reads our per-thread id stack, or CUPTI's
# external-correlation records of ids pushed per op and scope (docs/design.md, "Correlation: what CUPTI needs")
CORRELATIONS = ("launch", "push")
# how functional calls are seen: the function objects record their own calls (a vectorcall trampoline,
# CPython >= 3.12 with the native tracer), or a TorchFunctionMode (docs/design.md, "Functional calls at
# the function object")
INTERCEPTIONS = ("objects", "mode")
FUNCTIONS = ("functional", "all")  # what counts as a call: torch.nn.functional only, or torch-level APIs too
SPLITS = ("device", "rank")  # ProfileResult.describe(by=...): one summary per GPU device, or per rank
CACHE_STATES = ("warm", "cold")  # benchmark(cache=...): timed calls back to back, or the cache overwritten first

_DEVICE_TEXT = re.compile(rf"^({'|'.join(DEVICES)})(:\d+)?$")  # "cuda", "cuda:1", "cpu"


def one_of(values: Iterable[object]) -> str:
    """The accepted values as every refusal words them: ``None, 'native' or 'python'``."""
    words = [repr(value) for value in values]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def normalize_function_names(function_names: Iterable[str] | None) -> frozenset[str] | None:
    """``function_names`` as a frozenset, None kept; TypeError for a single string or a non-string entry."""
    if function_names is None:
        return None
    if isinstance(function_names, (str, bytes)):
        raise TypeError(f"function_names must be a set of names such as {{{function_names!r}}}, not a single string")
    if not isinstance(function_names, Iterable):
        raise TypeError(
            "function_names must be an iterable of torch.nn.functional names such as {'linear'} or None; "
            f"got {type(function_names).__name__} {function_names!r}"
        )
    entries = list(function_names)
    bad = [name for name in entries if not isinstance(name, str)]  # before hashing: a list entry is unhashable
    if bad:
        raise TypeError(f"function_names must contain strings such as 'linear'; got {bad!r}")
    return frozenset(entries)


def _device_type(device: Any) -> str | None:
    if isinstance(device, str):
        match = _DEVICE_TEXT.match(device)
        return match.group(1) if match else None
    kind = getattr(device, "type", None)  # a torch.device
    if isinstance(kind, str):
        return kind
    import torch  # anything else torch.device accepts (an ordinal): only torch knows

    try:
        return torch.device(device).type
    except (RuntimeError, TypeError):
        return None


def normalize_device(device: Any) -> str:
    """``"cuda"`` (also for None and ``"cuda:N"``) or ``"cpu"``; ValueError for any other device."""
    if device is None:
        return "cuda"
    kind = _device_type(device)
    if kind not in DEVICES:
        raise ValueError(
            f"device must be {one_of((None, *DEVICES))} (or 'cuda:N', or a torch.device of those types); "
            f"got {device!r}"
        )
    return kind


@dataclass(frozen=True)
class ProfileConfig:
    """What one profiler records, normalized at construction; a bad option raises naming the accepted ones.

    Attributes
    ----------
    function_names:
        The functional names whose distinct samples are collected (a frozenset); None: every one.
    device:
        ``"cuda"`` (CUPTI kernels) or ``"cpu"`` (aten ops timed on the host, kernel ``cpu::<op>``).
    decoder:
        CUDA only: one of :data:`DECODERS`, or None (native, with a warned fallback).
    functions:
        ``"functional"`` (the spec) or ``"all"``: ops outside any functional call go to the
        innermost torch-level API call (``torch.addmm``).
    op_tracer:
        One of :data:`OP_TRACERS`, or None (native where built; ``backends.resolve_tracer``).
    correlation:
        CUDA only: one of :data:`CORRELATIONS`, or None (``"launch"`` with the native decoder, which
        holds the launch callback; ``"push"`` with the cupti-python one).
    interception:
        One of :data:`INTERCEPTIONS`, or None (``"objects"`` where the native tracer can hook this
        CPython's function objects and ``functions="functional"``, else ``"mode"``;
        ``backends.resolve_interception``).
    """

    function_names: frozenset[str] | None = None
    device: str = "cuda"
    decoder: str | None = None
    functions: str = "functional"
    op_tracer: str | None = None
    correlation: str | None = None
    interception: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "function_names", normalize_function_names(self.function_names))
        object.__setattr__(self, "device", normalize_device(self.device))
        if self.decoder not in (None, *DECODERS):
            raise ValueError(f"decoder must be {one_of((None, *DECODERS))}; got {self.decoder!r}")
        if self.functions not in FUNCTIONS:
            spec, *others = FUNCTIONS
            raise ValueError(f"functions must be {spec!r} (the spec) or {one_of(others)}; got {self.functions!r}")
        if self.op_tracer not in (None, *OP_TRACERS):
            raise ValueError(f"op_tracer must be {one_of((None, *OP_TRACERS))}; got {self.op_tracer!r}")
        if self.correlation not in (None, *CORRELATIONS):
            raise ValueError(f"correlation must be {one_of((None, *CORRELATIONS))}; got {self.correlation!r}")
        if self.interception not in (None, *INTERCEPTIONS):
            raise ValueError(f"interception must be {one_of((None, *INTERCEPTIONS))}; got {self.interception!r}")
        if self.interception == "objects" and self.functions == "all":
            raise ValueError(
                "interception='objects' hooks the torch.nn.functional function objects only; functions='all' "
                "also counts torch-level API calls, which only a TorchFunctionMode sees: pass interception='mode' "
                "(or None)"
            )
        if self.interception == "objects" and self.op_tracer == "python":
            raise ValueError(
                "interception='objects' is done by the native tracer: pass op_tracer='native' (or None), "
                "or interception='mode' with op_tracer='python'"
            )
        if self.correlation == "launch" and self.decoder == "python":
            raise ValueError(
                "correlation='launch' needs the native decoder, which holds the launch callback: "
                "pass decoder='native' (or None), or correlation='push' with decoder='python'"
            )

    @property
    def cuda(self) -> bool:
        """Whether kernels are collected with CUPTI."""
        return self.device == "cuda"

    @property
    def all_functions(self) -> bool:
        """Whether torch-level API calls count as calls."""
        return self.functions == "all"
