"""The clock: activity timestamps on the host clock, and the offset of results that were not.

Collection owns the clock (``docs/design.md``, "The clock"): the CUDA source converts CUPTI
timestamps onto ``time.perf_counter_ns()`` with :class:`HostClock` and records
``activity_minus_host_ns = 0`` in the result's metadata, so nothing downstream corrects clocks.
:func:`activity_minus_host_ns` answers for any result, including hand-made ones and results that
carry no such fact: a renderer asks it how far activity timestamps sit from host timestamps and
subtracts that, never estimating anything itself. Pure Arrow and numpy, no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema

# launches whose activity starts within this long after their op starts read as one clock
SAME_CLOCK_WINDOW_NS = 1_000_000_000


@dataclass(frozen=True)
class HostClock:
    """Maps CUPTI timestamps onto the host's ``perf_counter_ns``: ``host = host0 + (ts - ts0) / rate``.

    CUPTI's timestamps are nanoseconds unless a client registered a timestamp callback: Kineto
    (torch.profiler) registers one that counts TSC ticks, and it stays registered after it stops.
    Two clock pairs taken around the pass give the rate, so durations are nanoseconds either way and
    every timestamp lands on the host clock of the trace.
    """

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


def _launch_gaps(activity: pa.Table, ops: pa.Table) -> np.ndarray:
    """Activity start minus its op's host start, for device activity whose op has a host time."""
    if "start_ns" not in ops.column_names or activity.num_rows == 0:
        return np.empty(0, np.int64)
    on_device = pc.and_(
        pc.and_(pc.not_equal(activity["kind"], schema.KIND_CPU_OP), pc.greater_equal(activity["device"], 0)),
        pc.is_valid(activity["op_id"]),
    )
    launched = activity.filter(pc.fill_null(on_device, False)).select(["op_id", "start_ns"])
    timed = ops.filter(pc.greater(ops["start_ns"], 0)).select(["op_id", "start_ns"])
    joined = launched.join(timed, "op_id", join_type="inner", right_suffix="_op")
    return np.asarray(joined["start_ns"].to_numpy(), np.int64) - np.asarray(joined["start_ns_op"].to_numpy(), np.int64)


def activity_minus_host_ns(
    activity: pa.Table, ops: pa.Table, metadata: Mapping[str, str], explicit_ns: int | None = None
) -> tuple[int, str]:
    """How far a result's device timestamps sit from its host timestamps, and how that is known.

    Parameters
    ----------
    activity, ops:
        The result's joined activity (schema ``ACTIVITY``) and ops (``OPS``; ``start_ns`` optional).
    metadata:
        The result's metadata: ``metadata[schema.META_CLOCK_OFFSET]`` is the recorded offset
        (``"0"`` for every run recorded since timestamps are converted during collection).
    explicit_ns:
        An offset the caller knows; it wins.

    Returns
    -------
    tuple[int, str]
        ``(activity clock - host clock in ns, where it came from)``: ``"argument"``, the metadata
        key, ``"assumed: same clock"`` (every launch starts within a second after its op, or nothing
        says otherwise), or ``"estimated: ..."`` from the smallest launch gap.
    """
    if explicit_ns is not None:
        return int(explicit_ns), "argument"
    recorded = metadata.get(schema.META_CLOCK_OFFSET)
    if recorded not in (None, ""):
        return int(recorded), f"metadata[{schema.META_CLOCK_OFFSET!r}]"
    gaps = _launch_gaps(activity, ops)
    if len(gaps) == 0 or bool(np.all((gaps >= 0) & (gaps <= SAME_CLOCK_WINDOW_NS))):
        return 0, "assumed: same clock"
    return int(gaps.min()), "estimated: earliest kernel starts as its op starts"
