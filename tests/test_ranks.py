"""merge(), select_rank() and the views across ranks, on CPU results and on synthetic tables.

Two kinds of input: real CPU results of one process, told apart as ranks by their metadata (the
tables a profiler writes, so the id shifting and the sample links are checked on the real thing),
and synthetic per-rank tables with fixed times, so the per-rank views are checked to the exact
microsecond. The two-process gloo job is in ``test_distributed.py``.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import torch
from fixture_results import activity_table
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, ProfileResult, encoded, schema
from aitune_dispatch.reports import perfetto_events, write_report
from aitune_dispatch.reports.perfetto import RANK_PID_STRIDE
from aitune_dispatch.reports.ranks import rank_text
from aitune_dispatch.results import (
    collectives,
    compare_ranks,
    function_ranks,
    load,
    merge,
    rank_summary,
    select_rank,
)
from aitune_dispatch.results.views.ranks import sample_identity

WIDTH = 4


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)).eval()


def _profile(rows: list[int], op_tracer: str, rank: int | None) -> ProfileResult:
    profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer=op_tracer)
    samples = [((torch.randn(n, WIDTH),), {}) for n in rows]
    profiler.profile(_model(), samples, warmup_iterations=0)
    result = profiler.last_result
    if rank is None:
        return result
    metadata = {**result.metadata, "rank": str(rank), "world_size": "2", "host": f"node{rank}"}
    return dataclasses.replace(result, metadata=metadata)


@pytest.fixture
def ranks(op_tracer) -> tuple[ProfileResult, ProfileResult]:
    """Rank 0 ran one sample of 2 rows; rank 1 a sample of 2 rows and one of 3 (given first: order is free)."""
    return _profile([2], op_tracer, rank=0), _profile([2, 3], op_tracer, rank=1)


def _ints(table: pa.Table, column: str) -> list[int]:
    return table[column].to_pylist()


# -- merge ------------------------------------------------------------------------------------------------
def test_merge_appends_rank_and_shifts_ids(ranks):
    rank0, rank1 = ranks
    merged = merge([rank1, rank0])  # ranks come from the metadata, not the order
    for name in ("activity", "ops", "calls", "modules", "module_calls"):
        table = getattr(merged, name)
        assert _ints(table, "rank") == [0] * getattr(rank0, name).num_rows + [1] * getattr(rank1, name).num_rows
    # rank 0 keeps its ids; rank 1's are shifted by the size of rank 0's id ranges
    op_offset = max(_ints(rank0.ops, "op_id")) + 1
    module_offset = rank0.modules.num_rows  # 4: the Sequential and its three children
    call_offset = rank0.calls.num_rows  # 3: linear, relu, linear
    assert module_offset == 4 and call_offset == 3
    ops1 = select_rows(merged.ops, 1)
    assert _ints(ops1, "op_id") == [i + op_offset for i in _ints(rank1.ops, "op_id")]
    assert _ints(ops1, "module_id") == [m + module_offset for m in _ints(rank1.ops, "module_id")]
    modules1 = select_rows(merged.modules, 1)
    # the root's parent stays -1; the children point at the shifted root (0 + 4 = 4)
    assert _ints(modules1, "parent_module_id") == [-1, 4, 4, 4]
    calls1 = select_rows(merged.calls, 1)
    assert _ints(calls1, "call_id") == [c + call_offset for c in _ints(rank1.calls, "call_id")]
    for name, column in (("ops", "op_id"), ("modules", "module_id"), ("calls", "call_id")):
        ids = _ints(getattr(merged, name), column)
        assert len(set(ids)) == len(ids)  # unique across ranks
    # activity rows keep their op, module and functional call (3 + 6 rows: one CPU row per op)
    assert merged.activity.num_rows == rank0.activity.num_rows + rank1.activity.num_rows
    assert merged.activity["function_name"].to_pylist() == (
        rank0.activity["function_name"].to_pylist() + rank1.activity["function_name"].to_pylist()
    )


def _samples(result: ProfileResult) -> list[tuple[str, int, object]]:
    return [(name, count, sample_identity(s)) for name, entries in result.function_data.items() for count, s in entries]


def select_rows(table: pa.Table, rank: int) -> pa.Table:
    return table.filter(pc.equal(table["rank"], rank))


def test_merge_keeps_each_distinct_sample_once(ranks):
    rank0, rank1 = ranks
    merged = merge(list(ranks))
    # linear: rank 0 called it twice on f32[2,4]; rank 1 twice on f32[2,4] and twice on f32[3,4]
    counts = [count for count, _ in merged.function_data["linear"]]
    assert counts == [2 + 2, 2]
    shapes = [tuple(sample[0][0].shape) for _, sample in merged.function_data["linear"]]
    assert shapes == [(2, WIDTH), (3, WIDTH)]
    summary = merged.describe().set_index("function_name")
    assert summary.loc["linear", "calls"] == 6 and summary.loc["linear", "num_distinct_samples"] == 2
    assert summary.loc["relu", "calls"] == 3  # 1 + 2
    # every call points at its merged sample: rank 1's f32[3,4] calls now point at index 1
    calls = encoded.decoded(merged.calls).to_pandas()
    linear1 = calls[(calls["rank"] == 1) & (calls["function_name"] == "linear")]
    assert list(linear1["sample"]) == [0, 0, 1, 1]
    # the per-sample table adds up to describe()'s time per function
    per_sample = merged.samples().groupby("function_name")["kernel_us"].sum()
    assert per_sample["linear"] == pytest.approx(summary.loc["linear", "time_spent_us"])


def test_select_rank_gives_each_rank_back(ranks):
    merged = merge(list(ranks))
    for rank, original in enumerate(ranks):
        back = select_rank(merged, rank)
        assert back.metadata == original.metadata and back.source == original.source
        keep = ["kernel", "kind", "kernel_us", "op", "module_name", "function_name", "start_ns"]
        assert back.activity.select(keep).equals(original.activity.select(keep))
        assert "rank" not in back.activity.column_names
        assert back.describe().equals(original.describe())
        assert _samples(back) == _samples(original)
        # the module objects still stand behind their rows
        assert list(back.profiling_df()["module"]) == list(original.profiling_df()["module"])
    with pytest.raises(ValueError, match=r"rank 5 is not in this result; it holds ranks \[0, 1\]"):
        select_rank(merged, 5)


def _with_kernel_sources(result: ProfileResult, kernel: str) -> ProfileResult:
    """``result`` with two sources (fusion ranks 0 and 1) of a compiled kernel on its first call."""
    call = int(result.calls["call_id"][0].as_py())
    sources = pa.table(
        {
            "call_id": [call, call], "kernel": [kernel] * 2, "rank": [0, 1], "module_id": [1, 1],
            "module_name": ["0", "0"], "function_name": ["linear", None], "op": ["aten::addmm", "aten::add"],
            "source": ["linear", "add"],
        },
        schema=schema.KERNEL_SOURCES,
    )  # fmt: skip
    return dataclasses.replace(result, kernel_sources=sources)


def test_kernel_sources_keep_their_fusion_rank_through_merge_and_select(ranks):
    # kernel_sources has a rank column of its own (the fusion rule's order): merge adds none, its call ids
    # are shifted with the calls, and select_rank gives each rank the sources of its own calls
    rank0, rank1 = _with_kernel_sources(ranks[0], "triton_a"), _with_kernel_sources(ranks[1], "triton_b")
    merged = merge([rank0, rank1])
    assert merged.kernel_sources.column_names == schema.KERNEL_SOURCES.names
    assert merged.kernel_sources["rank"].to_pylist() == [0, 1, 0, 1]
    shift = rank0.calls.num_rows
    assert _ints(merged.kernel_sources, "call_id") == [0, 0, shift, shift]
    keep = ["kernel", "rank", "function_name", "op", "source"]  # ids are the merged ones
    for rank, original in enumerate((rank0, rank1)):
        back = select_rank(merged, rank)
        # the same values; the string columns' dictionaries are the merge's (they hold every rank's names)
        assert back.kernel_sources.select(keep).to_pylist() == original.kernel_sources.select(keep).to_pylist()
        assert back.kernel_sources.schema == original.kernel_sources.schema
        assert set(_ints(back.kernel_sources, "call_id")) <= set(_ints(back.calls, "call_id"))


def test_merge_metadata_and_warnings(ranks):
    rank0, rank1 = ranks
    rank1 = dataclasses.replace(rank1, warnings=("something happened",))
    merged = merge([rank0, rank1])
    assert merged.metadata["merged_ranks"] == "0,1" and merged.metadata["world_size"] == "2"
    assert "rank" not in merged.metadata and "host" not in merged.metadata  # differs: kept per rank only
    records = json.loads(merged.metadata["rank_metadata"])
    assert records["1"]["metadata"]["host"] == "node1" and records["0"]["source"] == "cpu"
    assert merged.warnings == ("rank 1: something happened",)
    assert select_rank(merged, 1).warnings == ("something happened",)


def test_a_missing_rank_is_a_warning(ranks):
    rank0, _ = ranks
    merged = merge([rank0])
    assert merged.warnings == (
        "merged 1 of 2 ranks: ranks [1] are missing, so totals across ranks cover part of the job; "
        "merge (or save into the directory) every rank's result",
    )


def test_which_rank_is_which(ranks, op_tracer):
    rank0, rank1 = ranks
    plain = [_profile([2], op_tracer, rank=None), _profile([3], op_tracer, rank=None)]
    assert merge(plain).metadata["merged_ranks"] == "0,1"  # separate runs: ranks by position
    assert merge(plain, ranks=[3, 1]).metadata["merged_ranks"] == "1,3"
    with pytest.raises(ValueError, match=r"results 0 and 1 are both rank 0"):
        merge([rank0, rank0])
    with pytest.raises(ValueError, match=r"results \[1\] name no rank in their metadata"):
        merge([rank0, plain[0]])
    with pytest.raises(ValueError, match=r"one distinct non-negative rank per result"):
        merge(plain, ranks=[0, 0])
    not_a_list = r"^ranks must be a list of integers, one per result, such as \[0, 1\]; got"
    with pytest.raises(TypeError, match=not_a_list + " str"):
        merge(plain, ranks="01")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=not_a_list + " int"):
        merge(plain, ranks=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ranks must contain integers; got \['a'\]"):
        merge(plain, ranks=[0, "a"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"merges already"):
        merge([merge([rank0, rank1])])
    with pytest.raises(TypeError, match=r"a list of ProfileResults"):
        merge(rank0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one result"):
        merge([])


def test_a_merged_result_saves_and_loads(ranks, tmp_path):
    merged = merge(list(ranks))
    back = load(merged.save(tmp_path / "merged"))
    assert back.activity.equals(merged.activity) and back.calls.equals(merged.calls)
    assert back.metadata == merged.metadata
    assert back.describe(by="rank").equals(merged.describe(by="rank"))


def test_load_of_a_directory_of_ranks_is_their_merge(ranks, op_tracer, tmp_path):
    rank0, rank1 = ranks
    rank1.save(tmp_path / "job" / "rank1.parquet")  # any mix of layouts and names
    rank0.save(tmp_path / "job" / "rank0")
    (tmp_path / "job" / "notes.txt").write_text("not a result")
    loaded = aitune_dispatch.load(tmp_path / "job")
    expected = merge([load(tmp_path / "job" / "rank0"), load(tmp_path / "job" / "rank1.parquet")])
    assert loaded.activity.equals(expected.activity) and loaded.metadata == expected.metadata
    assert ProfileResult.load(tmp_path / "job").activity.equals(expected.activity)
    # runs without rank metadata are numbered in natural name order: run2 before run10
    _profile([2], op_tracer, rank=None).save(tmp_path / "runs" / "run10")
    _profile([3], op_tracer, rank=None).save(tmp_path / "runs" / "run2")
    runs = aitune_dispatch.load(tmp_path / "runs")
    linear = runs.function_data["linear"]
    assert [tuple(sample[0][0].shape) for _, sample in linear] == [(3, WIDTH), (2, WIDTH)]  # run2 is rank 0


def test_a_folder_without_results_says_so(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no manifest.json\) and holds no per-rank results"):
        load(tmp_path / "empty")


# -- a collective, in one process --------------------------------------------------------------------------
class Sync(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.distributed.all_reduce(x)
        return x


@pytest.mark.parametrize("functions", ["functional", "all"])
def test_a_collective_goes_to_its_module_and_op(functions, op_tracer, tmp_path):
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), Sync()).eval()
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        profiler = ModuleFunctionKernelProfiler(device="cpu", op_tracer=op_tracer, functions=functions)
        profiler.profile(model, [((torch.randn(2, WIDTH),), {})], warmup_iterations=0)
    finally:
        torch.distributed.destroy_process_group()
    result = profiler.last_result
    (row,) = collectives(result).itertuples()
    assert (row.rank, row.module_name, row.op, row.kernel, row.calls) == (
        0,
        "1",
        "c10d::allreduce_",
        "cpu::c10d::allreduce_",
        1,
    )
    functional = set(result.profiling_df()["function_name"])
    # no torch.nn.functional call encloses it; functions="all" names the torch.distributed call as users write it
    assert functional == ({"linear"} if functions == "functional" else {"linear", "torch.distributed.all_reduce"})


# -- the views, to the microsecond --------------------------------------------------------------------------
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def synthetic(rows: list[tuple[str | None, str, str, str, float]], rank: int) -> ProfileResult:
    """A rank's result from rows ``(function_name, kernel, op, module_name, kernel_us)``."""
    n = len(rows)
    names = ["", "block", "sync"]
    module_ids = {name: index for index, name in enumerate(names)}
    activity = activity_table(
        kernel=[kernel for _, kernel, _, _, _ in rows],
        kernel_us=[r[4] for r in rows],
        function_name=[fn for fn, *_ in rows],
        first_start_ns=10_000,
        device=rank,
        op=[op for _, _, op, _, _ in rows],
        module_id=[module_ids[m] for _, _, _, m, _ in rows],
        module_name=[m for _, _, _, m, _ in rows],
    )
    modules = pa.table(
        {
            "module_id": pa.array([0, 1, 2], pa.int64()),
            "module_name": names,
            "module_type": ["Model", "Block", "AllReduce"],
            "parent_module_id": pa.array([-1, 0, 0], pa.int64()),
        }
    )
    ops = pa.table(  # each op starts 100 ns before its kernel, so the trace draws its launch arrow
        {
            "op_id": activity["op_id"],
            "op": activity["op"],
            "module_id": activity["module_id"],
            "call_id": activity["call_id"],
            "thread": activity["thread"],
            "start_ns": pc.subtract(activity["start_ns"], 100),
            "end_ns": pc.add(activity["start_ns"], 50),
        },
        schema=schema.OPS,
    )
    calls, forwards = (schema.empty(s) for s in (schema.CALLS, schema.MODULE_CALLS))
    launches = pa.table(  # one cudaLaunchKernel per kernel, 80-60 ns before it; both ranks number them 0..n-1
        {
            "correlation_id": activity["correlation_id"],
            "api": ["runtime"] * n,
            "cbid": pa.array([211] * n, pa.int32()),
            "api_name": ["cudaLaunchKernel"] * n,
            "start_ns": pc.subtract(activity["start_ns"], 80),
            "end_ns": pc.subtract(activity["start_ns"], 60),
            "os_thread": [4242] * n,
        },
        schema=schema.LAUNCHES,
    )
    metadata = {"rank": str(rank), "world_size": "2", "host": f"node{rank}"}
    return ProfileResult(
        activity, ops, calls, modules, forwards, {}, "cupti/native", metadata=metadata, launches=launches
    )


RANK0 = [
    ("linear", "gemm", "aten::addmm", "block", 10.0),
    ("linear", "gemm", "aten::addmm", "block", 6.0),
    ("relu", "relu_kernel", "aten::relu", "block", 2.0),
    (None, NCCL, "c10d::allreduce_", "sync", 30.0),
]
RANK1 = [
    ("linear", "gemm", "aten::addmm", "block", 20.0),
    ("softmax", "softmax_kernel", "aten::_softmax", "block", 4.0),
    (None, NCCL, "c10d::allreduce_", "sync", 50.0),
    (None, "add_kernel", "aten::add", "block", 1.0),
]


@pytest.fixture
def job() -> ProfileResult:
    return merge([synthetic(RANK0, 0), synthetic(RANK1, 1)])


def test_function_ranks(job):
    table = function_ranks(job)
    assert list(table.columns) == schema.RANK_FUNCTION_COLUMNS
    rows = {r.function_name: r for r in table.itertuples()}
    assert list(table["function_name"]) == ["linear", "softmax", "relu"]  # by the slowest rank's time
    # linear: rank 0 10 + 6 = 16 µs, rank 1 20 µs -> mean 18, min 16, max 20 on rank 1, 20 / 18
    assert (rows["linear"].mean_us, rows["linear"].min_us, rows["linear"].max_us) == (18.0, 16.0, 20.0)
    assert rows["linear"].slowest_rank == 1 and rows["linear"].ranks == 2
    assert rows["linear"].imbalance == pytest.approx(20 / 18)
    # softmax ran on rank 1 only: 0 and 4 -> mean 2, min 0, 4 / 2 = 2
    assert (rows["softmax"].ranks, rows["softmax"].mean_us, rows["softmax"].min_us) == (1, 2.0, 0.0)
    assert rows["softmax"].imbalance == 2.0
    assert rows["relu"].slowest_rank == 0 and rows["relu"].max_us == 2.0


def test_rank_summary(job):
    table = rank_summary(job)
    assert list(table.columns) == schema.RANK_SUMMARY_COLUMNS
    assert table.to_dict("records") == [
        # 10 + 6 + 2 + 30 = 48 µs, 18 attributed -> 0.375; the NCCL kernel is the collective
        {
            "rank": 0,
            "host": "node0",
            "devices": "0",
            "activity_rows": 4,
            "total_us": 48.0,
            "attributed_us": 18.0,
            "coverage": 0.375,
            "collective_us": 30.0,
        },
        # 20 + 4 + 50 + 1 = 75 µs, 24 attributed -> 0.32
        {
            "rank": 1,
            "host": "node1",
            "devices": "1",
            "activity_rows": 4,
            "total_us": 75.0,
            "attributed_us": 24.0,
            "coverage": 0.32,
            "collective_us": 50.0,
        },
    ]


def test_collectives_name_module_and_op(job):
    table = collectives(job)
    assert table.to_dict("records") == [
        {"rank": 0, "module_name": "sync", "op": "c10d::allreduce_", "kernel": NCCL, "calls": 1, "total_us": 30.0},
        {"rank": 1, "module_name": "sync", "op": "c10d::allreduce_", "kernel": NCCL, "calls": 1, "total_us": 50.0},
    ]


def test_compare_two_ranks(job):
    table = compare_ranks(job, 0, 1)
    rows = {r.function_name if isinstance(r.function_name, str) else None: r for r in table.itertuples()
            if r.level == "function"}
    assert set(rows) == {None, "linear", "softmax", "relu"}
    # outside any functional call: rank 0 has the 30 µs all-reduce, rank 1 50 + 1 (the add) = 51 µs
    assert (rows[None].before_us, rows[None].after_us, rows[None].after_kernels) == (30.0, 51.0, 2)
    assert (rows["linear"].before_us, rows["linear"].after_us) == (16.0, 20.0)
    assert (rows["linear"].before_kernels, rows["linear"].after_kernels) == (2, 1)
    assert (rows["softmax"].before_us, rows["relu"].after_us) == (0.0, 0.0)


def test_describe_by_rank(job):
    table = job.describe(by="rank")
    assert list(table["rank"]) == [0, 0, 1, 1]
    assert list(table["function_name"]) == ["linear", "relu", "linear", "softmax"]
    # each rank's shares are of its own attributed time: 16 / 18 and 20 / 24
    assert list(table["time_spent_pct"]) == pytest.approx([100 * 16 / 18, 100 * 2 / 18, 100 * 20 / 24, 100 * 4 / 24])


def test_an_unmerged_result_is_one_rank(job):
    single = synthetic(RANK1, 1)
    assert list(rank_summary(single)["rank"]) == [1]
    assert select_rank(single, 1) is single
    assert function_ranks(single)["ranks"].tolist() == [1, 1]
    assert rank_text(single) == ""


# -- reports ----------------------------------------------------------------------------------------------------
def test_the_trace_has_one_process_per_rank(ranks):
    rank0, rank1 = ranks
    merged = merge([rank0, rank1])
    trace = perfetto_events(merged)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    assert names == {1: "rank 0 CPU (node0)", RANK_PID_STRIDE + 1: "rank 1 CPU (node1)"}
    threads = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert threads == {(1, "thread 0"), (RANK_PID_STRIDE + 1, "thread 0")}  # host threads, not GPU streams
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    for rank, result in enumerate((rank0, rank1)):
        own = [e for e in slices if e["pid"] == rank * RANK_PID_STRIDE + 1]
        # each op once (the CPU source's op slice), each functional call and module forward once
        assert sum(e["cat"] == "cpu_op" for e in own) == result.ops.num_rows
        assert sum(e["cat"] == "functional" for e in own) == result.calls.num_rows
        assert sum(e["cat"] == "module" for e in own) == result.module_calls.num_rows
    # an unmerged result keeps its plain process name
    assert [e["args"]["name"] for e in perfetto_events(rank0)["traceEvents"] if e.get("name") == "process_name"] == [
        "CPU"
    ]


def test_the_gpu_processes_of_each_rank(job):
    trace = perfetto_events(job, gpu_clock_offset_ns=0)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "process_name"}
    # rank 0 ran on cuda:0 (pid 0 * 1000 + 100 + 0), rank 1 on cuda:1 (pid 1 * 1000 + 100 + 1)
    assert names == {
        1: "rank 0 CPU (node0)",
        100: "rank 0 GPU 0",
        RANK_PID_STRIDE + 1: "rank 1 CPU (node1)",
        RANK_PID_STRIDE + 101: "rank 1 GPU 1",
    }
    # one launch arrow per kernel (4 + 4), each from its rank's launch slice to that rank's GPU: both
    # ranks number their launches 0..3, so a launch must find the kernel of its own rank
    starts = [(e["pid"], e["ts"]) for e in trace["traceEvents"] if e["ph"] == "s"]
    ends = [(e["pid"], e["ts"]) for e in trace["traceEvents"] if e["ph"] == "f"]
    assert [pid for pid, _ in starts] == [1] * 4 + [RANK_PID_STRIDE + 1] * 4
    assert [pid for pid, _ in ends] == [100] * 4 + [RANK_PID_STRIDE + 101] * 4
    # kernel i starts at 10,000 + 1,000 i ns, its launch 80 ns before: origin = rank 0's first op at 9,900
    assert [ts for _, ts in starts] == [0.02, 1.02, 2.02, 3.02] * 2  # (10,000 - 80 - 9,900) / 1000 + i
    assert [ts for _, ts in ends] == [0.1, 1.1, 2.1, 3.1] * 2  # (10,000 - 9,900) / 1000 + i
    launches = [e for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime"]
    assert [(e["pid"], e["tid"]) for e in launches] == [(1, 1)] * 4 + [(RANK_PID_STRIDE + 1, 1)] * 4  # thread 0
    assert trace["otherData"]["flows_skipped"] == 0


def test_the_html_report_has_a_rank_view_for_merges_only(job, tmp_path):
    page = write_report(job, tmp_path / "job.html").read_text()
    section = page[page.index('<section id="ranks">') : page.index("</section>", page.index('<section id="ranks">'))]
    assert section.count("<tr>") == 1 + 2 + 1 + 3 + 1 + 2  # header + 2 ranks, header + 3 functions, header + 2
    assert "node1" in section and "c10d::allreduce_" in section and "1.11\u00d7" in section  # 20 / 18
    single = write_report(synthetic(RANK0, 0), tmp_path / "one.html").read_text()
    assert 'id="ranks"' not in single


def test_the_command_line_needs_a_merge(tmp_path, capsys):
    from aitune_dispatch import cli

    synthetic(RANK0, 0).save(tmp_path / "one")
    assert cli.main(["ranks", str(tmp_path / "one")]) == 1
    assert "holds one rank's result; pass a directory into which every rank saved" in capsys.readouterr().err
    merge([synthetic(RANK0, 0), synthetic(RANK1, 1)]).save(tmp_path / "job.parquet")
    assert cli.main(["ranks", str(tmp_path / "job.parquet"), "--compare", "0", "3"]) == 1
    assert "rank 3 is not in this result; it holds ranks [0, 1]" in capsys.readouterr().err


def test_rank_text(job):
    text = rank_text(job, width=100)
    lines = text.splitlines()
    assert lines[0] == "per rank (2 ranks merged):"
    assert lines[1].split()[4:7] == ["kernel", "time", "(µs)"]  # one unit per column, in its title
    assert lines[3].split() == ["0", "node0", "0", "4", "48.0", "37.5%", "30.0"]
    assert "per functional call across ranks, slowest first:" in lines
    assert np.all([len(line) <= 100 for line in lines])
