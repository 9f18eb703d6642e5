"""Puts activity timestamps on the host clock during collection, so nothing downstream corrects clocks
(``docs/design.md``, "The clock")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa


@dataclass(frozen=True)
class HostClock:
    """Maps CUPTI timestamps onto ``perf_counter_ns``: ``host = host0 + (ts - ts0) / rate``, the rate from
    two clock pairs around the pass (Kineto may leave CUPTI counting TSC ticks)."""

    host0: int
    ts0: int
    ticks_per_ns: float

    def convert(self, kernels: pa.Table) -> pa.Table:
        """``kernels`` (or launches: any table with start_ns / end_ns) with both on the host clock, in ns."""
        for name in ("start_ns", "end_ns"):
            ticks = np.asarray(kernels[name].to_numpy(), dtype=np.int64) - self.ts0
            host = self.host0 + (
                ticks if self.ticks_per_ns == 1.0 else np.rint(ticks / self.ticks_per_ns).astype(np.int64)
            )
            kernels = kernels.set_column(kernels.schema.get_field_index(name), name, pa.array(host, pa.int64()))
        return kernels


def host_clock(start: tuple[int, int] | None, end: tuple[int, int] | None) -> HostClock:
    """The clock mapping from two (host ns, CUPTI timestamp) pairs; a rate within 0.1% of 1 is 1."""
    if start is None:
        return HostClock(0, 0, 1.0)
    rate = 1.0
    if end is not None and end[0] > start[0]:
        rate = (end[1] - start[1]) / (end[0] - start[0])
        if abs(rate - 1.0) < 1e-3 or rate <= 0:
            rate = 1.0
    return HostClock(start[0], start[1], rate)
