"""Compiled tracing backend (``native_shims/tracer/``); driven by ``tracing/native.py``."""

from collections.abc import Callable, Sequence
from typing import Any

torch_version: str  # the torch this was compiled against; tracing/native.py refuses any other

class FunctionModeBase:
    """Base of ``tracing.native.NativeFunctionMode``: its ``__torch_function__`` lookup answers in C++."""

def start(
    *,
    correlation_kind: int | None,
    correlation_push: int | None,  # C function addresses (CorrelationTarget.correlation_functions); None
    correlation_pop: int | None,  # exactly where correlation_kind is None
    log_pushes: bool = False,
    modules: Sequence[tuple[Any, int]],
    functions: dict[Callable[..., Any], str],
    sample_names: frozenset[str] | None,
    all_functions: bool = False,
    rearmed_copy: Callable[..., Any],
    api_name: Callable[..., Any],
    push_mode: Callable[..., Any],
    pop_mode: Callable[..., Any],
    routing_mode_below: Callable[[], Any],
    sample_key: Callable[..., Any] | None,
    singletons: tuple[type, type, type],
    running_before: Sequence[int],
) -> None:
    """Record a pass on this thread (``tracing.native.NativePass`` documents every keyword)."""

def stop() -> None:
    """Remove the op callback and the configuration (idempotent); the rows stay until take()."""

def running() -> bool: ...
def enter_module(module: Any) -> None:
    """A forward of a profiled module begins."""

def exit_module(module: Any) -> None:
    """A forward of a profiled module ended."""

def add_modules(modules: Sequence[tuple[Any, int]]) -> None:
    """Modules discovered during the running pass join the hierarchy (RuntimeError outside a pass)."""

def take() -> dict[str, Any]:
    """The recorded pass: every column as bytes, the name lists, samples, threads and push counters."""

def sample_key_bytes(value: Any) -> bytes | None:
    """The C++ sample key of ``value``, or None where the Python keyer decides."""
