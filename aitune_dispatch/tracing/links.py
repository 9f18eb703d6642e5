"""Links what autograd's engine and ``torch.optim`` run to what the user wrote: an op run in backward gets
the module and functional call of the forward op that created its autograd node, and the ops of an
optimizer's ``step()`` or ``zero_grad()`` a call named for it. A pure function of one pass's tables, run
once after the pass, the same for both tracing backends (``docs/design.md``, "Backward and optimizer")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from .. import encoded, schema
from .contract import TraceTables

# a (thread, sequence number) key: torch numbers the nodes of each thread from 0, one per node created
_SEQ_BITS = 40
_NOT_FOUND = -1


def _ints(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.to_numpy(), dtype=np.int64)


def linked(trace: TraceTables) -> TraceTables:
    """``trace`` with its ``links`` filled (schema ``OP_LINKS``) and a call appended per optimizer scope.

    Parameters
    ----------
    trace:
        One pass's tables as a tracing backend hands them back.

    Returns
    -------
    TraceTables
        The same tables where no op ran in backward or in an optimizer scope; else ``calls`` with one row
        per scope (named ``AdamW.step``: the part of torch's scope name after ``#``) and ``links`` with one
        row per backward or optimizer op.
    """
    if not (trace.backward_ops.num_rows or trace.user_scopes.num_rows):
        return trace
    calls, optimizer = _optimizer_links(trace)
    links = pa.concat_tables([_backward_links(trace), optimizer])
    if links.num_rows:
        links = links.take(pa.array(np.argsort(_ints(links["op_id"]), kind="stable"), pa.int64()))
    return dataclasses.replace(trace, calls=calls, links=links)


def _links(op_ids: np.ndarray, modules: np.ndarray, calls: np.ndarray, attribution: str) -> pa.Table:
    return pa.table(
        {
            "op_id": pa.array(op_ids, pa.int64()),
            "module_id": pa.array(modules, pa.int64()),
            "call_id": pa.array(calls, pa.int64()),
            "attribution": pa.array(np.full(len(op_ids), attribution, dtype=object), pa.string()),
        },
        schema=schema.OP_LINKS,
    )


def _created_by(nodes: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Sorted ``(thread, seq)`` keys of every node the forward ops created, and the op that created each."""
    first, end = _ints(nodes["first_seq"]), _ints(nodes["end_seq"])
    counts = np.maximum(end - first, 0)
    total = int(counts.sum())
    offsets = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    seqs = np.repeat(first, counts) + offsets
    keys = (np.repeat(_ints(nodes["thread"]), counts) << _SEQ_BITS) | seqs
    ops = np.repeat(_ints(nodes["op_id"]), counts)
    keys, first_claim = np.unique(keys, return_index=True)  # one claim per node; the first if several
    return keys, ops[first_claim]


def _backward_links(trace: TraceTables) -> pa.Table:
    """One link per op run in backward: the module and call of the op whose node it ran in, where one did."""
    backward = trace.backward_ops
    if not backward.num_rows:
        return schema.empty(schema.OP_LINKS)
    op_ids, seqs = _ints(backward["op_id"]), _ints(backward["node_seq"])
    threads = np.maximum(_ints(backward["forward_thread"]), 0)  # unknown: the profiling thread, index 0
    keys, creators = _created_by(trace.autograd_nodes)
    queries = (threads << _SEQ_BITS) | np.maximum(seqs, 0)
    forward = np.full(len(queries), _NOT_FOUND, dtype=np.int64)
    if len(keys):
        pos = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
        found = (keys[pos] == queries) & (seqs >= 0)
        forward = np.where(found, creators[pos], _NOT_FOUND)
    # op ids are the ops table's row numbers
    modules = np.where(forward >= 0, _ints(trace.ops["module_id"])[np.maximum(forward, 0)], schema.NO_MODULE)
    calls = np.where(forward >= 0, _ints(trace.ops["call_id"])[np.maximum(forward, 0)], schema.NO_CALL)
    return _links(op_ids, modules, calls, schema.ATTRIBUTION_BACKWARD)


def _optimizer_links(trace: TraceTables) -> tuple[pa.Table, pa.Table]:
    """The calls with one row appended per optimizer scope, and a link for every op that began inside one
    on the scope's thread."""
    scopes = trace.user_scopes
    if not scopes.num_rows:
        return trace.calls, schema.empty(schema.OP_LINKS)
    order = np.lexsort((_ints(scopes["start_ns"]), _ints(scopes["thread"])))
    scopes = scopes.take(pa.array(order, pa.int64()))
    names = [str(name).split("#", 1)[-1] for name in scopes["name"].to_pylist()]
    scope_threads, starts, ends = _ints(scopes["thread"]), _ints(scopes["start_ns"]), _ints(scopes["end_ns"])
    call_ids = np.arange(len(names), dtype=np.int64) + trace.calls.num_rows
    added = pa.table(
        {
            "call_id": call_ids,
            "function_name": pa.array(names, pa.string()),
            "parent_call_id": np.full(len(names), schema.NO_CALL, np.int64),
            "module_id": np.full(len(names), schema.NO_MODULE, np.int64),
            "start_ns": starts,
            "end_ns": ends,
            "thread": scope_threads,
            "sample": np.full(len(names), schema.NO_SAMPLE, np.int64),
        }
    )
    calls = encoded.encoded(
        pa.concat_tables([encoded.decoded(trace.calls), added.cast(encoded.decoded(trace.calls).schema)])
    )
    op_ids, op_threads, op_starts = _ints(trace.ops["op_id"]), _ints(trace.ops["thread"]), _ints(trace.ops["start_ns"])
    scope_of = np.full(len(op_ids), _NOT_FOUND, dtype=np.int64)
    for thread in np.unique(scope_threads):
        on_thread = np.flatnonzero(scope_threads == thread)
        ops_here = np.flatnonzero(op_threads == thread)
        pos = np.searchsorted(starts[on_thread], op_starts[ops_here], side="right") - 1
        inside = (pos >= 0) & (op_starts[ops_here] <= ends[on_thread][np.maximum(pos, 0)])
        scope_of[ops_here[inside]] = on_thread[pos[inside]]
    inside = scope_of >= 0
    modules = np.full(int(inside.sum()), schema.NO_MODULE, dtype=np.int64)
    return calls, _links(op_ids[inside], modules, call_ids[scope_of[inside]], schema.ATTRIBUTION_OPTIMIZER)
