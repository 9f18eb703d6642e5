"""Reports: the Perfetto trace's structure and the HTML report's content, on CPU.

The shared CPU result of the demo model (``demo_result``) checks the trace's invariants (nesting,
timestamps, flow pairs, track separation); the shared hand-made result (``synthetic_result``, in
tests/fixture_results.py) checks exact numbers, with the arithmetic shown.
"""

from __future__ import annotations

import collections
import dataclasses
import fnmatch
import gzip
import html
import json
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest
import torch
from fixture_results import empty_result, synthetic_result

from aitune_dispatch.reports import (
    HtmlRenderer,
    PerfettoRenderer,
    perfetto_events,
    renderer_for,
    write_perfetto,
    write_report,
)
from aitune_dispatch.reports.base import kernel_labels
from aitune_dispatch.reports.html import (
    IDLE_GAP_ROWS,
    ROLLUP_ROWS,
    UNATTRIBUTED,
    Page,
    busy_reading,
    module_tree,
    percent,
    report_data,
    value_text,
)
from aitune_dispatch.reports.perfetto import (
    CPU_PID,
    GPU_PID_BASE,
    OS_THREAD_TID_BASE,
    device_properties,
    gpu_clock_offset,
)
from aitune_dispatch.results import ProfileResult, views

HOST_CATS = {"module", "functional", "cpu_op"}
EVIL = "fc<script>alert(1)</script>"


# -- fixtures: demo_result (conftest) and the hand-made results of tests/fixture_results.py -----------
@pytest.fixture(scope="module")
def demo_trace(demo_result: ProfileResult) -> dict[str, Any]:
    return perfetto_events(demo_result)


# -- helpers over trace events ---------------------------------------------------------------------------
def ns(value: float) -> int:
    """Trace µs back to integer ns (the exporter divides integer ns by 1000)."""
    return round(value * 1000)


def slices(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def contains(outer: dict[str, Any], inner: dict[str, Any]) -> bool:
    return (
        (outer["pid"], outer["tid"]) == (inner["pid"], inner["tid"])
        and ns(outer["ts"]) <= ns(inner["ts"])
        and ns(inner["ts"]) + ns(inner["dur"]) <= ns(outer["ts"]) + ns(outer["dur"])
    )


def slices_at(trace: dict[str, Any], pid: int, tid: int, ts: float) -> list[dict[str, Any]]:
    return [
        s
        for s in slices(trace)
        if (s["pid"], s["tid"]) == (pid, tid) and ns(s["ts"]) <= ns(ts) <= ns(s["ts"]) + ns(s["dur"])
    ]


def process_names(trace: dict[str, Any]) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}


# -- Perfetto on the demo result -----------------------------------------------------------------------------
def test_every_op_lies_in_its_call_and_every_call_in_its_module(demo_trace, demo_result):
    by_cat = collections.defaultdict(list)
    for piece in slices(demo_trace):
        by_cat[piece["cat"]].append(piece)
    calls = {piece["args"]["call_id"]: piece for piece in by_cat["functional"]}
    assert len(by_cat["cpu_op"]) == demo_result.ops.num_rows == 126
    assert len(calls) == demo_result.calls.num_rows
    for op in by_cat["cpu_op"]:
        call_id, module_id = op["args"]["call_id"], op["args"]["module_id"]
        if call_id >= 0:
            assert contains(calls[call_id], op), op
        if module_id >= 0:
            assert any(m["args"]["module_id"] == module_id and contains(m, op) for m in by_cat["module"]), op
    for call in calls.values():
        module_id = call["args"]["module_id"]
        assert any(m["args"]["module_id"] == module_id and contains(m, call) for m in by_cat["module"]), call


def test_host_slices_nest_properly_on_each_thread(demo_trace):
    tracks = collections.defaultdict(list)
    for piece in slices(demo_trace):
        if piece["pid"] == CPU_PID:
            tracks[piece["tid"]].append(piece)
    assert tracks
    for pieces in tracks.values():
        stack: list[dict[str, Any]] = []
        for piece in pieces:  # emitted by start, parents first
            while stack and ns(piece["ts"]) >= ns(stack[-1]["ts"]) + ns(stack[-1]["dur"]):
                stack.pop()
            assert not stack or contains(stack[-1], piece), (stack[-1], piece)
            stack.append(piece)


def test_timestamps_start_at_zero_and_are_ordered_per_track(demo_trace):
    pieces = slices(demo_trace)
    assert min(p["ts"] for p in pieces) == 0.0
    assert all(p["ts"] >= 0 and p["dur"] >= 0 for p in pieces)
    per_track = collections.defaultdict(list)
    for piece in pieces:
        per_track[(piece["pid"], piece["tid"])].append(piece)
    for (pid, _), track in per_track.items():
        starts = [p["ts"] for p in track]
        assert starts == sorted(starts)
        if pid != CPU_PID:  # activity tracks: one kernel at a time, never overlapping
            assert all(ns(a["ts"]) + ns(a["dur"]) <= ns(b["ts"]) for a, b in zip(track, track[1:]))
    events = [e for e in demo_trace["traceEvents"] if "ts" in e]
    assert all(isinstance(e["ts"], float) for e in events)


def test_cpu_source_writes_each_op_once(demo_trace, demo_result):
    ops = [p for p in slices(demo_trace) if p["cat"] == "cpu_op"]
    # the CPU source has one activity row per op (126): each becomes the op's one slice, no copy, no arrow
    assert len(ops) == demo_result.ops.num_rows == demo_result.activity.num_rows == 126
    assert {p["args"]["External id"] for p in ops} == set(demo_result.ops["op_id"].to_pylist())
    assert all(p["args"]["kernel"] == "cpu::" + p["name"] for p in ops)
    keys = [(p["pid"], p["tid"], p["ts"], p["dur"], p["name"]) for p in slices(demo_trace)]
    assert len(keys) == len(set(keys))
    assert not [e for e in demo_trace["traceEvents"] if e["ph"] in ("s", "f")]
    # the CPU source has no CUDA API records: no launch slices
    assert demo_result.launches.num_rows == 0
    assert not [e for e in slices(demo_trace) if e["cat"] in ("cuda_runtime", "cuda_driver")]


def test_host_and_activity_tracks_are_separate(demo_trace):
    assert process_names(demo_trace) == {CPU_PID: "CPU"}  # the CPU source's ops live on their threads
    for piece in slices(demo_trace):
        assert piece["cat"] in HOST_CATS, piece
    assert demo_trace["otherData"]["gpu_clock_offset_ns"] == 0  # CPU ops are timed on the host clock


def test_trace_is_json_and_written_to_a_file(demo_result, tmp_path):
    path = write_perfetto(demo_result, tmp_path / "sub" / "trace.json")
    assert path == tmp_path / "sub" / "trace.json"
    loaded = json.loads(path.read_text())
    assert len(loaded["traceEvents"]) == len(perfetto_events(demo_result)["traceEvents"])


def test_json_gz_is_gzip(demo_result, tmp_path):
    path = write_perfetto(demo_result, tmp_path / "trace.json.gz")
    raw = path.read_bytes()
    assert raw[:2] == b"\x1f\x8b"  # the gzip magic
    assert json.loads(gzip.decompress(raw)) == json.loads(write_perfetto(demo_result, tmp_path / "t.json").read_text())


def test_output_names_are_checked_against_the_format(demo_result, tmp_path):
    with pytest.raises(ValueError, match=r"report\.pdf does not end in \.html or \.htm"):
        write_report(demo_result, tmp_path / "report.pdf")
    with pytest.raises(ValueError, match=r"does not end in \.json or \.json\.gz"):
        write_perfetto(demo_result, tmp_path / "trace.html")
    assert not list(tmp_path.iterdir())  # refused before anything was written


# -- Perfetto on a hand-made result: exact values -----------------------------------------------------------
def expected_synthetic_slices() -> set[tuple[Any, ...]]:
    # origin = the earliest event = root module at host 1,000 ns; ts = (start - 1,000) / 1000 µs
    return {
        ("Net (root)", "module", CPU_PID, 1, 0.0, 8.0),  # (1,000 - 1,000) / 1000; (9,000 - 1,000) / 1000
        ("fc", "module", CPU_PID, 1, 1.0, 6.0),  # 2,000 → 1.0; 8,000 - 2,000 = 6,000 ns
        ("linear", "functional", CPU_PID, 1, 2.0, 4.0),  # 3,000 → 2.0; 7,000 - 3,000
        ("aten::addmm", "cpu_op", CPU_PID, 1, 3.0, 2.0),  # 4,000 → 3.0; 6,000 - 4,000
        ("aten::copy_", "cpu_op", CPU_PID, 1, 7.2, 0.6),  # 8,200 → 7.2; 8,800 - 8,200
        ("gemm", "kernel", GPU_PID_BASE, 7, 4.0, 0.5),  # CUPTI 1,005,000 - 1,000,000 = 5,000 → 4.0
        ("Memcpy HtoD", "gpu_memcpy", GPU_PID_BASE, 13, 7.5, 1.0),  # 1,008,500 - 1,000,000 = 8,500 → 7.5
        ("Memset", "gpu_memset", GPU_PID_BASE, 7, 8.6, 0.1),  # 1,009,600 - 1,000,000 = 9,600 → 8.6
    }


def as_rows(trace: dict[str, Any]) -> set[tuple[Any, ...]]:
    return {(s["name"], s["cat"], s["pid"], s["tid"], s["ts"], s["dur"]) for s in slices(trace)}


def flow_rows(trace: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(e["ph"], e["id"], e["pid"], e["tid"], e["ts"]) for e in trace["traceEvents"] if e["ph"] in "sf"]


def expected_launch_slices() -> set[tuple[Any, ...]]:
    # CUPTI - 1,000,000 = host; ts = (host - 1,000) / 1000 µs. Thread 77 launched for ops of recorder
    # thread 0 (tid 1), so its unclaimed memset launch goes there too; thread 99 gets its own track
    return {
        ("cudaLaunchKernel", "cuda_runtime", CPU_PID, 1, 3.5, 0.2),  # 4,500 → 3.5; 4,700 - 4,500
        ("cudaMemcpyAsync", "cuda_runtime", CPU_PID, 1, 7.3, 0.1),  # 8,300 → 7.3; 8,400 - 8,300
        ("cuMemsetD32Async", "cuda_driver", CPU_PID, 1, 7.85, 0.05),  # 8,850 → 7.85; 8,900 - 8,850
        ("cudaLaunchKernel", "cuda_runtime", CPU_PID, OS_THREAD_TID_BASE + 99, 7.9, 0.05),  # 8,900 → 7.9
    }


def test_synthetic_trace_exact_values_with_explicit_offset():
    trace = perfetto_events(synthetic_result(launches=True), gpu_clock_offset_ns=1_000_000)
    assert as_rows(trace) == expected_synthetic_slices() | expected_launch_slices()
    # arrows go from each launch's start to the start of what it launched: cudaLaunchKernel 3.5 →
    # gemm 4.0; cudaMemcpyAsync 7.3 → memcpy 7.5; cuMemsetD32Async 7.85 → memset 8.6 (no op, still
    # its launch); the launch on thread 99 launched nothing recorded, so no arrow
    assert flow_rows(trace) == [
        ("s", 1, CPU_PID, 1, 3.5),
        ("f", 1, GPU_PID_BASE, 7, 4.0),
        ("s", 2, CPU_PID, 1, 7.3),
        ("f", 2, GPU_PID_BASE, 13, 7.5),
        ("s", 3, CPU_PID, 1, 7.85),
        ("f", 3, GPU_PID_BASE, 7, 8.6),
    ]
    assert {e["cat"] for e in trace["traceEvents"] if e["ph"] in "sf"} == {"ac2g"}
    assert all(e["bp"] == "e" for e in trace["traceEvents"] if e["ph"] == "f")  # Kineto binds to the kernel
    assert process_names(trace) == {CPU_PID: "CPU", GPU_PID_BASE: "GPU 0"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threads == {
        (CPU_PID, 1): "thread 0",
        (CPU_PID, OS_THREAD_TID_BASE + 99): "os thread 99",
        (GPU_PID_BASE, 7): "stream 7",
        (GPU_PID_BASE, 13): "stream 13",
    }
    assert trace["otherData"]["time_origin_host_ns"] == 1_000 and trace["otherData"]["flows_skipped"] == 0


def test_launch_slices_carry_kinetos_runtime_args_and_nest_in_their_op():
    trace = perfetto_events(synthetic_result(launches=True), gpu_clock_offset_ns=1_000_000)
    launches = sorted((s for s in slices(trace) if s["cat"] in ("cuda_runtime", "cuda_driver")), key=lambda s: s["ts"])
    assert [s["args"] for s in launches] == [
        {"cbid": 211, "correlation": 10, "External id": 0, "os_thread": 77},  # gemm's launch, op 0 (addmm)
        {"cbid": 41, "correlation": 11, "External id": 1, "os_thread": 77},  # memcpy's launch, op 1 (copy_)
        {"cbid": 220, "correlation": 12, "os_thread": 77},  # the memset no op claimed: no External id
        {"cbid": 211, "correlation": 13, "os_thread": 99},
    ]
    by_name = {s["name"]: s for s in slices(trace) if s["cat"] == "cpu_op"}
    assert contains(by_name["aten::addmm"], launches[0]) and contains(by_name["aten::copy_"], launches[1])
    # which op launched a kernel stays in the kernel's args, not in an arrow
    gemm = next(s for s in slices(trace) if s["name"] == "gemm")
    assert (gemm["args"]["External id"], gemm["args"]["op"]) == (0, "aten::addmm")


@pytest.mark.parametrize("offset", [0, 1_000_000, 1_000_500, 5_000_000_000])
def test_no_arrow_goes_back_in_time_whatever_the_clock_offset(offset: int):
    # launches and kernels are both CUPTI timestamps shifted by the same offset: every launch starts
    # before what it launched (4,500 < 5,000; 8,300 < 8,500; 8,850 < 9,600), so all three arrows stay
    trace = perfetto_events(synthetic_result(launches=True), gpu_clock_offset_ns=offset)
    pairs: dict[int, dict[str, dict[str, Any]]] = {}
    for event in trace["traceEvents"]:
        if event["ph"] in "sf":
            pairs.setdefault(event["id"], {})[event["ph"]] = event
    assert len(pairs) == 3 and trace["otherData"]["flows_skipped"] == 0
    assert all(pair["s"]["ts"] <= pair["f"]["ts"] for pair in pairs.values())
    assert [ns(pair["f"]["ts"]) - ns(pair["s"]["ts"]) for pair in pairs.values()] == [500, 200, 750]


def test_a_launch_recorded_after_its_kernel_gets_no_arrow():
    # a launch record whose start lies after its kernel's (5,100 > gemm's 5,000) would draw a backward arrow
    result = synthetic_result(launches=True)
    launches = result.launches
    starts = launches["start_ns"].to_pylist()
    starts[0] = 1_000_000 + 5_100
    launches = launches.set_column(4, "start_ns", pa.array(starts, pa.int64()))
    launches = launches.set_column(5, "end_ns", pa.array([s + 10 for s in starts], pa.int64()))
    trace = perfetto_events(dataclasses.replace(result, launches=launches), gpu_clock_offset_ns=1_000_000)
    assert [row[1] for row in flow_rows(trace)] == [1, 1, 2, 2]  # memcpy's and memset's arrows only
    assert trace["otherData"]["flows_skipped"] == 1


def test_without_launch_records_there_are_no_launch_slices_and_no_arrows():
    # results of the CPU source and results saved before the launches table: op -> kernel stays in args
    trace = perfetto_events(synthetic_result(), gpu_clock_offset_ns=1_000_000)
    assert as_rows(trace) == expected_synthetic_slices()
    assert flow_rows(trace) == [] and trace["otherData"]["flows_skipped"] == 0
    gemm = next(s for s in slices(trace) if s["name"] == "gemm")
    assert gemm["args"]["External id"] == 0


def test_synthetic_trace_carries_kinetos_args():
    trace = perfetto_events(synthetic_result(), gpu_clock_offset_ns=1_000_000)
    by_name = {s["name"]: s["args"] for s in slices(trace)}
    # gemm: CUPTI correlation 10 → op 0 (aten::addmm); memcpy: correlation 11 → op 1 (aten::copy_)
    assert {k: by_name["gemm"][k] for k in ("device", "stream", "correlation", "External id")} == {
        "device": 0,
        "stream": 7,
        "correlation": 10,
        "External id": 0,
    }
    assert (by_name["Memcpy HtoD"]["correlation"], by_name["Memcpy HtoD"]["External id"]) == (11, 1)
    assert "External id" not in by_name["Memset"]  # no op claimed it
    assert (by_name["aten::addmm"]["External id"], by_name["aten::copy_"]["External id"]) == (0, 1)
    assert by_name["gemm"]["function"] == "linear" and by_name["gemm"]["module"] == "fc"
    # the copy ran in the root: named as its module slice is, not by the root's empty name
    assert by_name["Memcpy HtoD"]["module"] == "Net (root)" and by_name["Memset"]["module"] is None
    assert trace["schemaVersion"] == 1 and trace["deviceProperties"] == []  # no GPU facts in the metadata


def test_device_properties_come_from_the_metadata():
    metadata = {"gpu_name": "NVIDIA H200", "gpu_compute_capability": "9.0", "gpu_memory_bytes": "150000000000"}
    props = device_properties(synthetic_result(metadata=metadata | {"gpu_sm_count": "132"}))
    assert props == [
        {
            "id": 0,
            "name": "NVIDIA H200",
            "totalGlobalMem": 150_000_000_000,
            "numSms": 132,
            "computeMajor": 9,
            "computeMinor": 0,
        }
    ]


def test_offset_comes_from_metadata_when_not_given():
    result = synthetic_result(metadata={"activity_minus_host_ns": "1000000"})
    assert gpu_clock_offset(result) == (1_000_000, "metadata['activity_minus_host_ns']")
    assert as_rows(perfetto_events(result)) == expected_synthetic_slices()


def test_offset_is_estimated_when_clocks_disagree_and_nothing_says_by_how_much():
    result = synthetic_result(cupti_offset_ns=5_000_000_000)
    # launch gaps (kernel start - op start): gemm 5,000,005,000 - 4,000 = 5,000,001,000;
    # memcpy 5,000,008,500 - 8,200 = 5,000,000,300 → the smallest, so the memcpy starts as copy_ does
    offset, source = gpu_clock_offset(result)
    assert (offset, source[:9]) == (5_000_000_300, "estimated")
    rows = {row[0]: row for row in as_rows(perfetto_events(result))}
    assert rows["Memcpy HtoD"][4] == 7.2  # 8,200 - 1,000 = 7,200 ns
    assert rows["gemm"][4] == 3.7  # 5,000,005,000 - 5,000,000,300 = 4,700 → 3,700 ns after the origin


def test_small_clock_difference_is_taken_as_the_same_clock():
    # gaps of ~1 ms are launch latency as far as the exporter can tell: offset 0, kernels 1 ms late
    assert gpu_clock_offset(synthetic_result(cupti_offset_ns=1_000_000)) == (0, "assumed: same clock")


def test_empty_result_gives_an_empty_trace():
    empty = empty_result()
    assert perfetto_events(empty)["traceEvents"] == []
    assert 'id="icicle"' in HtmlRenderer().render(empty)  # the page renders with nothing to show


# -- HTML report ---------------------------------------------------------------------------------------------
class TagCollector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def tags_of(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = TagCollector()
    parser.feed(page)
    return parser.tags


def test_report_is_self_contained(demo_result, tmp_path):
    page = write_report(demo_result, tmp_path / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert not re.search(r"@import|url\(\s*['\"]?(?:https?:)?//", page, re.IGNORECASE)
    for tag, attrs in tags_of(page):
        assert tag not in ("link", "img", "iframe") and "src" not in attrs, (tag, attrs)
    assert page.count("<script") == 2  # the embedded data and the inline script


def table_rows(page: str, css: str) -> list[list[str]]:
    """The text of each body row's cells in ``<table class="css">``."""
    body = re.search(rf'<table class="{css}">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert body is not None, f"no {css} table"
    shown = re.sub(r'<code class="full">.*?</code>', "", body.group(1), flags=re.S)  # what a closed cell shows
    rows = re.findall(r"<tr>(.*?)</tr>", shown, re.S)
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]


def test_report_contains_summary_rows_and_functions(demo_result):
    page = HtmlRenderer().render(demo_result)
    summary = demo_result.describe(top_k=100)
    assert len(summary) == 8
    unit = Page.of(demo_result, "").unit
    rows = {r[0]: r for r in table_rows(page, "summary")}
    for row in summary.itertuples():
        assert f"<code>{row.function_name}</code>" in page
        # time in the page's one unit, share of all kernel time (not describe()'s share of attributed time);
        # in ms (this CPU run's unit) two decimals, more below 0.1 ms, so that no function reads 0.0
        us = row.time_spent_us
        digits = (2 if us < 10 else 1) if unit.scale == 1 else unit.decimals(us)
        assert rows[row.function_name][4] == f"{us / unit.scale:,.{digits}f}" and rows[row.function_name][4] != "0.0"
        assert rows[row.function_name][5] == f"{100 * row.time_spent_us / demo_result.total_us:,.1f}%"
    for name in demo_result.function_data:
        assert f"<summary><code>{name}</code>" in page
    assert "blocks.0.qkv" in page and "DemoModel (root)" in page


def test_report_escapes_names(tmp_path):
    page = write_report(synthetic_result(fc_name=EVIL), tmp_path / "evil.html").read_text(encoding="utf-8")
    assert EVIL not in page and "alert(1)</script>" not in page
    assert "fc\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in page  # inside the embedded JSON
    assert [tag for tag, _ in tags_of(page)].count("script") == 2


def test_embedded_data_is_the_module_tree(demo_result):
    page = HtmlRenderer().render(demo_result)
    blob = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert blob is not None
    data = json.loads(blob.group(1))
    assert data["tree"]["total_us"] == pytest.approx(demo_result.total_us)
    assert data["bars"][0]["name"] == demo_result.describe()["function_name"][0]


def test_module_tree_exact_values():
    tree = module_tree(synthetic_result())
    # all activity = gemm 0.5 + memcpy 1.0 + memset 0.1 = 1.6 µs; the memset has no op, so no module
    assert tree["total_us"] == pytest.approx(1.6)
    root, outside = tree["children"]
    assert (outside["name"], outside["total_us"]) == ("(outside profiled modules)", pytest.approx(0.1))
    # root "Net" = its own memcpy (copy_ ran outside any functional call) 1.0 + fc's gemm 0.5
    assert (root["name"], root["total_us"], root["self_us"], root["no_call_us"]) == (
        "Net (root)",
        pytest.approx(1.5),
        pytest.approx(1.0),
        pytest.approx(1.0),
    )
    fc, no_call = root["children"]
    assert (fc["name"], fc["total_us"]) == ("fc", pytest.approx(0.5))
    assert [(c["name"], c["kind"], c["total_us"]) for c in fc["children"]] == [("linear", "function", 0.5)]
    assert (no_call["kind"], no_call["total_us"]) == ("nocall", pytest.approx(1.0))


def test_bar_rows_show_unattributed_time():
    result = synthetic_result()
    bars = report_data(result, result.describe())["bars"]
    # linear 0.5 of 1.6 µs = 31.25 %; unattributed 1.6 - 0.5 = 1.1 µs = 68.75 %
    assert [(b["name"], round(b["us"], 6), round(b["pct"], 6)) for b in bars] == [
        ("linear", 0.5, 31.25),
        (UNATTRIBUTED, 1.1, 68.75),
    ]


def test_sample_values_render_for_tensors_and_metadata():
    assert value_text(torch.ones(5, 3).t()) == "float32[3, 5] stride (1, 3)"
    assert value_text(torch.zeros(4, dtype=torch.int64)) == "int64[4] stride (1,)"
    meta = SimpleNamespace(shape=(2, 3), dtype="float16", stride=(3, 1))
    assert value_text(meta) == "float16[2, 3] stride (3, 1)"
    no_stride = SimpleNamespace(shape=(2,), dtype="bfloat16", stride=None)
    assert value_text((no_stride, [1, 2], {"eps": 1e-05}, None)) == "(bfloat16[2], [1, 2], {'eps': 1e-05}, None)"
    page = HtmlRenderer().render(synthetic_result())
    assert "float16[2, 3] stride (3, 1)" in page and "float32[3, 5] stride (1, 3)" in page
    assert "bias=None" in page


def test_saved_tensor_metadata_renders():
    persist = pytest.importorskip("aitune_dispatch.results.persist")
    meta = persist.TensorMeta.from_tensor(torch.ones(2, 8)[:, ::2])
    assert value_text(meta) == "float32[2, 4] stride (8, 2)"


def test_renderer_is_picked_by_file_name():
    assert isinstance(renderer_for("out/report.html"), HtmlRenderer)
    assert isinstance(renderer_for("trace.JSON"), PerfettoRenderer)
    assert isinstance(renderer_for("trace.json.gz"), PerfettoRenderer)
    assert isinstance(renderer_for("r.htm"), HtmlRenderer)
    with pytest.raises(ValueError, match=r"'\.pdf'; name the output \.html, \.htm, \.json, \.json\.gz"):
        renderer_for("report.pdf")


# -- templates ----------------------------------------------------------------------------------------------
def test_every_template_is_package_data():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    from aitune_dispatch.reports import templating

    root = Path(__file__).resolve().parents[1]
    patterns = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    package = root / "aitune_dispatch"
    templates = sorted(p.relative_to(package).as_posix() for p in templating.TEMPLATES.iterdir())
    assert "reports/templates/report.html.j2" in templates
    # a non-editable install ships only what package-data names
    assert [t for t in templates if not any(fnmatch.fnmatch(t, p) for p in patterns["aitune_dispatch"])] == []


def test_jinja2_is_imported_on_the_first_render_only():
    code = (
        "import sys, aitune_dispatch, aitune_dispatch.reports\n"
        "before = 'jinja2' in sys.modules\n"
        "sys.path.insert(0, 'tests')\n"
        "from fixture_results import synthetic_result\n"
        "synthetic_result()._repr_html_()\n"
        "print(before, 'jinja2' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


def test_name_parts_break_after_the_marks_and_join_back():
    from aitune_dispatch.reports.templating import name_parts

    assert name_parts("blocks.0.qkv") == ["blocks.", "0.", "qkv"]
    assert name_parts("at::native::vectorized_layer_norm<float, 4>") == [
        "at::", "native::", "vectorized_", "layer_", "norm<", "float, ", "4>"
    ]
    assert name_parts("") == [""] and name_parts("linear") == ["linear"]
    page = HtmlRenderer().render(synthetic_result(fc_name="layers.0.fc_inner"))
    assert "layers.<wbr>0.<wbr>fc_<wbr>inner" in page  # long names wrap at their break points


# -- kernels: the roll-up per name, then the split by op, call and module ----------------------------------
def test_kernel_rollup_leads_the_kernel_section(h200_result):
    page = HtmlRenderer().render(h200_result)
    rollup, detail = views.kernel_rollup(h200_result), views.kernel_table(h200_result)
    section = page[page.index('<section id="kernels">') :]
    assert section.index('<table class="kernel-rollup">') < section.index('<table class="kernels">')
    rows = table_rows(page, "kernel-rollup")
    assert len(rows) == min(len(rollup), ROLLUP_ROWS)
    state = Page.of(h200_result, "")
    labels = kernel_labels(list(rollup["kernel"]), list(rollup["short_name"]))
    for row, expected, label in zip(rows, rollup.itertuples(), labels):
        assert row[0] == label  # the short name, template arguments kept only where two kernels share it
        assert row[1:4] == [expected.kind, f"{expected.count:,}", state.time(expected.total_us)]
    # the demo's costliest kernel over all its launches is not the first row of the split table
    assert rollup["kernel"][0] != detail["kernel"][0]
    assert rows[0][0] == rollup["short_name"][0]
    rest = len(rollup) - ROLLUP_ROWS
    assert len(table_rows(page, "kernel-rollup-more")) == rest and f"<summary>{rest} more</summary>" in page


def test_kernel_rollup_caps_its_rows_with_a_note(h200_result, monkeypatch):
    from aitune_dispatch.reports import html as report_html

    monkeypatch.setattr(report_html, "MORE_KERNEL_ROWS", 2)
    page = HtmlRenderer(sections=(report_html.kernels_section,)).render(h200_result)
    total = len(views.kernel_rollup(h200_result))
    assert len(table_rows(page, "kernel-rollup-more")) == 2
    assert f"<summary>2 more (of {total - ROLLUP_ROWS})</summary>" in page


# -- GPU busy and idle ---------------------------------------------------------------------------------------
def card_value(page: str, card_id: str) -> str:
    card = rf'<div class="card" id="{card_id}"><div class="label">[^<]*</div><div class="value">([^<]*)<'
    found = re.search(card, page)
    assert found is not None, f"no card {card_id}"
    return html.unescape(found.group(1))


def test_gpu_busy_and_idle_figures_are_the_views(h200_result):
    page = HtmlRenderer().render(h200_result)
    busy, gaps = views.device_busy(h200_result), views.idle_gaps(h200_result)
    device = busy[busy["stream"].isna()].iloc[0]
    assert card_value(page, "card-gpu-busy") == percent(device.busy_share)  # near the top: the headline cards
    assert page.index('id="card-gpu-busy"') < page.index('<section id="functions">')
    assert f"GPU 0 was busy {percent(device.busy_share)} of the passes" in html.unescape(page)
    state = Page.of(h200_result, "")
    rows = table_rows(page, "device-busy")
    assert len(rows) == len(busy)
    assert rows[0][:6] == ["0", "all", state.time(device.wall_us), state.time(device.busy_us)] + [
        percent(device.busy_share),
        state.time(device.idle_us),
    ]
    shown = table_rows(page, "idle-gaps")
    assert len(shown) == min(len(gaps), IDLE_GAP_ROWS) and len(gaps) > IDLE_GAP_ROWS
    first = gaps.iloc[0]
    assert shown[0][4] == state.time(first.gap_us) and shown[0][5] == first.host_modules  # the longest gap, its modules
    assert len(table_rows(page, "idle-gaps-more")) == len(gaps) - IDLE_GAP_ROWS


def test_a_cpu_result_says_it_has_no_gpu_activity(demo_result):
    page = HtmlRenderer().render(demo_result)
    assert views.device_busy(demo_result).empty  # the CPU source times aten ops on the host
    section = page[page.index('<section id="gpu-time">') :]
    section = html.unescape(section[: section.index("</section>")])
    assert "No GPU activity: this result's activity source is cpu" in section
    assert '<table class="device-busy">' not in section and '<table class="idle-gaps">' not in section
    assert "%" not in section  # no busy share shown where there is none
    assert card_value(page, "card-gpu-busy") == "\u2014"


def test_busy_readings():
    assert busy_reading(0.03)[0] == "launch-bound" and busy_reading(0.6)[0] == "partly launch-bound"
    assert busy_reading(0.95)[0] == "compute-bound"
    assert percent(0.028571) == "2.9%" and percent(float("nan")) == "\u2014"


# -- sortable tables -------------------------------------------------------------------------------------------
def test_numeric_cells_carry_their_raw_value_for_sorting(h200_result, demo_result):
    page = HtmlRenderer().render(h200_result)
    rollup = views.kernel_rollup(h200_result).head(ROLLUP_ROWS)
    body = re.search(r'<table class="kernel-rollup">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert body is not None
    keys = [re.findall(r'<td class="num" data-sort="([^"]*)">', row) for row in re.findall(r"<tr>(.*?)</tr>", body[1])]
    # launches, total, mean, min, max, share (by total): the view's numbers, not the formatted text
    columns = ["count", "total_us", "mean_us", "min_us", "max_us", "total_us"]
    assert [[float(k) for k in row] for row in keys] == rollup[columns].astype(float).values.tolist()
    assert keys[0][1] == repr(float(rollup["total_us"][0]))  # full precision: 35.36, not "35.4"
    for report in (page, HtmlRenderer().render(demo_result)):
        for attrs, text in re.findall(r'<td class="num"([^>]*)>(.*?)</td>', report, re.S):
            key = re.fullmatch(r' data-sort="([^"]*)"', attrs)
            assert (key is not None and float(key[1]) == float(key[1])) or text == "\u2014", (attrs, text)



# -- the notebook view ---------------------------------------------------------------------------------------
def test_the_notebook_names_the_top_kernels_and_the_busy_share(h200_result, demo_result):
    from aitune_dispatch.reports.html import NOTEBOOK_KERNELS

    page = h200_result._repr_html_()
    assert "<script" not in page
    rollup = views.kernel_rollup(h200_result, top=NOTEBOOK_KERNELS)
    rows = table_rows(page, "kernel-rollup")
    assert [row[0] for row in rows] == list(rollup["short_name"])  # the top kernels' short names are distinct
    for name in rollup["kernel"]:
        assert f'title="{html.escape(name)}"' in page  # the full name on hover
    assert rows[0][1] == f"{rollup['count'][0]:,}"
    busy = views.device_busy(h200_result)
    assert f"GPU busy {percent(busy['busy_share'][0])} (launch-bound: idle" in html.unescape(page)  # 2.9%
    cpu = demo_result._repr_html_()
    assert "no GPU activity: the CPU activity source" in cpu and "GPU busy" not in cpu


def test_the_roofline_section_places_the_samples_and_ranks_what_is_worth_optimizing(h200_result):
    from aitune_dispatch.reports.html import HtmlRenderer, roofline_section

    page = HtmlRenderer(sections=(roofline_section,)).render(h200_result)
    samples = h200_result.samples(roofline=True)
    placed = samples[(samples["intensity"] > 0) & (samples["flop_per_s"] > 0)]
    assert page.count("<circle ") == len(placed) > 0  # one point per sample whose FLOPs are known
    ranked = h200_result.worth_optimizing(top=None)
    table = page[page.index('class="worth"') :]
    body = table.index("<tbody>")
    first_row = table[body : table.index("</tr>", body)]
    assert html.escape(ranked["signature"].iloc[0]) in first_row  # the largest worth_us leads
    assert "H200 SXM" in page and "float32 peak" in page  # the demo ran in float32: that roof is drawn


def test_the_roofline_section_says_why_a_cpu_run_has_no_bounds(demo_result):
    from aitune_dispatch.reports.html import HtmlRenderer, roofline_section

    page = HtmlRenderer(sections=(roofline_section,)).render(demo_result)
    assert "are not known" in page and "<circle" not in page and 'class="worth"' not in page
