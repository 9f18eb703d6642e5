"""Every column name and Arrow schema of the package, in one place.

Units are in the names (``_ns`` nanoseconds, ``_us`` microseconds). Sentinels:
``module_id == -1`` means "outside the profiled hierarchy", ``call_id == -1`` means "no
functional call encloses the op", ``sample == -1`` means "no sample was collected for this call",
``stream == -1`` / ``device == -1`` mean "CPU". After the join, a kernel that no op claimed has a
null ``op_id``. ``graph_id == 0`` means "not launched by a CUDA graph" (CUPTI's own convention).
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

NO_MODULE = -1
NO_CALL = -1
NO_SAMPLE = -1
CPU_STREAM = -1
NOT_IN_GRAPH = 0  # graph_id / graph_node_id of a kernel not launched by a CUDA graph
NO_SITE = -1  # site_id of a kernel that no compiled-kernel site claimed
# external correlation ids of scope contexts (module forwards, functional calls) start here; op ids are below
SCOPE_BASE = 1 << 62

# how an activity row got its module, functional call and op (the ``attribution`` column)
ATTRIBUTION_TRACE = "trace"  # the tracer saw the launch: the op or scope it ran in
ATTRIBUTION_INDUCTOR = "inductor"  # an Inductor kernel, from the FX nodes it was generated from
ATTRIBUTION_GRAPH_CAPTURE = "graph_capture"  # a CUDA graph replay, from the launch recorded at capture
ATTRIBUTION_GRAPH_LAUNCH = "graph_launch"  # a replay of a graph captured where profile() could not see it
ATTRIBUTIONS = (ATTRIBUTION_TRACE, ATTRIBUTION_INDUCTOR, ATTRIBUTION_GRAPH_CAPTURE, ATTRIBUTION_GRAPH_LAUNCH)
# the op of a replayed kernel whose capture was not seen: the launch that replayed it
GRAPH_LAUNCH_OP = "cudaGraphLaunch"

# -- activity sources ---------------------------------------------------------------------------
KERNELS = pa.schema(
    [
        ("correlation_id", pa.int64()),
        ("name", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("device", pa.int32()),
        ("stream", pa.int64()),
        ("kind", pa.string()),  # "kernel", "memcpy", "memset" or "cpu_op"
    ]
)
# CUDA sources add the graph a kernel / copy / set was replayed from (0: not from a graph)
GRAPH_FIELDS = [("graph_id", pa.int64()), ("graph_node_id", pa.int64())]
KERNELS_WITH_GRAPHS = pa.schema([*KERNELS, *(pa.field(name, kind) for name, kind in GRAPH_FIELDS)])
CORRELATION = pa.schema([("correlation_id", pa.int64()), ("op_id", pa.int64())])
# launches made outside any aten op (Triton, CUDA graph replays, raw driver calls) still carry the
# scope they ran in: the innermost module forward or functional call, as a context id
SCOPE_CORRELATION = pa.schema([("correlation_id", pa.int64()), ("context_id", pa.int64())])
# CUDA graph nodes seen while graphs were built (collection/graphs.py): a node created during a
# stream capture with the external correlation id on top of the capturing thread's stack (the op
# or scope the launch ran in; -1: none), or a node cloned from an original when a graph was
# instantiated (the ids kernel records carry on replay are the clone's)
GRAPH_NODE_CREATED, GRAPH_NODE_CLONED = 0, 1
NO_EXTERNAL_ID = -1
GRAPH_NODES = pa.schema(
    [
        ("event", pa.int8()),  # GRAPH_NODE_CREATED or GRAPH_NODE_CLONED
        ("graph_id", pa.int64()),
        ("node_id", pa.int64()),
        ("external_id", pa.int64()),  # CREATED: the op id or SCOPE_BASE + context id; NO_EXTERNAL_ID
        ("original_graph_id", pa.int64()),  # CLONED: the node it was cloned from; 0 otherwise
        ("original_node_id", pa.int64()),
        ("node_type", pa.int32()),  # CUgraphNodeType (0: kernel, 1: memcpy, 2: memset, ...)
    ]
)

# -- tracing ------------------------------------------------------------------------------------
OPS = pa.schema(
    [
        ("op_id", pa.int64()),
        ("op", pa.string()),
        ("module_id", pa.int64()),
        ("call_id", pa.int64()),
        ("thread", pa.int64()),
        ("start_ns", pa.int64()),  # host clock (time.perf_counter_ns) around the dispatch
        ("end_ns", pa.int64()),
    ]
)
CALLS = pa.schema(
    [
        ("call_id", pa.int64()),
        ("function_name", pa.string()),
        ("parent_call_id", pa.int64()),
        ("module_id", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("thread", pa.int64()),
        # index into ``function_data[function_name]`` of the call's distinct input sample; NO_SAMPLE
        # where none was collected (a name outside ``function_names``, or a result saved before the
        # column existed: loading fills it)
        ("sample", pa.int64()),
    ]
)
MODULES = pa.schema(
    [
        ("module_id", pa.int64()),
        ("module_name", pa.string()),
        ("module_type", pa.string()),
        ("parent_module_id", pa.int64()),
    ]
)
CONTEXTS = pa.schema([("context_id", pa.int64()), ("module_id", pa.int64()), ("call_id", pa.int64())])
MODULE_CALLS = pa.schema(
    [
        ("module_id", pa.int64()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("thread", pa.int64()),
    ]
)

# Compiled-kernel sites (tracing/compiled.py): one row per kernel launch site of an Inductor-compiled
# graph (a Triton kernel call, or an extern kernel call such as ``extern_kernels.mm``), in the order the
# compiled code runs them, and one row per functional call (or other FX source node) it was generated
# from. ``key`` is what a launch is matched by: the kernel name (Triton), or the aten op that the
# extern call dispatches (``aten::mm``). ``priority``: 0 compiled during this profile(), 1 compiled
# during an earlier one (its modules are this hierarchy's objects).
SITES = pa.schema(
    [
        ("site_id", pa.int64()),
        ("program_id", pa.int64()),  # one compiled graph
        ("position", pa.int64()),  # launch order within the graph
        ("extern", pa.bool_()),
        ("key", pa.string()),
        ("priority", pa.int8()),
    ]
)
SITE_SOURCES = pa.schema(
    [
        ("site_id", pa.int64()),
        ("order", pa.int64()),  # graph position of the source's last FX node (the latest computes the result)
        ("module_id", pa.int64()),  # NO_MODULE: not found in the profiled hierarchy
        ("function_name", pa.string()),  # null: not a functional call
        ("op", pa.string()),  # the aten op the FX nodes were decomposed from (``original_aten``)
        ("source", pa.string()),  # the FX source node (Dynamo's name of the call, e.g. ``linear_1``)
    ]
)
# Replayed CUDA graph nodes resolved to what launched them at capture (provenance.captured_nodes)
CAPTURED_NODES = pa.schema(
    [
        ("graph_id", pa.int64()),  # the ids replayed kernels carry (the exec graph's clone)
        ("graph_node_id", pa.int64()),
        ("capture", pa.int64()),  # which traced pass captured it (0: warm-up, 1: the recorded pass)
        ("op_id", pa.int64()),  # in that pass's trace; -1: the launch ran outside any op
        ("op", pa.string()),
        ("module_id", pa.int64()),
        ("call_id", pa.int64()),  # in that pass's trace
        ("function_name", pa.string()),
        ("site_id", pa.int64()),  # the compiled extern call it was launched by (SITES); NO_SITE otherwise
    ]
)

# -- joining ------------------------------------------------------------------------------------
ACTIVITY = pa.schema(
    [
        ("correlation_id", pa.int64()),
        ("kernel", pa.string()),
        ("kind", pa.string()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("kernel_us", pa.float64()),
        ("device", pa.int32()),
        ("stream", pa.int64()),
        ("op_id", pa.int64()),
        ("op", pa.string()),
        ("module_id", pa.int64()),
        ("module_name", pa.string()),
        ("call_id", pa.int64()),
        ("function_name", pa.string()),
        ("thread", pa.int64()),
        ("graph_id", pa.int64()),  # NOT_IN_GRAPH unless replayed by a CUDA graph
        ("graph_node_id", pa.int64()),
        ("attribution", pa.string()),  # one of ATTRIBUTIONS
    ]
)
# Every FX source (functional call or other node) an attributed compiled kernel was generated from:
# rank 0 is the call the kernel is attributed to (provenance.py states the rule), the others follow,
# latest in graph order first. One row per (synthesized call, kernel, source).
KERNEL_SOURCES = pa.schema(
    [
        ("call_id", pa.int64()),  # the synthesized functional call in ``calls`` the kernel went to
        ("kernel", pa.string()),
        ("rank", pa.int64()),
        ("module_id", pa.int64()),
        ("module_name", pa.string()),
        ("function_name", pa.string()),
        ("op", pa.string()),
        ("source", pa.string()),
    ]
)

# -- spec-compatible outputs (names and order are the reference's) ----------------------------------
PROFILING_COLUMNS = ["module_name", "module", "function_name", "op", "kernel", "kernel_us"]
SUMMARY_COLUMNS = [
    "function_name",
    "calls",
    "num_distinct_samples",
    "num_modules",
    "time_spent_us",
    "time_spent_pct",
    "tensor_size_MB",
]

# compare(a, b): before = a, after = b
COMPARE_COLUMNS = [
    "level",  # "function" (one row per function_name) or "kernel" (per function_name and kernel)
    "function_name",  # None: kernels that no functional call encloses
    "kernel",  # None on "function" rows
    "before_us",  # kernel time in a; 0.0 where absent
    "after_us",  # kernel time in b; 0.0 where absent
    "delta_us",  # after_us - before_us
    "ratio",  # after_us / before_us; NaN where before_us is 0
    "before_count",  # activity rows (kernel launches, copies, sets or CPU ops) in a; 0 where absent
    "after_count",
]


# -- what each column means: unit and sentinel, written as Arrow field metadata into saved results --
# column name -> (unit, sentinel); "" where none applies. Names mean the same in every table.
COLUMN_UNITS: dict[str, tuple[str, str]] = {
    "correlation_id": ("", "CUPTI correlation id (the CPU source numbers its ops)"),
    "kernel": ("", "kernel name; 'cpu::<op>' for the CPU source"),
    "name": ("", "kernel name as recorded"),
    "kind": ("", "'kernel', 'memcpy', 'memset' or 'cpu_op'"),
    "start_ns": ("ns", "host clock (time.perf_counter_ns); 0 where not timed"),
    "end_ns": ("ns", "host clock (time.perf_counter_ns); 0 where not timed"),
    "kernel_us": ("us", ""),
    "device": ("", "-1: CPU"),
    "stream": ("", "-1: CPU"),
    "op_id": ("", "null: no aten op claimed the kernel"),
    "op": ("", "null: no aten op claimed the kernel"),
    "module_id": ("", "-1: outside the profiled hierarchy"),
    "parent_module_id": ("", "-1: the root module"),
    "module_name": ("", "'' for the root module; null outside the hierarchy"),
    "module_type": ("", "the nn.Module class name"),
    "call_id": ("", "-1: no functional call encloses it"),
    "parent_call_id": ("", "-1: not nested in another functional call"),
    "function_name": ("", "null: no functional call encloses it"),
    "thread": ("", "recorder thread index, from 0"),
    "context_id": ("", ""),
    "sample_index": ("", "distinct sample number within the function, from 0"),
    "sample": ("", "index into function_data[function_name]; -1: no sample collected for this call"),
    "count": ("calls", ""),
    "sample_json": ("", "JSON; tensors as {'__tensor__': metadata}"),
    "torch_save": ("bytes", "torch.save of the sample tensors"),
    "graph_id": ("", "CUPTI graph id of the replaying graph; 0: not launched by a CUDA graph"),
    "graph_node_id": ("", "CUPTI id of the graph node; 0: not launched by a CUDA graph"),
    "attribution": ("", "'trace', 'inductor', 'graph_capture' or 'graph_launch'"),
    "rank": ("", "0: the source the kernel is attributed to"),
    "source": ("", "FX source node of a compiled kernel"),
}

# result metadata keys added by compiled / graphed attribution (values are short sentences)
META_INDUCTOR = "inductor_provenance"  # how compiled kernels were attributed, or why not
META_GRAPH_CAPTURE = "graph_capture"  # whether CUDA graph captures were observed, or why not
META_COMPILED_KERNELS = "compiled_kernels_attributed"  # activity rows attributed from Inductor provenance
META_GRAPH_KERNELS = "graph_kernels"  # activity rows replayed by CUDA graphs (and how many were mapped)

# columns added after results were first saved: their values in results saved before
ADDED_COLUMNS: dict[str, dict[str, object]] = {
    "activity": {"graph_id": NOT_IN_GRAPH, "graph_node_id": NOT_IN_GRAPH, "attribution": ATTRIBUTION_TRACE},
}
# tables added after results were first saved: empty in results saved before
ADDED_TABLES: dict[str, pa.Schema] = {"kernel_sources": KERNEL_SOURCES}


def field_metadata(name: str) -> dict[bytes, bytes]:
    """Arrow field metadata for column ``name``: ``unit`` and ``sentinel`` (empty dict if unknown)."""
    unit, sentinel = COLUMN_UNITS.get(name, ("", ""))
    if name not in COLUMN_UNITS:
        return {}
    return {b"unit": unit.encode(), b"sentinel": sentinel.encode()}


def empty(schema: pa.Schema) -> pa.Table:
    """An empty table of ``schema``, so that empty results keep their columns."""
    return schema.empty_table()


def with_added_columns(table: pa.Table, name: str, target: pa.Schema) -> pa.Table:
    """``table`` (the ``name`` table of a result saved before some columns existed) in ``target``'s columns.

    Parameters
    ----------
    table:
        The table as saved.
    name:
        Its name in the result (``"activity"``); :data:`ADDED_COLUMNS` gives the values of its new columns.
    target:
        The schema it has today.

    Returns
    -------
    pyarrow.Table
        ``table`` with every missing column of ``target`` filled with its documented value, in ``target``'s order.
    """
    fills = ADDED_COLUMNS.get(name, {})
    for field in target:
        if field.name in table.column_names:
            continue
        if field.name not in fills:
            raise ValueError(f"the saved {name} table lacks the column {field.name!r}, which has no default")
        table = table.append_column(field, pa.array([fills[field.name]] * table.num_rows, field.type))
    extra = [c for c in table.column_names if c not in target.names]
    return table.select([*target.names, *extra])
