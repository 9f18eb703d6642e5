"""The tracing ↔ collection contract, and what a tracing backend hands back after a pass.

Tracing gives every aten op an op id and every module forward / functional call a scope context;
an activity source that can tag activity with them (CUPTI external correlation ids) says so with a
non-negative ``correlation_kind`` and takes the ids through the four callbacks below. The native
backend pushes the same ids itself, in C++, under that kind, through the C entry points the source
hands it (``correlation_functions``), so a source of another vendor brings its own; the pure-Python
backend calls the callbacks. A source with ``correlation_kind == schema.NO_CORRELATION`` (the CPU
source) is told nothing. Scope contexts are pushed as ``schema.SCOPE_BASE + context id`` (``docs/design.md``,
"Correlation: what CUPTI needs").
"""

from __future__ import annotations

from dataclasses import dataclass
from types import TracebackType
from typing import Protocol

import pyarrow as pa
from torch import nn

from ..schema import FunctionData


class CorrelationTarget(Protocol):
    """Where op ids and scope contexts go while the pass runs, on the thread that runs it."""

    # CUPTI external-correlation kind that op and scope ids are pushed with; schema.NO_CORRELATION
    # (-1): nothing is pushed
    correlation_kind: int

    def op_started(self, op_id: int, op: str) -> None:
        """An op is about to run."""

    def op_finished(self, op_id: int) -> None:
        """The op returned or raised."""

    def scope_entered(self, context_id: int) -> None:
        """A module forward or functional call began; ``context_id`` indexes the contexts table."""

    def scope_exited(self) -> None:
        """The innermost scope ended."""

    def correlation_functions(self) -> tuple[int, int] | None:
        """``(push, pop)``: addresses of C functions ``int push(int kind, uint64_t id)`` and
        ``int pop(int kind, uint64_t *last_id)`` (CUPTI's ``cuptiActivityPush/PopExternalCorrelationId``)
        that the native tracer calls instead of the callbacks above; None where nothing is pushed.
        Asked only where ``correlation_kind >= 0``, as the native pass starts."""


@dataclass(frozen=True)
class ThreadInfo:
    """A thread that reported a traced event; ``index`` is the ``thread`` column of the tables.

    ``traced`` is False for threads that were already running when ``profile()`` began (other than
    the profiling thread, index 0): they are not the profiled function's, and their module forwards
    are counted in ``skipped_forwards`` instead of recorded. ``native_id`` is the OS thread id
    (``threading.get_native_id()``, Linux's ``gettid``), the id CUPTI's API records carry, so that
    launches can be put on the thread that made them. The saved results do not keep it.
    """

    index: int
    name: str
    traced: bool
    skipped_forwards: int
    native_id: int


@dataclass(frozen=True)
class TraceTables:
    """One traced pass as Arrow tables (schemas ``OPS``, ``CALLS``, ``MODULE_CALLS``, ``CONTEXTS``)."""

    ops: pa.Table
    calls: pa.Table
    module_calls: pa.Table
    contexts: pa.Table
    threads: tuple[ThreadInfo, ...]  # by index; the profiling thread is index 0
    scopes_pushed: int  # scope contexts pushed as correlation ids
    ops_pushed: int  # op ids pushed as correlation ids (every op but views)


class Tracer(Protocol):
    """A tracing backend: the function mode, the op recorder and the per-thread stacks of one pass.

    Entering installs the modes and the op recorder on the calling thread; exiting removes them,
    also on exceptions. The module hooks report forwards through :meth:`module_entered` and
    :meth:`module_exited`, which ignore modules outside the profiled hierarchy.
    """

    name: str
    function_mode: object  # the TorchFunctionMode it pushes (the fast-path gates must not see it)

    def __enter__(self) -> Tracer: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    def module_entered(self, module: nn.Module) -> None:
        """A forward of ``module`` begins on this thread."""

    def module_exited(self, module: nn.Module) -> None:
        """A forward of ``module`` ended (returned or raised) on this thread."""

    def tables(self) -> TraceTables:
        """The pass as Arrow tables, once it has ended."""

    def function_data(self) -> FunctionData:
        """The collected samples, in the reference's ``function_data`` shape."""
