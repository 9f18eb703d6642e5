"""Joining: kernels ⋈ correlation ⋈ ops ⋈ calls ⋈ modules, vectorised, one row per kernel.

Pure functions over Arrow tables (no torch, no per-row Python), unit-tested on synthetic tables.
A kernel whose correlation id no op claimed keeps a null ``op_id`` and the sentinels
``module_id = call_id = -1``; so does the module/function of an op outside the hierarchy or
outside any functional call.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from . import schema


def _first_per_correlation(correlation: pa.Table, column: str) -> pa.Table:
    if correlation.num_rows == 0:
        return correlation
    grouped = correlation.group_by("correlation_id").aggregate([(column, "min")])
    return grouped.rename_columns(["correlation_id", column])


def _fill_from_scope(rows: pa.Table, scope_correlation: pa.Table, contexts: pa.Table) -> pa.Table:
    """Where no op claimed a kernel, take module and call from the scope its launch ran in."""
    innermost = scope_correlation.group_by("correlation_id").aggregate([("context_id", "max")])
    innermost = innermost.rename_columns(["correlation_id", "context_id"])
    scoped = contexts.rename_columns(["context_id", "scope_module_id", "scope_call_id"])
    rows = rows.join(innermost, "correlation_id", join_type="left outer")
    rows = rows.join(scoped, "context_id", join_type="left outer")
    no_op = pc.is_null(rows["op_id"])
    module_id = pc.if_else(no_op, rows["scope_module_id"], rows["module_id"])
    call_id = pc.if_else(no_op, rows["scope_call_id"], rows["call_id"])
    rows = rows.set_column(rows.schema.get_field_index("module_id"), "module_id", module_id)
    rows = rows.set_column(rows.schema.get_field_index("call_id"), "call_id", call_id)
    return rows.drop_columns(["context_id", "scope_module_id", "scope_call_id"])


def join_activity(
    kernels: pa.Table,
    correlation: pa.Table,
    ops: pa.Table,
    calls: pa.Table,
    modules: pa.Table,
    scope_correlation: pa.Table | None = None,
    contexts: pa.Table | None = None,
) -> pa.Table:
    """One row per kernel with its op, module and innermost functional call (schema ACTIVITY).

    A kernel launched outside any aten op (a Triton kernel, a CUDA graph replay) has no op; when
    ``scope_correlation`` and ``contexts`` are given it still gets the module and functional call
    its launch ran in.
    """
    rows = kernels.join(_first_per_correlation(correlation, "op_id"), "correlation_id", join_type="left outer")
    rows = rows.join(ops.select(["op_id", "op", "module_id", "call_id", "thread"]), "op_id", join_type="left outer")
    if scope_correlation is not None and contexts is not None and scope_correlation.num_rows:
        rows = _fill_from_scope(rows, scope_correlation, contexts)
    rows = rows.join(calls.select(["call_id", "function_name"]), "call_id", join_type="left outer")
    rows = rows.join(modules.select(["module_id", "module_name"]), "module_id", join_type="left outer")
    rows = rows.sort_by([("start_ns", "ascending"), ("correlation_id", "ascending")])
    duration_us = pc.divide(pc.cast(pc.subtract(rows["end_ns"], rows["start_ns"]), pa.float64()), 1000.0)
    columns = {
        "correlation_id": rows["correlation_id"],
        "kernel": rows["name"],
        "kind": rows["kind"],
        "start_ns": rows["start_ns"],
        "end_ns": rows["end_ns"],
        "kernel_us": duration_us,
        "device": rows["device"],
        "stream": rows["stream"],
        "op_id": rows["op_id"],
        "op": rows["op"],
        "module_id": pc.fill_null(rows["module_id"], schema.NO_MODULE),
        "module_name": rows["module_name"],
        "call_id": pc.fill_null(rows["call_id"], schema.NO_CALL),
        "function_name": rows["function_name"],
        "thread": rows["thread"],
    }
    return pa.table(columns).cast(schema.ACTIVITY)


def attributed_mask(activity: pa.Table) -> pa.ChunkedArray:
    """Rows the spec reports: a profiled module and a functional call both enclose the op."""
    return pc.and_(
        pc.greater_equal(activity["module_id"], 0), pc.greater_equal(activity["call_id"], 0)
    )
