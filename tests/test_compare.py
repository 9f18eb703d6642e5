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
NO_NOISE = (NAN, NAN, NAN, pd.NA)  # one step a side: no step interval, outside_noise unknown


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
            ("function", "linear", None, 35.0, 17.0, -18.0, 17 / 35, 3, 2, 2, 1, *NO_NOISE),  # 10+20+5 -> 12+5
            ("function", "gelu", None, 0.0, 6.0, 6.0, NAN, 0, 1, 0, 1, *NO_NOISE),  # after only: ratio NaN
            ("function", "relu", None, 4.0, 0.0, -4.0, 0.0, 1, 0, 1, 0, *NO_NOISE),  # before only
            ("function", None, None, 1.0, 3.0, 2.0, 3.0, 1, 2, 0, 0, *NO_NOISE),  # no functional call: 1 -> 1+2
            ("kernel", "linear", "gemm", 30.0, 12.0, -18.0, 0.4, 2, 1, 2, 1, *NO_NOISE),
            ("kernel", "gelu", "gelu_k", 0.0, 6.0, 6.0, NAN, 0, 1, 0, 1, *NO_NOISE),
            ("kernel", "relu", "relu_k", 4.0, 0.0, -4.0, 0.0, 1, 0, 1, 0, *NO_NOISE),
            ("kernel", None, "memset", 0.0, 2.0, 2.0, NAN, 0, 1, 0, 0, *NO_NOISE),
            ("kernel", "linear", "bias", 5.0, 5.0, 0.0, 1.0, 1, 1, 1, 1, *NO_NOISE),  # equal change: larger time first
            ("kernel", None, "copy", 1.0, 1.0, 0.0, 1.0, 1, 1, 0, 0, *NO_NOISE),
        ],
        columns=COMPARE_COLUMNS,
    )
    floats = ("before_us", "after_us", "delta_us", "ratio", "step_delta_us", "step_delta_low_us", "step_delta_high_us")
    expected = expected.astype(dict.fromkeys(floats, float) | {"outside_noise": "boolean"})
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


def _stepped(per_step: list[dict[str, float]]) -> ProfileResult:
    """A result of recorded steps: step ``k`` runs ``per_step[k]``'s kernels (name -> us) inside ``linear``."""
    rows = [(kernel, us) for step in per_step for kernel, us in step.items()]
    activity = activity_table(
        kernel=[kernel for kernel, _ in rows], kernel_us=[us for _, us in rows], function_name=["linear"] * len(rows)
    )
    bounds, at = [0], 0  # row i starts at 1000 i (activity_table): each step's rows end a step
    for step in per_step:
        at += 1000 * len(step)
        bounds.append(at)
    empty = pa.table({})
    metadata = {"step_bounds_ns": ",".join(map(str, bounds)), "first_step": "3"}
    return ProfileResult(activity, empty, empty, empty, empty, {}, "synthetic", metadata=metadata)


def test_a_change_is_marked_only_outside_the_step_to_step_noise():
    rng = np.random.default_rng(1)
    before = _stepped([{"gemm": 10 + rng.normal(0, 1), "bias": 5 + rng.normal(0, 1)} for _ in range(8)])
    after = _stepped([{"gemm": 20 + rng.normal(0, 1), "bias": 5 + rng.normal(0, 1)} for _ in range(8)])
    table = compare(before, after).set_index(["level", "kernel"])
    gemm, bias = table.loc[("kernel", "gemm")], table.loc[("kernel", "bias")]
    assert bool(gemm["outside_noise"]) and 8 < gemm["step_delta_low_us"] < gemm["step_delta_us"] < 12
    assert gemm["step_delta_us"] < gemm["step_delta_high_us"] < 12
    assert not bool(bias["outside_noise"]) and bias["step_delta_low_us"] < 0 < bias["step_delta_high_us"]
    # the mean change per step is exact; the interval is seeded, so a comparison repeats
    per_step = lambda result, name: [r["kernel_us"] for r in result.activity.to_pylist() if r["kernel"] == name]  # noqa: E731
    assert gemm["step_delta_us"] == pytest.approx(np.mean(per_step(after, "gemm")) - np.mean(per_step(before, "gemm")))
    pd.testing.assert_frame_equal(compare(before, after), compare(before, after))


def test_with_one_step_a_side_there_is_no_noise_estimate_and_the_cli_says_so():
    from aitune_dispatch.reports.text import comparison_text

    table = compare(_result(BEFORE), _result(AFTER))
    assert table["step_delta_us"].isna().all() and table["outside_noise"].isna().all()
    assert "no noise estimate" in comparison_text(table, "function")
    stepped = compare(_stepped([{"gemm": 10.0}, {"gemm": 11.0}]), _stepped([{"gemm": 20.0}, {"gemm": 21.0}]))
    text = comparison_text(stepped, "kernel", width=120)
    assert "per step, 95%" in text and "+10.0 [+9.0, +11.0] *" in text and "no noise estimate" not in text


def test_the_steps_view_gives_each_kernels_spread_over_steps():
    result = _stepped([{"gemm": 10.0, "bias": 1.0}, {"gemm": 14.0}, {"gemm": 12.0, "bias": 3.0}])
    table = result.steps().set_index("kernel")
    gemm = table.loc["gemm", ["steps", "median_us", "min_us", "max_us", "total_us"]]
    assert gemm.tolist() == [3, 12.0, 10.0, 14.0, 36.0]
    assert table.loc["gemm", "spread_pct"] == pytest.approx(100 * 4 / 12)
    # a step that did not run bias counts 0 us there
    assert table.loc["bias", ["steps", "median_us", "min_us", "max_us"]].tolist() == [2, 1.0, 0.0, 3.0]
    assert list(table.index) == ["gemm", "bias"]  # most total time first
    from aitune_dispatch.results.views import row_steps

    assert row_steps(result).tolist() == [3, 3, 4, 5, 5]  # numbered from the schedule's first recorded step
