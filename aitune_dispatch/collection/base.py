"""What every activity source provides: correlation callbacks during the pass, Arrow tables after it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

from .. import schema


@dataclass(frozen=True)
class Activity:
    """Activity records of one pass, in the schemas :data:`schema.KERNELS` / :data:`schema.CORRELATION`
    (and :data:`schema.SCOPE_CORRELATION`, :data:`schema.LAUNCHES`)."""

    kernels: pa.Table
    correlation: pa.Table
    source: str
    dropped_records: int = 0
    warnings: tuple[str, ...] = field(default_factory=tuple)
    # the rate of the source's clock converted onto the host clock (1.0: CUPTI counted nanoseconds)
    clock_ticks_per_ns: float = 1.0
    # launches outside any op, tagged with their scope context
    scope_correlation: pa.Table = field(default_factory=lambda: schema.empty(schema.SCOPE_CORRELATION))
    # empty for sources without API records (the CPU source)
    launches: pa.Table = field(default_factory=lambda: schema.empty(schema.LAUNCHES))


class ActivitySource(Protocol):
    """An activity source; ``start``/``stop`` bracket the recorded pass, ``stop`` always runs."""

    name: str
    # -1 where nothing is pushed
    correlation_kind: int

    def start(self) -> None:
        """Begin collecting; raise with the reason and the fix if collection is impossible."""

    def op_started(self, op_id: int, op: str) -> None:
        """An op is about to run on this thread (see ``tracing.CorrelationTarget``)."""

    def op_finished(self, op_id: int) -> None:
        """The op has returned or raised."""

    def scope_entered(self, context_id: int) -> None:
        """A module forward or functional call began on this thread."""

    def scope_exited(self) -> None:
        """The innermost scope of this thread ended."""

    def correlation_functions(self) -> tuple[int, int] | None:
        """``(push, pop)`` C function addresses for the native tracer, as ``tracing.CorrelationTarget``."""

    def stop(self) -> None:
        """Stop collecting and restore every global state touched by ``start``; idempotent."""

    def activity(self, ops: pa.Table) -> Activity:
        """The collected records, after ``stop``; ``ops`` is the traced pass's op table (schema ``OPS``)."""


def torch_profiler_active() -> bool:
    """True while torch.profiler or the autograd profiler collects on this thread (``docs/design.md``,
    "Coexistence with torch.profiler")."""
    from ..torch_compat import profiler_enabled  # here: the reports read collection without torch installed

    return profiler_enabled()
