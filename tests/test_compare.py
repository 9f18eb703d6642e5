"""compare(a, b): per-function and per-kernel time before and after, exact on synthetic tables."""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch
from fixture_results import activity_table
from torch import nn

import aitune_dispatch
from aitune_dispatch import ModuleFunctionKernelProfiler, ProfileResult
from aitune_dispatch.results import compare, load
from aitune_dispatch.schema import COMPARE_COLUMNS

STRING = pd.Series(["a"]).dtype  # the one string dtype of every frame

NAN = math.nan


def _result(rows: list[tuple[str | None, str, float, int]]) -> ProfileResult:
    """A result whose activity rows are ``(function_name, kernel, kernel_us, call_id)``, on thread 1 in
    the root module."""
    activity = activity_table(
        kernel=[kernel for _, kernel, _, _ in rows],
        kernel_us=[us for _, _, us, _ in rows],
        function_name=[fn for fn, _, _, _ in rows],
        call_id=[call for *_, call in rows],
        thread=1,
    )
    empty = pa.table({})
    return ProfileResult(activity, empty, empty, empty, empty, {}, "synthetic")


BEFORE = [
    ("linear", "gemm", 10.0, 0),
    ("linear", "gemm", 20.0, 1),
    ("linear", "bias", 5.0, 1),  # two kernels of call 1
    ("relu", "relu_k", 4.0, 2),
    (None, "copy", 1.0, -1),
]
AFTER = [
    ("linear", "gemm", 12.0, 0),
    ("linear", "bias", 5.0, 0),  # one call, two kernels
    ("gelu", "gelu_k", 6.0, 1),
    (None, "copy", 1.0, -1),
    (None, "memset", 2.0, -1),
]


def test_exact_differences_on_synthetic_results():
    table = compare(_result(BEFORE), _result(AFTER))
    expected = pd.DataFrame(
        [
            # level, function, kernel, before, after, delta, ratio, kernels, calls; largest |delta| first
            ("function", "linear", None, 35.0, 17.0, -18.0, 17 / 35, 3, 2, 2, 1),  # 10+20+5 -> 12+5
            ("function", "gelu", None, 0.0, 6.0, 6.0, NAN, 0, 1, 0, 1),  # after only: ratio NaN
            ("function", "relu", None, 4.0, 0.0, -4.0, 0.0, 1, 0, 1, 0),  # before only
            ("function", None, None, 1.0, 3.0, 2.0, 3.0, 1, 2, 0, 0),  # no functional call: 1 -> 1+2
            ("kernel", "linear", "gemm", 30.0, 12.0, -18.0, 0.4, 2, 1, 2, 1),
            ("kernel", "gelu", "gelu_k", 0.0, 6.0, 6.0, NAN, 0, 1, 0, 1),
            ("kernel", "relu", "relu_k", 4.0, 0.0, -4.0, 0.0, 1, 0, 1, 0),
            ("kernel", None, "memset", 0.0, 2.0, 2.0, NAN, 0, 1, 0, 0),
            ("kernel", "linear", "bias", 5.0, 5.0, 0.0, 1.0, 1, 1, 1, 1),  # equal change: larger time first
            ("kernel", None, "copy", 1.0, 1.0, 0.0, 1.0, 1, 1, 0, 0),
        ],
        columns=COMPARE_COLUMNS,
    )
    expected = expected.astype({c: float for c in ("before_us", "after_us", "delta_us", "ratio")})
    counts = ("before_kernels", "after_kernels", "before_calls", "after_calls")
    strings = ("level", "function_name", "kernel")
    expected = expected.astype(dict.fromkeys(counts, np.int64) | dict.fromkeys(strings, STRING))
    pd.testing.assert_frame_equal(table, expected)
    assert pd.isna(table["function_name"].iloc[3])  # missing, not a placeholder string


def test_each_level_sums_to_the_totals():
    before, after = _result(BEFORE), _result(AFTER)
    table = compare(before, after)
    for level in ("function", "kernel"):
        rows = table[table["level"] == level]
        assert rows["before_us"].sum() == before.total_us == 40.0  # 10+20+5+4+1
        assert rows["after_us"].sum() == after.total_us == 26.0  # 12+5+6+1+2
        assert rows["before_kernels"].sum() == 5 and rows["after_kernels"].sum() == 5


def test_empty_results_give_an_empty_frame():
    table = compare(_result([]), _result([]))
    assert table.empty and list(table.columns) == COMPARE_COLUMNS
    assert table["delta_us"].dtype == float and table["after_kernels"].dtype == np.int64


def test_compare_rejects_what_is_not_a_result():
    with pytest.raises(TypeError, match="b is a str"):
        compare(_result(BEFORE), "after.parquet")


# -- two CPU runs of different models ------------------------------------------------------------------
def _profile(model: nn.Module) -> ProfileResult:
    samples = [((torch.randn(8, 16),), {})]
    return ModuleFunctionKernelProfiler(device="cpu").profile_result(model.eval(), samples, warmup_iterations=0)


@pytest.fixture(scope="module")
def two_runs() -> tuple[ProfileResult, ProfileResult]:
    torch.manual_seed(0)
    before = _profile(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    after = _profile(nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.Linear(8, 4)))
    return before, after


def _key(name: object) -> object:
    return name if isinstance(name, str) else None  # NaN is not equal to itself: a missing name is None here


def _sums(result: ProfileResult, by_kernel: bool) -> dict:
    totals: dict = defaultdict(lambda: [0.0, 0])
    for row in result.activity.to_pylist():
        key = (row["function_name"], row["kernel"] if by_kernel else None)
        totals[key][0] += row["kernel_us"]
        totals[key][1] += 1
    return totals


def test_two_cpu_runs_match_their_tables(two_runs):
    before, after = two_runs
    table = compare(before, after)
    for level, by_kernel in (("function", False), ("kernel", True)):
        want_before, want_after = _sums(before, by_kernel), _sums(after, by_kernel)
        rows = table[table["level"] == level]
        got = {(_key(row.function_name), _key(row.kernel)): row for row in rows.itertuples()}
        assert set(got) == set(want_before) | set(want_after)
        for key, row in got.items():
            b_us, b_n = want_before.get(key, (0.0, 0))
            a_us, a_n = want_after.get(key, (0.0, 0))
            # pandas sums with compensation, Python left to right: equal to the last few ulps
            assert row.before_us == pytest.approx(b_us, rel=1e-12) and row.after_us == pytest.approx(a_us, rel=1e-12)
            assert row.delta_us == pytest.approx(a_us - b_us, rel=1e-12, abs=1e-9)
            assert (row.before_kernels, row.after_kernels) == (b_n, a_n)
            if b_us > 0:
                assert row.ratio == pytest.approx(a_us / b_us, rel=1e-12)
            else:
                assert math.isnan(row.ratio)
    functions = table[table["level"] == "function"].set_index("function_name")
    assert functions.loc["relu", "after_kernels"] == 0 and functions.loc["relu", "after_us"] == 0.0
    assert functions.loc["gelu", "before_kernels"] == 0 and math.isnan(functions.loc["gelu", "ratio"])
    assert functions["delta_us"].abs().is_monotonic_decreasing


def test_saved_results_compare_the_same(two_runs, tmp_path):
    before, after = two_runs
    loaded = compare(load(before.save(tmp_path / "a")), load(after.save(tmp_path / "b.parquet")))
    pd.testing.assert_frame_equal(loaded, compare(before, after))
    assert aitune_dispatch.compare is compare
