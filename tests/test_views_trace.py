"""results.views.trace: the host spans a trace nests on each thread, and the thread each CUDA launch belongs to.

Pure functions of a result's tables, checked here without rendering (tests/test_reports.py checks
the trace drawn from them).
"""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow as pa
import pytest
from fixture_results import layered_result, merged_result, synthetic_result

from aitune_dispatch import schema
from aitune_dispatch.results.views import call_spans, launch_threads, module_spans, op_spans

pytestmark = pytest.mark.single_backend  # hand-made tables; no tracing backend involved


def _activity(rows: list[tuple], ranks: list[int] | None = None) -> pa.Table:
    """Activity rows ``(correlation_id, kind, device, thread, op_id)``, and a merge's ``rank`` column."""
    names = ["correlation_id", "kind", "device", "thread", "op_id"]
    columns = {name: list(values) for name, values in zip(names, zip(*rows))}
    return pa.table(columns | ({} if ranks is None else {"rank": ranks}))


def _launches(rows: list[tuple], ranks: list[int] | None = None) -> pa.Table:
    """Launch records ``(correlation_id, os_thread)``."""
    columns = {"correlation_id": [c for c, _ in rows], "os_thread": [t for _, t in rows]}
    return pa.table(columns | ({} if ranks is None else {"rank": ranks}))


def _owners(table: pa.Table) -> list[tuple]:
    return list(zip(table["thread"].to_pylist(), table["op_id"].to_pylist()))


# -- launch_threads: the thread vote --------------------------------------------------------------------
def test_a_claimed_launch_goes_to_its_first_gpu_rows_thread_and_op():
    activity = _activity([(1, "kernel", 0, 3, 30), (1, "kernel", 0, 4, 40), (2, "cpu_op", -1, 5, 50)])
    launches = _launches([(1, 7), (2, 8)])
    # correlation 2 is a CPU row's: nothing on a device claimed it, and no launch of OS thread 8 did
    assert _owners(launch_threads(activity, launches)) == [(3, 30), (None, None)]
    assert launch_threads(activity, launches).schema == schema.LAUNCH_THREADS


def test_an_unclaimed_launch_goes_to_the_thread_most_launches_of_its_os_thread_ran_on():
    activity = _activity(
        [(1, "kernel", 0, 2, 10), (2, "memcpy", 0, 1, 11), (3, "kernel", 0, 1, 12), (5, "memset", 0, None, None)]
    )
    # OS thread 7: launches 1 (thread 2), 2 and 3 (thread 1) claimed; 4 unclaimed takes thread 1, and so
    # does 5, whose memset has no thread (it keeps no op either)
    launches = _launches([(1, 7), (2, 7), (3, 7), (4, 7), (5, 7)])
    assert _owners(launch_threads(activity, launches)) == [(2, 10), (1, 11), (1, 12), (1, None), (1, None)]


def test_a_tied_vote_goes_to_the_thread_seen_first():
    activity = _activity([(1, "kernel", 0, 5, 0), (2, "kernel", 0, 4, 1)])
    launches = _launches([(1, 7), (2, 7), (3, 7)])
    assert _owners(launch_threads(activity, launches))[2] == (5, None)
    flipped = _launches([(2, 7), (1, 7), (3, 7)])
    assert _owners(launch_threads(activity, flipped))[2] == (4, None)


def test_ranks_vote_apart():
    # the same correlation id and OS thread in two ranks of a merge are two launches
    activity = _activity([(1, "kernel", 0, 2, 0), (1, "kernel", 0, 6, 9)], ranks=[0, 1])
    launches = _launches([(1, 7), (1, 7), (2, 7), (2, 7)], ranks=[0, 1, 0, 1])
    assert _owners(launch_threads(activity, launches)) == [(2, 0), (6, 9), (2, None), (6, None)]


def test_the_synthetic_launches_as_documented():
    # 10 (gemm, addmm) and 11 (memcpy, copy_) claimed on thread 0; 12's memset carries no op, its
    # thread is thread 0 too; 13 on OS thread 99 launched nothing recorded and has no thread
    result = synthetic_result(launches=True)
    assert _owners(launch_threads(result.activity, result.launches)) == [(0, 0), (0, 1), (0, None), (None, None)]
    assert launch_threads(result.activity, schema.LAUNCHES.empty_table()).num_rows == 0


# -- the host spans ---------------------------------------------------------------------------------------
def _tables(**tables: pa.Table) -> SimpleNamespace:
    empty = synthetic_result()
    defaults = {name: getattr(empty, name).slice(0, 0) for name in ("activity", "ops", "calls", "modules")}
    return SimpleNamespace(**(defaults | {"module_calls": schema.MODULE_CALLS.empty_table()} | tables))


def test_module_spans_name_modules_as_the_trace_does_and_close_open_forwards():
    result = synthetic_result()
    starts, ends = [1_000, 2_000, 3_000], [9_000, 1_500, 4_000]
    module_calls = pa.table([[0, 1, 5], starts, ends, [0, 1, 0]], schema=schema.MODULE_CALLS)
    spans = module_spans(_tables(modules=result.modules, module_calls=module_calls))
    assert spans.schema == schema.MODULE_SPANS
    assert spans.select(["module_id", "name", "module_type", "thread", "rank"]).to_pylist() == [
        {"module_id": 0, "name": "Net (root)", "module_type": "Net", "thread": 0, "rank": None},
        {"module_id": 1, "name": "fc", "module_type": "Linear", "thread": 1, "rank": None},
        {"module_id": 5, "name": "5", "module_type": "", "thread": 0, "rank": None},  # unknown: named by its id
    ]
    # fc's forward ended before it began (an exception left it open): it ends where it starts
    assert spans["start_ns"].to_pylist() == starts and spans["end_ns"].to_pylist() == [9_000, 2_000, 4_000]


def test_spans_of_a_merge_carry_their_rank():
    merged = merged_result()
    assert set(module_spans(merged)["rank"].to_pylist()) == {0, 1}
    assert call_spans(merged)["rank"].to_pylist() == [0, 1, 1]
    assert op_spans(merged)["rank"].to_pylist() == [0, 0]


def test_call_spans_leave_out_untimed_calls():
    # call 1 was attributed from compiled code: never timed (start and end 0), so no span
    result = synthetic_result()
    untimed = pa.table([[1], ["relu"], [-1], [1], [0], [0], [0], [-1]], schema=schema.CALLS)
    calls = pa.concat_tables([result.calls, untimed])
    spans = call_spans(_tables(calls=calls, modules=result.modules))
    assert spans.schema == schema.CALL_SPANS
    assert spans.to_pylist() == [
        {
            "call_id": 0,
            "function_name": "linear",
            "module_id": 1,
            "module": "fc",
            "start_ns": 3_000,
            "end_ns": 7_000,
            "thread": 0,
            "rank": None,
        }
    ]


def test_op_spans_of_a_gpu_result_are_the_timed_ops():
    spans = op_spans(synthetic_result())
    assert spans.schema == schema.OP_SPANS
    assert [(s["op"], s["start_ns"], s["end_ns"], s["activity_row"]) for s in spans.to_pylist()] == [
        ("aten::addmm", 4_000, 6_000, None),
        ("aten::copy_", 8_200, 8_800, None),
    ]
    assert op_spans(layered_result()).num_rows == 0  # ops without host times: no span


def test_op_spans_of_the_cpu_source_name_the_row_that_is_the_op():
    # CPU source: no host times on the ops; each op's cpu_op rows time it, and its last row is the one
    # the trace writes as the op (op 2 ran no timed row: no span; row 3 is a GPU row of op 0)
    ops = pa.table(
        {
            "op_id": [0, 1, 2],
            "op": ["aten::mm", "aten::add", "aten::view"],
            "call_id": [0, -1, -1],
            "module_id": [1, 1, 1],
            "thread": [0, 0, 0],
        }
    )
    activity = pa.table(
        {
            "kind": ["cpu_op", "cpu_op", "cpu_op", "kernel", "cpu_op"],
            "op_id": [0, 0, 1, 0, None],
            "device": [-1, -1, -1, 0, -1],
            "start_ns": [100, 150, 300, 120, 400],
            "end_ns": [140, 200, 350, 130, 450],
        }
    )
    spans = op_spans(_tables(ops=ops, activity=activity))
    assert [(s["op_id"], s["start_ns"], s["end_ns"], s["thread"], s["activity_row"]) for s in spans.to_pylist()] == [
        (0, 100, 200, 0, 1),
        (1, 300, 350, 0, 2),
    ]
