"""What every activity source provides: op brackets during the pass, Arrow tables after it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa


@dataclass(frozen=True)
class Activity:
    """Activity records of one pass, in the schemas :data:`schema.KERNELS` / :data:`schema.CORRELATION`."""

    kernels: pa.Table
    correlation: pa.Table
    source: str
    dropped_records: int = 0
    warnings: tuple[str, ...] = field(default_factory=tuple)


class ActivitySource(Protocol):
    """An activity source; ``start``/``stop`` bracket the recorded pass, ``stop`` always runs."""

    name: str

    def start(self) -> None:
        """Begin collecting; raise with the reason and the fix if collection is impossible."""

    def op_started(self, op_id: int, op: str) -> None:
        """An op is about to run on this thread (see :class:`tracing.OpObserver`)."""

    def op_finished(self, op_id: int) -> None:
        """The op has returned or raised."""

    def stop(self) -> None:
        """Stop collecting and restore every global state touched by ``start``; idempotent."""

    def activity(self) -> Activity:
        """The collected records, after ``stop``."""
