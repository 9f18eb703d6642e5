"""The kernel roll-up and the devices' busy and idle time, on the synthetic result (its timings are in
``fixture_results.synthetic_result``'s docstring) and on the committed H200 recording."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from fixture_results import synthetic_result

from aitune_dispatch import encoded, schema
from aitune_dispatch.results import views

OFFSET_NS = 1_000_000  # the synthetic CUPTI clock runs this far ahead of the host's


@pytest.fixture(name="synthetic")
def synthetic_fixture():
    return synthetic_result(cupti_offset_ns=OFFSET_NS, metadata={schema.META_CLOCK_OFFSET: str(OFFSET_NS)})


def _brute_force_busy_ns(intervals: list[tuple[int, int]], window: tuple[int, int]) -> int:
    """Busy time by marking every nanosecond: slow, obviously right."""
    low, high = window
    busy = np.zeros(high - low, bool)
    for start, end in intervals:
        busy[max(start, low) - low : max(min(end, high) - low, 0)] = True
    return int(busy.sum())


def test_the_rollup_adds_up_every_launch_of_a_kernel(h200_result):
    rollup = h200_result.kernel_rollup()
    rows = encoded.decoded(h200_result.activity).to_pandas()
    expected = rows.groupby("kernel")["kernel_us"].agg(["size", "sum", "min", "max"])
    assert len(rollup) == len(expected)
    for row in rollup.itertuples():
        assert row.count == expected.loc[row.kernel, "size"]
        assert row.total_us == pytest.approx(expected.loc[row.kernel, "sum"])
        assert (row.min_us, row.max_us) == (expected.loc[row.kernel, "min"], expected.loc[row.kernel, "max"])
        assert row.mean_us == pytest.approx(row.total_us / row.count)
    assert rollup["total_us"].is_monotonic_decreasing
    assert rollup["share"].sum() == pytest.approx(1.0)
    # the first row is the costliest kernel, even where kernel_table splits it over several rows
    assert rollup["kernel"].iloc[0] == expected["sum"].idxmax()
    assert rollup["count"].dtype == np.int64 and rollup["kernel"].dtype == pd.Series(["a"]).dtype
    assert list(h200_result.kernel_rollup(top=3)["kernel"]) == list(rollup["kernel"].head(3))


def test_busy_time_is_the_union_of_the_device_activity_inside_the_pass(synthetic):
    busy = synthetic.device_busy().set_index("stream", drop=False)
    # the pass (root module) is 1,000-9,000 ns on the host clock; gemm 5,000-5,500 on stream 7, the
    # memcpy 8,500-9,500 on stream 13 (clipped at 9,000), the memset 9,600-9,700 after the pass
    assert list(busy.columns) == views.gpu_time.BUSY_COLUMNS
    device = busy[busy["stream"].isna()].iloc[0]
    assert device["wall_us"] == 8.0 and device["busy_us"] == pytest.approx(1.0)
    assert device["idle_us"] == pytest.approx(7.0) and device["busy_share"] == pytest.approx(1 / 8)
    assert device["launches"] == 3
    per_stream = busy.dropna(subset=["stream"]).set_index("stream")
    assert per_stream.loc[7, "busy_us"] == pytest.approx(0.5) and per_stream.loc[13, "busy_us"] == pytest.approx(0.5)
    assert per_stream.loc[7, "launches"] == 2


def test_overlapping_streams_count_once_per_device(h200_result):
    busy = h200_result.device_busy()
    windows = views.pass_windows(h200_result)
    roots = [
        m
        for m, p in zip(
            h200_result.modules["module_id"].to_pylist(), h200_result.modules["parent_module_id"].to_pylist()
        )
        if p is None or p < 0
    ]
    assert len(windows) == sum(m in roots for m in h200_result.module_calls["module_id"].to_pylist()) > 0
    rows = h200_result.activity
    offset = int(h200_result.metadata.get(schema.META_CLOCK_OFFSET) or 0)
    intervals = [
        (start - offset, end - offset)
        for start, end, kind in zip(
            rows["start_ns"].to_pylist(), rows["end_ns"].to_pylist(), encoded.objects(rows["kind"])
        )
        if kind != "cpu_op"
    ]
    expected_ns = sum(_brute_force_busy_ns(intervals, (int(a), int(b))) for a, b in windows)
    device = busy[busy["stream"].isna()].iloc[0]
    assert device["busy_us"] == pytest.approx(expected_ns / 1e3)
    assert device["wall_us"] == pytest.approx(float(np.sum(windows[:, 1] - windows[:, 0])) / 1e3)
    assert device["busy_us"] <= h200_result.total_us + 1e-6  # a union never exceeds the sum


def test_idle_gaps_are_what_the_pass_left_uncovered_and_name_the_host_modules(synthetic):
    gaps = synthetic.idle_gaps(min_gap_us=0)
    assert list(gaps.columns) == views.gpu_time.GAP_COLUMNS
    # idle 1,000-5,000 and 5,500-8,500 (the memcpy runs to the pass's end)
    assert list(zip(gaps["start_us"], gaps["end_us"])) == [(0.0, 4.0), (4.5, 7.5)]
    assert gaps["gap_us"].tolist() == [4.0, 3.0]
    # 1,000-5,000: the root alone for 1 µs, then fc (2,000-8,000) for 3 µs: fc first
    assert gaps["host_modules"].iloc[0] == "fc, Net (root)"
    # 5,500-8,500: fc to 8,000 (2.5 µs), then the root alone (0.5 µs)
    assert gaps["host_modules"].iloc[1] == "fc, Net (root)"
    assert synthetic.idle_gaps(min_gap_us=0, top=1)["host_modules"].tolist() == ["fc, Net (root)"]
    assert gaps["gap_us"].sum() == pytest.approx(synthetic.device_busy()["idle_us"].iloc[0])
    assert synthetic.idle_gaps(min_gap_us=3.5)["gap_us"].tolist() == [4.0]
    assert len(synthetic.idle_gaps(min_gap_us=0, top=1)) == 1


def test_gaps_and_busy_time_add_up_to_the_wall_time(h200_result):
    busy = h200_result.device_busy()
    device = busy[busy["stream"].isna()].iloc[0]
    gaps = h200_result.idle_gaps(min_gap_us=0)
    assert gaps["gap_us"].sum() + device["busy_us"] == pytest.approx(device["wall_us"], rel=1e-9)
    assert gaps["gap_us"].is_monotonic_decreasing
    assert set(gaps["sample"]) <= set(range(len(views.pass_windows(h200_result))))
    labels = {label for label, _ in views.module_labels(h200_result).values()}
    named = collections.Counter(name for text in gaps["host_modules"] for name in text.split(", ") if name)
    assert named and set(named) <= labels


def test_a_result_without_device_activity_has_no_busy_rows(demo_result):
    assert demo_result.device_busy().empty and demo_result.idle_gaps().empty
    assert list(demo_result.device_busy().columns) == views.gpu_time.BUSY_COLUMNS
    assert demo_result.kernel_rollup()["count"].sum() == demo_result.activity.num_rows


def test_an_empty_result_keeps_the_columns(synthetic):
    empty = dataclasses.replace(synthetic, activity=synthetic.activity.slice(0, 0))
    assert list(empty.kernel_rollup().columns) == views.rollup.ROLLUP_COLUMNS
    assert empty.kernel_rollup().empty and empty.device_busy().empty
    assert isinstance(empty.activity, pa.Table)
