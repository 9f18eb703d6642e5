"""The CPU activity source (``device="cpu"``, what CI runs end to end): each op the tracer times is one
"kernel" row named ``cpu::<op>``, never mistaken for a CUDA kernel."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import encoded, schema
from ..schema import CPU_KERNEL_PREFIX
from .base import Activity, torch_profiler_active

__all__ = ["CPU_KERNEL_PREFIX", "CpuOpTimer", "activity_from_ops"]


class CpuOpTimer:
    """The CPU activity source; it correlates nothing, as the op rows are the activity."""

    label = "CPU op timer"

    name = "cpu"
    correlation_kind = schema.NO_CORRELATION

    def __init__(self) -> None:
        self._started = False

    def start(self) -> None:
        """Nothing to enable (the clock is always there); refuses while torch.profiler collects."""
        if torch_profiler_active():
            raise RuntimeError(
                "torch.profiler is collecting: its callbacks would run inside the CPU op timer's brackets "
                "and add to every op's time, so profile(device='cpu') cannot run inside a "
                "torch.profiler.profile() block; run them one after the other"
            )
        self._started = True

    def op_started(self, op_id: int, op: str) -> None:
        """Not called: ``correlation_kind`` is negative."""

    def op_finished(self, op_id: int) -> None:
        """Not called: ``correlation_kind`` is negative."""

    def scope_entered(self, context_id: int) -> None:
        """Not called: ``correlation_kind`` is negative."""

    def scope_exited(self) -> None:
        """Not called: ``correlation_kind`` is negative."""

    def correlation_functions(self) -> None:
        """None: nothing is pushed."""

    def stop(self) -> None:
        """Nothing to disable; fails where torch.profiler began collecting during the pass. Idempotent."""
        started, self._started = self._started, False
        if started and torch_profiler_active():
            raise RuntimeError(
                "torch.profiler was started while profile() was collecting: its callbacks ran inside the CPU "
                "op timer's brackets, so this run's op times include them; run them one after the other"
            )

    def activity(self, ops: pa.Table) -> Activity:
        """One kernel row per recorded op, correlated to the op by its own id."""
        return activity_from_ops(ops)


def activity_from_ops(ops: pa.Table) -> Activity:
    """The CPU activity of a pass: every op the tracer recorded and timed."""
    return _op_activity(ops["op_id"], ops["op"], ops["start_ns"], ops["end_ns"])


def _op_activity(ids: pa.Array, names: pa.Array, starts: pa.Array, ends: pa.Array) -> Activity:
    """One row per op: ``cpu::<op>`` named once per distinct op (dictionary-encoded, as the op names are)."""
    n = len(ids)
    kernels = pa.Table.from_arrays(
        [
            ids,
            encoded.map_values(names, lambda ops: pc.binary_join_element_wise(CPU_KERNEL_PREFIX, ops, "")),
            starts,
            ends,
            pa.array(np.full(n, schema.CPU_STREAM, np.int32)),
            pa.array(np.full(n, schema.CPU_STREAM, np.int64)),
            encoded.constant(schema.KIND_CPU_OP, n),
        ],
        schema=schema.KERNELS,
    )
    correlation = pa.Table.from_arrays([ids, ids], schema=schema.CORRELATION)
    return Activity(kernels=kernels, correlation=correlation, source=CpuOpTimer.name)
