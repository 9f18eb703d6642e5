"""The tracing ↔ collection contract, how op ids and scope contexts reach an activity source, and the
tables a tracing backend hands back after a pass (``docs/design.md``, "Correlation: what CUPTI needs")."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol

import pyarrow as pa
from torch import nn

from .. import schema
from ..schema import FunctionData


class CorrelationTarget(Protocol):
    """Where op ids and scope contexts go while the pass runs, on the thread that runs it."""

    # schema.NO_CORRELATION (-1): nothing is pushed
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
        ``int pop(int kind, uint64_t *last_id)`` the native tracer calls instead of the callbacks; None
        where nothing is pushed."""


@dataclass(frozen=True)
class ThreadInfo:
    """A thread that reported a traced event (``docs/design.md``, "Threads"); ``index`` is the tables'
    ``thread`` column; ``native_id`` is not saved."""

    index: int
    name: str
    traced: bool
    skipped_forwards: int
    native_id: int


@dataclass(frozen=True)
class TraceTables:
    """One traced pass as Arrow tables (schemas ``OPS``, ``CALLS``, ``MODULE_CALLS``, ``CONTEXTS``, and those
    that link autograd's backward and the optimizer to the forward: ``AUTOGRAD_NODES``, ``BACKWARD_OPS``,
    ``USER_SCOPES``, ``OP_LINKS``)."""

    ops: pa.Table
    calls: pa.Table
    module_calls: pa.Table
    contexts: pa.Table
    threads: tuple[ThreadInfo, ...]  # by index; the profiling thread is index 0
    scopes_pushed: int  # scope contexts pushed as correlation ids
    ops_pushed: int  # op ids pushed as correlation ids (every op but views)
    # what tracing/links.py links backward and optimizer ops with; empty where no op created a node or
    # ran in backward or in an optimizer step
    autograd_nodes: pa.Table = field(default_factory=lambda: schema.empty(schema.AUTOGRAD_NODES))
    backward_ops: pa.Table = field(default_factory=lambda: schema.empty(schema.BACKWARD_OPS))
    user_scopes: pa.Table = field(default_factory=lambda: schema.empty(schema.USER_SCOPES))
    # filled by tracing.links.linked: ops attributed otherwise than by their stacks (schema OP_LINKS)
    links: pa.Table = field(default_factory=lambda: schema.empty(schema.OP_LINKS))


class Tracer(Protocol):
    """A tracing backend for one pass: entering installs its modes and op recorder on this thread, exiting
    removes them; the module hooks report forwards to it."""

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

    def modules_added(self, modules: Sequence[tuple[nn.Module, int]]) -> None:
        """``(module, module_id)`` pairs discovered during the pass (a root of ``recording()`` without
        a module) join those the tracer was made with."""

    def tables(self) -> TraceTables:
        """The pass as Arrow tables, once it has ended."""

    def later_tables(self) -> Callable[[], TraceTables]:
        """:meth:`tables` to build later, once the pass has ended, holding no module (an observed CUDA
        graph capture keeps it until a ``profile()`` replays the graph)."""

    def function_data(self) -> FunctionData:
        """The collected samples, in the reference's ``function_data`` shape."""
