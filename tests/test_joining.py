"""The vectorised join on synthetic tables: exact rows, sentinels and nulls."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pyarrow.compute as pc
from fixture_results import join_tables

from aitune_dispatch import schema
from aitune_dispatch.joining import join
from aitune_dispatch.results.views import attributed_mask


def tables():
    kernels = pa.table(
        {
            "correlation_id": [100, 101, 102, 103, 104],
            "name": ["gemm", "relu_k", "orphan", "outside", "memcpy"],
            "start_ns": [1_000, 3_000, 5_000, 7_000, 2_000],
            "end_ns": [2_000, 3_500, 6_000, 9_000, 2_250],
            "device": pa.array([0, 0, 0, 0, 0], pa.int32()),
            "stream": [7, 7, 7, 9, 7],
            "kind": ["kernel", "kernel", "kernel", "kernel", "memcpy"],
        },
        schema=schema.KERNELS,
    )
    # CUPTI id -> op id; 102 has no record (a kernel no op claimed); 100 appears twice
    correlation = pa.table(
        {"correlation_id": [100, 100, 101, 103, 104], "op_id": [0, 0, 1, 2, 0]}, schema=schema.CORRELATION
    )
    ops = pa.table(
        {
            "op_id": [0, 1, 2],
            "op": ["aten::addmm", "aten::relu", "aten::add"],
            "module_id": [1, 1, -1],
            "call_id": [0, 1, -1],
            "thread": [0, 0, 0],
            "start_ns": [0, 0, 0],
            "end_ns": [0, 0, 0],
        },
        schema=schema.OPS,
    )
    calls = pa.table(
        {
            "call_id": [0, 1],
            "function_name": ["linear", "relu"],
            "parent_call_id": [-1, -1],
            "module_id": [1, 1],
            "start_ns": [0, 0],
            "end_ns": [0, 0],
            "thread": [0, 0],
            "sample": [0, 0],
        },
        schema=schema.CALLS,
    )
    modules = pa.table(
        {
            "module_id": [0, 1],
            "module_name": ["", "fc"],
            "module_type": ["Net", "Linear"],
            "parent_module_id": [-1, 0],
        },
        schema=schema.MODULES,
    )
    return kernels, correlation, ops, calls, modules


def test_join_gives_one_row_per_kernel_in_time_order():
    joined = join_tables(*tables())
    assert joined.schema == schema.ACTIVITY
    rows = joined.to_pylist()
    assert [r["kernel"] for r in rows] == ["gemm", "memcpy", "relu_k", "orphan", "outside"]
    assert [r["op"] for r in rows] == ["aten::addmm", "aten::addmm", "aten::relu", None, "aten::add"]
    assert [r["function_name"] for r in rows] == ["linear", "linear", "relu", None, None]
    assert [r["module_name"] for r in rows] == ["fc", "fc", "fc", None, None]
    assert [r["module_id"] for r in rows] == [1, 1, 1, -1, -1]
    assert [r["call_id"] for r in rows] == [0, 0, 1, -1, -1]
    assert [r["op_id"] for r in rows] == [0, 0, 1, None, 2]
    # (end - start) / 1000: 1000 ns, 250 ns, 500 ns, 1000 ns, 2000 ns
    assert [r["kernel_us"] for r in rows] == [1.0, 0.25, 0.5, 1.0, 2.0]


def test_attributed_mask_needs_a_module_and_a_call():
    joined = join_tables(*tables())
    assert attributed_mask(joined).to_pylist() == [True, True, True, False, False]


def test_empty_inputs_keep_the_schema():
    kernels, correlation, ops, calls, modules = tables()
    joined = join_tables(schema.empty(schema.KERNELS), schema.empty(schema.CORRELATION), ops, calls, modules)
    assert joined.num_rows == 0 and joined.schema == schema.ACTIVITY
    joined = join_tables(kernels, schema.empty(schema.CORRELATION), schema.empty(schema.OPS), calls, modules)
    assert joined.num_rows == 5 and joined.column("op_id").null_count == 5


def test_kernels_without_op_take_module_and_call_from_their_launch_scope():
    kernels, correlation, ops, calls, modules = tables()
    # kernel 102 ("orphan") was launched outside any op, inside context 5 = (module fc, call relu);
    # 100 also has a scope record, but its op wins
    scope = pa.table({"correlation_id": [102, 100], "context_id": [5, 4]}, schema=schema.SCOPE_CORRELATION)
    contexts = pa.table(
        {"context_id": [4, 5], "module_id": [0, 1], "call_id": [-1, 1]}, schema=schema.CONTEXTS
    )
    rows = join_tables(kernels, correlation, ops, calls, modules, scope, contexts).to_pylist()
    orphan = next(r for r in rows if r["kernel"] == "orphan")
    assert (orphan["op"], orphan["module_name"], orphan["function_name"]) == (None, "fc", "relu")
    gemm = next(r for r in rows if r["kernel"] == "gemm")
    assert (gemm["op"], gemm["module_name"], gemm["function_name"]) == ("aten::addmm", "fc", "linear")


def test_join_reads_only_the_tables_its_protocols_name():
    # joining stands on the base modules alone: any object with the activity's kernels, correlation and
    # scope_correlation and the trace's ops, calls and contexts joins as the real Activity and TraceTables do
    kernels, correlation, ops, calls, modules = tables()
    scope = pa.table({"correlation_id": [102], "context_id": [0]}, schema=schema.SCOPE_CORRELATION)
    contexts = pa.table({"context_id": [0], "module_id": [1], "call_id": [1]}, schema=schema.CONTEXTS)
    activity = SimpleNamespace(kernels=kernels, correlation=correlation, scope_correlation=scope)
    trace = SimpleNamespace(ops=ops, calls=calls, contexts=contexts, links=schema.empty(schema.OP_LINKS))
    joined = join(activity, trace, modules)
    assert joined.equals(join_tables(kernels, correlation, ops, calls, modules, scope, contexts))
    assert joined.filter(pc.equal(joined["kernel"], "orphan"))["function_name"].to_pylist() == ["relu"]


def test_a_linked_ops_kernels_take_the_links_module_call_and_attribution():
    # op 2 (aten::add, no module or call on its stacks) ran in backward of op 0's node: linked to fc / linear
    kernels, correlation, ops, calls, modules = tables()
    activity = SimpleNamespace(
        kernels=kernels, correlation=correlation, scope_correlation=schema.empty(schema.SCOPE_CORRELATION)
    )
    links = pa.table(
        {"op_id": [2], "module_id": [1], "call_id": [0], "attribution": ["backward"]}, schema=schema.OP_LINKS
    )
    trace = SimpleNamespace(ops=ops, calls=calls, contexts=schema.empty(schema.CONTEXTS), links=links)
    rows = {row["kernel"]: row for row in join(activity, trace, modules).to_pylist()}
    outside = rows["outside"]
    assert (outside["op"], outside["module_name"], outside["function_name"]) == ("aten::add", "fc", "linear")
    assert outside["attribution"] == "backward"
    assert {rows[name]["attribution"] for name in ("gemm", "relu_k", "orphan", "memcpy")} == {"trace"}


def test_kernel_names_are_demangled_like_torch_profiler():
    import numpy as np

    from aitune_dispatch.collection.decoded import DecodedRecords

    mangled = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEESt5arrayIPcLm1EEEEviT0_T1_"
    ids = np.array([1, 2], np.int64)
    records = DecodedRecords(
        ids, ids, ids + 1, np.zeros(2, np.int64), np.zeros(2, np.int64), np.zeros(2, np.int8),
        np.array([0, 1], np.int32), [mangled, "triton_poi_fused_add_0"], ids, ids, 4,
    )
    names = records.kernels_table().column("name").to_pylist()
    assert names == [
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
        "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)",
        "triton_poi_fused_add_0",
    ]


def test_cupti_ticks_are_mapped_onto_the_host_clock():
    from aitune_dispatch.collection.cupti_source import host_clock

    kernels = pa.table(
        {
            "correlation_id": [1],
            "name": ["k"],
            "start_ns": [5_000_000 + 2_100],  # 2,100 ticks after the first clock pair
            "end_ns": [5_000_000 + 4_200],
            "device": pa.array([0], pa.int32()),
            "stream": [7],
            "kind": ["kernel"],
        },
        schema=schema.KERNELS,
    )
    # pairs (host ns, CUPTI ticks): 20 ms of host time took 42,000,000 ticks -> 2.1 ticks per ns
    clock = host_clock((1_000, 5_000_000), (20_001_000, 47_000_000))
    assert clock.ticks_per_ns == 2.1
    converted = clock.convert(kernels)
    # host = 1,000 + 2,100 / 2.1 = 2,000 ns; end = 1,000 + 4,200 / 2.1 = 3,000 ns: a 1 us kernel
    assert converted.column("start_ns").to_pylist() == [2_000]
    assert converted.column("end_ns").to_pylist() == [3_000]
    # nanosecond clocks (rate within 0.1% of 1) are only shifted
    same = host_clock((1_000, 5_000_000), (20_001_000, 25_000_500))
    assert same.ticks_per_ns == 1.0
    assert same.convert(kernels).column("start_ns").to_pylist() == [1_000 + 2_100]
