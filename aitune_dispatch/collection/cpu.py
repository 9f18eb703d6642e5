"""CPU activity source: each aten op, timed in the dispatch handler, is one "kernel" row.

Opt-in through ``device="cpu"``; it is what CI exercises end to end. The kernel name is the op's
name prefixed with ``cpu::`` so it can never be mistaken for a CUDA kernel.
"""

from __future__ import annotations

import time
from array import array

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from .base import Activity

CPU_KERNEL_PREFIX = "cpu::"
_clock_ns = time.perf_counter_ns


class CpuOpTimer:
    """Times every op in the dispatch handler; ops of one thread never overlap there."""

    name = "cpu"
    correlation_kind = -1

    def __init__(self) -> None:
        self._op_ids = array("q")
        self._starts = array("q")
        self._ends = array("q")
        self._names: list[str] = []

    def start(self) -> None:
        """Nothing to enable: the clock is always there."""

    def op_started(self, op_id: int, op: str) -> None:
        """Note the op's start time."""
        self._op_ids.append(op_id)
        self._names.append(op)
        self._ends.append(0)
        self._starts.append(_clock_ns())

    def op_finished(self, op_id: int) -> None:
        """Note the op's end time."""
        end = _clock_ns()
        # ops are not nested in the handler, so the newest open op with this id is the last row
        pos = len(self._op_ids) - 1
        while pos >= 0 and self._op_ids[pos] != op_id:
            pos -= 1
        if pos >= 0:
            self._ends[pos] = end

    def stop(self) -> None:
        """Nothing to disable."""

    def activity(self) -> Activity:
        """One kernel row per op, correlated to the op by its own id."""
        n = len(self._op_ids)
        return _op_activity(
            pa.array(np.frombuffer(self._op_ids, np.int64) if n else np.empty(0, np.int64)),
            pa.array(self._names, pa.string()),
            pa.array(np.frombuffer(self._starts, np.int64) if n else np.empty(0, np.int64)),
            pa.array(np.frombuffer(self._ends, np.int64) if n else np.empty(0, np.int64)),
        )


def activity_from_ops(ops: pa.Table) -> Activity:
    """The CPU activity of a pass whose ops were timed by the tracer itself (the native op tracer)."""
    return _op_activity(ops["op_id"], ops["op"], ops["start_ns"], ops["end_ns"])


def _op_activity(ids: pa.Array, names: pa.Array, starts: pa.Array, ends: pa.Array) -> Activity:
    n = len(ids)
    kernels = pa.Table.from_arrays(
        [
            ids,
            pc.binary_join_element_wise(CPU_KERNEL_PREFIX, names, ""),
            starts,
            ends,
            pa.array(np.full(n, schema.CPU_STREAM, np.int32)),
            pa.array(np.full(n, schema.CPU_STREAM, np.int64)),
            pa.array(np.full(n, "cpu_op", object), pa.string()),
        ],
        schema=schema.KERNELS,
    )
    correlation = pa.Table.from_arrays([ids, ids], schema=schema.CORRELATION)
    return Activity(kernels=kernels, correlation=correlation, source=CpuOpTimer.name)
