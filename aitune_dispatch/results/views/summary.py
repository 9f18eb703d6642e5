"""The spec's two frames, ``profiling_df`` and ``describe_results``, with no torch: sample tensors are
read by ``numel()`` and ``element_size()``, which tensors and saved TensorMeta both have, so a loaded
result is summarised anywhere."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ...schema import PROFILING_COLUMNS, SUMMARY_COLUMNS
from ..values import iter_tensor_likes
from .accounting import attributed
from .frames import STRING_DTYPE, string_array
from .top import check_top, first_rows

BYTES_PER_MB = 1024 * 1024


def _object_column(values: Sequence[Any], index: np.ndarray) -> np.ndarray:
    table = np.empty(len(values), dtype=object)
    for pos, value in enumerate(values):  # element-wise: containers such as nn.Sequential stay whole
        table[pos] = value
    return table[index] if len(index) else np.empty(0, dtype=object)


def profiling_frame(activity: pa.Table, module_objects: Sequence[Any]) -> pd.DataFrame:
    """The spec's ``profiling_df``: one row per attributed kernel, the reference's columns.

    Parameters
    ----------
    activity:
        A result's joined activity (schema ``ACTIVITY``).
    module_objects:
        The module of each ``module_id`` (None for each module of a loaded result).

    Returns
    -------
    pandas.DataFrame
        ``PROFILING_COLUMNS``, plain string columns, ``module`` the module object.
    """
    needed = ["module_name", "module_id", "call_id", "function_name", "op", "kernel", "kernel_us"]
    rows = attributed(activity.select(needed))  # only the columns the frame is built from
    module_ids = rows["module_id"].to_numpy().astype(np.int64, copy=False)
    return pd.DataFrame(
        {
            "module_name": string_array(rows["module_name"]),
            "module": _object_column(module_objects, module_ids),
            "function_name": string_array(rows["function_name"]),
            "op": string_array(rows["op"]),
            "kernel": string_array(rows["kernel"]),
            "kernel_us": rows["kernel_us"].to_numpy().astype(np.float64, copy=False),
        },
        columns=PROFILING_COLUMNS,
    )


def logical_bytes(sample: Any) -> int:
    """numel x element size of every tensor in ``sample``: what a view shows, not its storage."""
    return sum(int(t.numel()) * int(t.element_size()) for t in iter_tensor_likes(sample))


def empty_summary() -> pd.DataFrame:
    """The summary's columns and dtypes with no rows."""
    return pd.DataFrame(
        {
            "function_name": pd.Series([], dtype=STRING_DTYPE),
            "calls": pd.Series([], dtype=float),
            "num_distinct_samples": pd.Series([], dtype=float),
            "num_modules": pd.Series([], dtype=np.int64),
            "time_spent_us": pd.Series([], dtype=float),
            "time_spent_pct": pd.Series([], dtype=float),
            "tensor_size_MB": pd.Series([], dtype=float),
        },
        columns=SUMMARY_COLUMNS,
    )


def _sample_stats(entries: Sequence[tuple[int, Any]] | None) -> tuple[float, float, float]:
    if entries is None:
        return math.nan, math.nan, math.nan
    calls = float(sum(count for count, _ in entries))
    size_mb = sum(logical_bytes(sample) for _, sample in entries) / BYTES_PER_MB
    return calls, float(len(entries)), size_mb


def _int_if_complete(series: pd.Series) -> pd.Series:
    return series.astype(np.int64) if len(series) and not series.isna().any() else series


_CALL = "describe_results(profiling_df, function_data)"
_NEEDED_COLUMNS = ("function_name", "kernel_us", "module_name")


def _check_arguments(profiling_df: Any, function_data: Any) -> None:
    """TypeError / ValueError naming the argument that is not what ``profile()`` returns, and what to pass."""
    if not isinstance(profiling_df, pd.DataFrame):
        got = type(profiling_df).__name__
        if isinstance(profiling_df, Mapping) and isinstance(function_data, pd.DataFrame):
            hint = " — were the arguments swapped?"
        elif callable(getattr(profiling_df, "profiling_df", None)):
            hint = ": pass result.profiling_df(), result.function_data, or call result.describe()"
        else:
            hint = ""
        raise TypeError(
            f"{_CALL}: profiling_df must be a pandas DataFrame (the first value profile() returns); got {got}{hint}"
        )
    if not isinstance(function_data, Mapping):
        raise TypeError(
            f"{_CALL}: function_data must be the dict profile() returns second (function name -> "
            f"[(count, (args, kwargs)), ...]; {{}} for none); got {type(function_data).__name__}"
        )
    missing = sorted(set(_NEEDED_COLUMNS) - set(profiling_df.columns))
    if missing and not profiling_df.empty:
        raise ValueError(
            f"{_CALL}: profiling_df has no column(s) {missing}; pass the DataFrame profile() returns "
            f"(columns {list(PROFILING_COLUMNS)})"
        )


def describe_results(
    profiling_df: pd.DataFrame, function_data: Mapping[str, Sequence[tuple[int, Any]]], top_k: int | None = 10
) -> pd.DataFrame:
    """The spec's summary: kernel time grouped by functional call, most expensive first.

    Parameters
    ----------
    profiling_df:
        ``profile()``'s first output (columns ``module_name, module, function_name, op, kernel, kernel_us``).
    function_data:
        ``profile()``'s second output: ``function_name -> [(count, sample), ...]``.
    top_k:
        The most rows returned (a positive integer); None returns every function.

    Returns
    -------
    pandas.DataFrame
        ``SUMMARY_COLUMNS``; the share is over all attributed kernel time, not only the top_k;
        ``calls`` and ``num_distinct_samples`` are NaN where samples were not collected.

    Raises
    ------
    TypeError, ValueError
        An argument that is not what ``profile()`` returns, or a ``top_k`` that is neither None nor a
        positive integer.
    """
    _check_arguments(profiling_df, function_data)
    top_k = check_top(top_k, "top_k")
    if profiling_df.empty:
        return empty_summary()
    groups = profiling_df.groupby("function_name", sort=False)
    summary = pd.DataFrame(
        {
            "time_spent_us": groups["kernel_us"].sum().astype(float),
            "num_modules": groups["module_name"].nunique().astype(np.int64),
        }
    )
    total = float(summary["time_spent_us"].sum())
    summary["time_spent_pct"] = summary["time_spent_us"] / total * 100.0 if total > 0 else 0.0
    stats = [_sample_stats(function_data.get(name)) for name in summary.index]
    summary["calls"], summary["num_distinct_samples"], summary["tensor_size_MB"] = (
        [s[0] for s in stats],
        [s[1] for s in stats],
        [s[2] for s in stats],
    )
    summary = summary.rename_axis("function_name").reset_index()
    summary["function_name"] = summary["function_name"].astype(STRING_DTYPE)
    summary = first_rows(summary.sort_values("time_spent_us", ascending=False, kind="stable"), top_k)
    summary["calls"] = _int_if_complete(summary["calls"])
    summary["num_distinct_samples"] = _int_if_complete(summary["num_distinct_samples"])
    return summary[SUMMARY_COLUMNS].reset_index(drop=True)
