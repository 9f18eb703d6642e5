"""What a timeline trace lays out: module forwards, functional calls and ops as host-clock spans that
nest by time on one track per (rank, recorder thread), and each CUDA launch record put on a recorder
thread, since CUPTI names its own thread id (``docs/design.md``, "Threads"). ``reports/perfetto.py``
only lays them out."""

from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.compute as pc

from ... import schema
from .accounting import ResultTables
from .modules import module_labels
from .timeline import op_times


def _ranks(table: pa.Table) -> list[int | None]:
    """Each row's rank (a merged result's ``rank`` column), None for every row of an unmerged one."""
    if schema.RANK_COLUMN in table.column_names:
        return table[schema.RANK_COLUMN].to_pylist()
    return [None] * table.num_rows


def is_gpu(kind: str | None, device: int | None) -> bool:
    """Whether an activity row of ``kind`` on ``device`` ran on a GPU (kernel, memcpy, memset), not a CPU op."""
    return kind != schema.KIND_CPU_OP and device is not None and device >= 0


def _rows_table(rows: list[tuple[object, ...]], target: pa.Schema) -> pa.Table:
    """Row tuples in ``target``'s column order as a table of ``target`` (empty rows: an empty table)."""
    columns = zip(*rows) if rows else ([] for _ in target.names)
    return pa.table(dict(zip(target.names, map(list, columns))), schema=target)


def module_spans(result: ResultTables) -> pa.Table:
    """One span per module forward, as the trace's ``module`` slices draw it.

    Parameters
    ----------
    result:
        A result.

    Returns
    -------
    pyarrow.Table
        Schema ``schema.MODULE_SPANS``, a row per ``module_calls`` row in its order: the module's
        label (its id as text where the module is unknown) and type, the end no earlier than the
        start (a forward an exception left open).
    """
    labels = module_labels(result)
    rows = result.module_calls.to_pydict()
    ids = rows["module_id"]
    columns = {
        "module_id": ids,
        "name": [labels.get(mid, (str(mid), ""))[0] for mid in ids],
        "module_type": [labels.get(mid, ("", ""))[1] for mid in ids],
        "start_ns": rows["start_ns"],
        "end_ns": [max(end, start) for start, end in zip(rows["start_ns"], rows["end_ns"])],
        "thread": rows["thread"],
        "rank": _ranks(result.module_calls),
    }
    return pa.table(columns, schema=schema.MODULE_SPANS)


def call_spans(result: ResultTables) -> pa.Table:
    """One span per timed functional call, as the trace's ``functional`` slices draw it.

    Parameters
    ----------
    result:
        A result.

    Returns
    -------
    pyarrow.Table
        Schema ``schema.CALL_SPANS``, the ``calls`` rows in order, without the calls attributed from
        compiled code or a graph capture (never timed: start and end 0); ``module`` is the
        module's label, the end no earlier than the start.
    """
    labels = module_labels(result)
    rows = result.calls.to_pydict()
    fields = zip(
        rows["call_id"],
        rows["function_name"],
        rows["module_id"],
        rows["start_ns"],
        rows["end_ns"],
        rows["thread"],
        _ranks(result.calls),
    )
    kept = [
        (cid, name, mid, labels.get(mid, ("", ""))[0], start, max(end, start), thread, rank)
        for cid, name, mid, start, end, thread, rank in fields
        if start or end
    ]
    return _rows_table(kept, schema.CALL_SPANS)


def op_spans(result: ResultTables) -> pa.Table:
    """One span per op whose host time is known (:func:`~.timeline.op_times`), with the CPU row that is it.

    With the CPU activity source an op's activity row is its measured time: the trace writes the
    two once, as the op's span, and ``activity_row`` says which row that is (the op's last
    ``cpu_op`` row; an op without a time keeps its row as a slice of its own).

    Parameters
    ----------
    result:
        A result.

    Returns
    -------
    pyarrow.Table
        Schema ``schema.OP_SPANS``, the timed ``ops`` rows in order, times and thread from
        ``op_times``; ``activity_row`` the index into ``result.activity`` of that row, null where none.
    """
    times = op_times(result).to_pydict()
    timed = {
        op_id: (start, end, thread)
        for op_id, start, end, thread in zip(times["op_id"], times["start_ns"], times["end_ns"], times["thread"])
    }
    activity = result.activity
    is_cpu_op = pc.and_(pc.equal(activity["kind"], schema.KIND_CPU_OP), pc.is_valid(activity["op_id"]))
    is_cpu_op = pc.fill_null(is_cpu_op, False)
    # one array: pyarrow 25's indices_nonzero crashes (SIGSEGV) on a chunked array of no chunks
    whole = pa.concat_arrays(is_cpu_op.chunks) if is_cpu_op.num_chunks else pa.array([], pa.bool_())
    indices = pc.indices_nonzero(whole).to_pylist()
    cpu_row = dict(zip(pc.filter(activity["op_id"], is_cpu_op).to_pylist(), indices))  # the last row of each op
    rows = result.ops.select(["op_id", "op", "call_id", "module_id"]).to_pydict()
    ops = zip(rows["op_id"], rows["op"], rows["call_id"], rows["module_id"], _ranks(result.ops))
    kept = [
        (op_id, name, call_id, module_id, *timed[op_id], rank, cpu_row.get(op_id))
        for op_id, name, call_id, module_id, rank in ops
        if op_id in timed
    ]
    return _rows_table(kept, schema.OP_SPANS)


def launch_threads(activity: pa.Table, launches: pa.Table) -> pa.Table:
    """The recorder thread each CUDA launch record belongs to, and the op that claimed it.

    A launch is claimed by the first GPU row (kernel, memcpy, memset) of its rank with its
    correlation id: that row's thread and op. A launch no row claimed, or whose row has no
    thread, takes the thread most claimed launches of its CUPTI thread (``os_thread``, per rank)
    ran on, the first seen of a tie; null where none did.

    Parameters
    ----------
    activity:
        The joined activity (schema ``ACTIVITY``; a merge's ``rank`` column read where present).
    launches:
        The launch records (schema ``LAUNCHES``, likewise).

    Returns
    -------
    pyarrow.Table
        Schema ``schema.LAUNCH_THREADS``, one row per ``launches`` row in its order.
    """
    rows = activity.select(["correlation_id", "kind", "device", "thread", "op_id"]).to_pydict()
    claimed: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    fields = zip(rows["correlation_id"], rows["kind"], rows["device"], rows["thread"], rows["op_id"])
    for rank, (correlation, kind, device, thread, op_id) in zip(_ranks(activity), fields):
        if is_gpu(kind, device):
            claimed.setdefault((rank or 0, correlation), (thread, op_id))
    keys = [
        (rank or 0, correlation, os_thread)
        for rank, correlation, os_thread in zip(
            _ranks(launches), launches["correlation_id"].to_pylist(), launches["os_thread"].to_pylist()
        )
    ]
    owners = [claimed.get((rank, correlation), (None, None)) for rank, correlation, _ in keys]
    votes: dict[tuple[int, int], collections.Counter[int]] = {}
    for (rank, _, os_thread), (thread, _) in zip(keys, owners):
        if thread is not None:
            votes.setdefault((rank, os_thread), collections.Counter())[thread] += 1
    by_os_thread = {key: counter.most_common(1)[0][0] for key, counter in votes.items()}
    threads = [
        thread if thread is not None else by_os_thread.get((rank, os_thread))
        for (rank, _, os_thread), (thread, _) in zip(keys, owners)
    ]
    return pa.table({"thread": threads, "op_id": [op_id for _, op_id in owners]}, schema=schema.LAUNCH_THREADS)
