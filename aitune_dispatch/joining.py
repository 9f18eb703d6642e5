"""Joins kernels ⋈ correlation ⋈ ops ⋈ calls ⋈ modules into one row per kernel, as pure vectorised
functions over Arrow tables (``docs/design.md``, "Correlation: what CUPTI needs" and "Strings in memory")."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import encoded, schema

_MISSING = -1


class DecodedActivity(Protocol):
    """What the join reads of an activity source's decoded records (``collection.base.Activity``)."""

    @property
    def kernels(self) -> pa.Table: ...  # schema KERNELS (KERNELS_WITH_GRAPHS for CUDA sources)

    @property
    def correlation(self) -> pa.Table: ...  # schema CORRELATION: launch -> op id

    @property
    def scope_correlation(self) -> pa.Table: ...  # schema SCOPE_CORRELATION: launch -> scope context


class TracedTables(Protocol):
    """What the join reads of the traced pass (``tracing.contract.TraceTables``)."""

    @property
    def ops(self) -> pa.Table: ...  # schema OPS

    @property
    def calls(self) -> pa.Table: ...  # schema CALLS

    @property
    def contexts(self) -> pa.Table: ...  # schema CONTEXTS

    @property
    def links(self) -> pa.Table: ...  # schema OP_LINKS: backward and optimizer ops (tracing/links.py)


def _ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.to_numpy(), dtype=np.int64)


class _Index:
    """Sorted unique keys with one value each (the first given for a repeated key): bulk lookups."""

    def __init__(self, keys: np.ndarray, values: np.ndarray) -> None:
        if len(keys) > 1 and not np.all(keys[1:] > keys[:-1]):
            order = np.argsort(keys, kind="stable")
            keys, values = keys[order], values[order]
            first = np.ones(len(keys), dtype=bool)
            first[1:] = keys[1:] != keys[:-1]
            keys, values = keys[first], values[first]
        self.keys, self.values = keys, values

    def lookup(self, queries: np.ndarray) -> np.ndarray:
        """The value of each query key, or -1 where the key is absent."""
        if len(self.keys) == 0:
            return np.full(len(queries), _MISSING, dtype=np.int64)
        pos = np.minimum(np.searchsorted(self.keys, queries), len(self.keys) - 1)
        return np.where(self.keys[pos] == queries, self.values[pos], _MISSING)


def _rows_of(ids: np.ndarray, table_ids: np.ndarray) -> np.ndarray:
    """Row number in a table of each id (-1 when absent), for tables keyed by a unique id column."""
    count = len(table_ids)
    if count and table_ids[0] == 0 and table_ids[-1] == count - 1 and np.all(np.diff(table_ids) == 1):
        return np.where((ids >= 0) & (ids < count), ids, _MISSING)  # ids are row numbers (the trace's)
    return _Index(table_ids, np.arange(count, dtype=np.int64)).lookup(ids)


def _take(column: pa.ChunkedArray, rows: np.ndarray) -> pa.Array:
    """``column[rows]`` with null where ``rows`` is -1."""
    indices = pa.array(rows, pa.int64(), mask=rows < 0)
    return pc.take(column, indices)


def _pick(values: np.ndarray, rows: np.ndarray, default: int) -> np.ndarray:
    return np.where(rows >= 0, values[np.maximum(rows, 0)] if len(values) else default, default)


def join(activity: DecodedActivity, trace: TracedTables, modules: pa.Table) -> pa.Table:
    """One row per kernel with its op, module and innermost functional call (schema ACTIVITY); a kernel
    launched outside any op gets the module and call of the scope its launch ran in, one of a linked op
    (run in backward or in an optimizer step) the link's module, call and attribution."""
    kernels, correlation, scope_correlation = activity.kernels, activity.correlation, activity.scope_correlation
    ops, calls, contexts = trace.ops, trace.calls, trace.contexts
    starts = _ints(kernels["start_ns"])
    if len(starts) > 1 and not np.all(starts[1:] >= starts[:-1]):
        kernels = kernels.take(pa.array(np.argsort(starts, kind="stable"), pa.int64()))
    kernel_cids = _ints(kernels["correlation_id"])
    op_ids = _Index(_ints(correlation["correlation_id"]), _ints(correlation["op_id"])).lookup(kernel_cids)
    op_rows = _rows_of(op_ids, _ints(ops["op_id"]))
    module_ids = _pick(_ints(ops["module_id"]), op_rows, schema.NO_MODULE)
    call_ids = _pick(_ints(ops["call_id"]), op_rows, schema.NO_CALL)
    if scope_correlation.num_rows:
        innermost = _Index(_ints(scope_correlation["correlation_id"]), _ints(scope_correlation["context_id"])).lookup(
            kernel_cids
        )
        context_rows = _rows_of(innermost, _ints(contexts["context_id"]))
        no_op = op_rows < 0
        module_ids = np.where(no_op, _pick(_ints(contexts["module_id"]), context_rows, schema.NO_MODULE), module_ids)
        call_ids = np.where(no_op, _pick(_ints(contexts["call_id"]), context_rows, schema.NO_CALL), call_ids)
    attribution = encoded.constant(schema.ATTRIBUTION_TRACE, kernels.num_rows)
    links = trace.links
    if links.num_rows:
        link_rows = _Index(_ints(links["op_id"]), np.arange(links.num_rows, dtype=np.int64)).lookup(op_ids)
        linked = link_rows >= 0
        module_ids = np.where(linked, _pick(_ints(links["module_id"]), link_rows, schema.NO_MODULE), module_ids)
        call_ids = np.where(linked, _pick(_ints(links["call_id"]), link_rows, schema.NO_CALL), call_ids)
        attribution = encoded.of_values(
            np.where(linked, encoded.objects(_take(links["attribution"], link_rows)), schema.ATTRIBUTION_TRACE)
        )
    starts, ends = _ints(kernels["start_ns"]), _ints(kernels["end_ns"])
    columns = {
        "correlation_id": kernels["correlation_id"],
        "kernel": kernels["name"],
        "kind": kernels["kind"],
        "start_ns": kernels["start_ns"],
        "end_ns": kernels["end_ns"],
        "kernel_us": pa.array((ends - starts) / 1000.0, pa.float64()),
        "device": kernels["device"],
        "stream": kernels["stream"],
        "op_id": pa.array(op_ids, pa.int64(), mask=op_rows < 0),
        "op": _take(ops["op"], op_rows),
        "module_id": pa.array(module_ids, pa.int64()),
        "module_name": _take(modules["module_name"], _rows_of(module_ids, _ints(modules["module_id"]))),
        "call_id": pa.array(call_ids, pa.int64()),
        "function_name": _take(calls["function_name"], _rows_of(call_ids, _ints(calls["call_id"]))),
        "thread": _take(ops["thread"], op_rows),
        **_graph_columns(kernels),
        "attribution": attribution,
    }
    return encoded.encoded(pa.table(columns).cast(schema.ACTIVITY))


def _graph_columns(kernels: pa.Table) -> dict[str, pa.ChunkedArray | pa.Array]:
    """``graph_id`` / ``graph_node_id`` of CUDA sources (schema KERNELS_WITH_GRAPHS), else NOT_IN_GRAPH."""
    return {
        name: kernels[name]
        if name in kernels.column_names
        else pa.array(np.full(kernels.num_rows, schema.NOT_IN_GRAPH, np.int64))
        for name, _ in schema.GRAPH_FIELDS
    }
