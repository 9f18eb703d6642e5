"""Which functional call and module pattern spent most of each kernel's time (``views.origins``)."""

from __future__ import annotations

import dataclasses

import pandas as pd
from fixture_results import synthetic_result

from aitune_dispatch.results import views
from aitune_dispatch.results.views.origins import ORIGIN_COLUMNS, kernel_origins


def _sums(table: pd.DataFrame, column: str) -> dict[str, dict[object, float]]:
    """Per kernel, the time of each value of ``column`` (None for missing), by hand."""
    sums: dict[str, dict[object, float]] = {}
    for row in table.itertuples():
        key = getattr(row, column)
        key = None if key is None or key != key else key
        per_kernel = sums.setdefault(row.kernel, {})
        per_kernel[key] = per_kernel.get(key, 0.0) + row.total_us
    return sums


def _plain(name: object) -> object:
    return name if isinstance(name, str) else None  # missing: NaN in the one string dtype


def test_each_kernel_names_the_call_and_pattern_with_the_most_time(h200_result):
    origins = kernel_origins(h200_result)
    rollup = views.kernel_rollup(h200_result)
    assert list(origins.columns) == ORIGIN_COLUMNS
    assert list(origins["kernel"]) == list(rollup["kernel"])  # one row per kernel name, the roll-up's order
    table = views.kernel_table(h200_result)
    functions, modules = _sums(table, "function_name"), _sums(table, "module")
    for row in origins.itertuples():
        assert row.top_function_us == max(functions[row.kernel].values())
        assert functions[row.kernel][_plain(row.top_function)] == row.top_function_us
        assert row.functions == len(functions[row.kernel])
        assert row.top_module_us == max(modules[row.kernel].values())
        assert modules[row.kernel][_plain(row.top_module)] == row.top_module_us
        assert row.patterns == len(modules[row.kernel])
    # a kernel several layers launch names the one with most time, not the first or the most frequent
    split = origins[origins["patterns"] > 1]
    totals = rollup.set_index("kernel").loc[split["kernel"], "total_us"].to_numpy()
    assert len(split) and (split["top_module_us"].to_numpy() < totals).all()


def test_time_outside_any_call_is_named_as_missing(h200_result):
    origins = kernel_origins(h200_result)
    outside = origins[origins["top_function"].isna()]
    assert len(outside)  # the demo's residual adds (aten::add) run outside functional calls
    table = views.kernel_table(h200_result)
    for row in outside.itertuples():
        launched = table[table["kernel"] == row.kernel]
        assert launched[launched["function_name"].isna()]["total_us"].sum() == row.top_function_us


def test_synthetic_result_and_empty_result():
    result = synthetic_result()
    origins = kernel_origins(result).set_index("kernel")
    assert origins.loc["gemm", "top_function"] == "linear" and origins.loc["gemm", "top_module"] == "fc"
    assert pd.isna(origins.loc["Memcpy HtoD", "top_function"])  # aten::copy_ in the root, no functional call
    empty = dataclasses.replace(result, activity=result.activity.slice(0, 0))
    frame = kernel_origins(empty)
    assert frame.empty and list(frame.columns) == ORIGIN_COLUMNS
