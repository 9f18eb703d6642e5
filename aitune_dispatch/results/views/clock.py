"""How far a result's device timestamps sit from its host timestamps, answered for any result
(hand-made and offset-less ones too) so a renderer subtracts it and never estimates
(``docs/design.md``, "The clock")."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ... import schema

# launches whose activity starts within this long after their op starts read as one clock
SAME_CLOCK_WINDOW_NS = 1_000_000_000


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
