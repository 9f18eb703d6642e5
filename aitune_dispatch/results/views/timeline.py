"""When each op ran on the host clock: the timeline that traces lay kernels against."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ... import schema
from .accounting import ResultTables


def _timed_ops(ops: pa.Table) -> pa.Table:
    stamped = ops.filter(pc.greater(ops["start_ns"], 0))
    end = pc.max_element_wise(stamped["end_ns"], stamped["start_ns"])  # an op an exception left open
    return pa.table([stamped["op_id"], stamped["start_ns"], end, stamped["thread"]], schema=schema.OP_TIMES)


def _ops_from_cpu_activity(result: ResultTables) -> pa.Table:
    rows = result.activity.filter(
        pc.and_(pc.equal(result.activity["kind"], schema.KIND_CPU_OP), pc.is_valid(result.activity["op_id"]))
    )
    spans = rows.group_by("op_id").aggregate([("start_ns", "min"), ("end_ns", "max")])
    spans = spans.join(result.ops.select(["op_id", "thread"]), "op_id", join_type="left outer")
    columns = spans.select(["op_id", "start_ns_min", "end_ns_max", "thread"])
    return columns.rename_columns(schema.OP_TIMES.names).cast(schema.OP_TIMES)


def op_times(result: ResultTables) -> pa.Table:
    """Host-clock ``(op_id, start_ns, end_ns, thread)`` of every op whose time is known.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    pyarrow.Table
        Schema ``schema.OP_TIMES``: from the ops table's own ``start_ns``/``end_ns`` where it has
        them; otherwise, for the CPU activity source, from each op's CPU "kernel" rows (timed inside
        the same dispatch). Ops of a CUDA result without host timestamps are left out.
    """
    if "start_ns" in result.ops.column_names and "end_ns" in result.ops.column_names:
        return _timed_ops(result.ops)
    kinds = set(result.activity["kind"].unique().to_pylist()) if result.activity.num_rows else set()
    if schema.KIND_CPU_OP in kinds:
        return _ops_from_cpu_activity(result)
    return schema.OP_TIMES.empty_table()
