"""``compare(a, b)``: kernel time per functional call and per kernel, before (a) and after (b), over
every activity row (those outside any call under ``function_name = None``), so each level sums to
the results' ``total_us`` and two saved results compare anywhere without torch."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import encoded
from ...schema import COMPARE_COLUMNS
from .accounting import ResultTables, is_result
from .frames import empty_frame, with_strings

_NO_FUNCTION = "\x00no functional call"  # stands in for None while grouping and merging
_STRINGS = ("level", "function_name", "kernel")


def _activity(result: ResultTables, name: str) -> pd.DataFrame:
    if not is_result(result):
        raise TypeError(f"compare() needs two ProfileResults; {name} is a {type(result).__name__}")
    frame = encoded.decoded(result.activity.select(["function_name", "kernel", "kernel_us", "call_id"])).to_pandas()
    frame["function_name"] = frame["function_name"].astype(object).fillna(_NO_FUNCTION)
    return frame


def _totals(activity: pd.DataFrame, keys: list[str], side: str) -> pd.DataFrame:
    grouped = activity.groupby(keys, sort=False)["kernel_us"]
    in_calls = activity[activity["call_id"] >= 0].drop_duplicates([*keys, "call_id"])
    calls = in_calls.groupby(keys, sort=False).size()
    totals = {f"{side}_us": grouped.sum().astype(float), f"{side}_kernels": grouped.size()}
    return pd.DataFrame(totals).join(calls.rename(f"{side}_calls"))


def _level(before: pd.DataFrame, after: pd.DataFrame, keys: list[str], level: str) -> pd.DataFrame:
    rows = _totals(before, keys, "before").join(_totals(after, keys, "after"), how="outer").reset_index()
    for side in ("before", "after"):
        rows[f"{side}_us"] = rows[f"{side}_us"].fillna(0.0).astype(float)
        for counted in ("kernels", "calls"):
            rows[f"{side}_{counted}"] = rows[f"{side}_{counted}"].fillna(0).astype(np.int64)
    rows["delta_us"] = rows["after_us"] - rows["before_us"]
    rows["ratio"] = rows["after_us"] / rows["before_us"].where(rows["before_us"] > 0)
    rows["level"] = level
    if "kernel" not in rows:
        rows["kernel"] = None
    rows["_change"] = -rows["delta_us"].abs()
    rows["_size"] = -rows[["before_us", "after_us"]].max(axis=1)
    rows = rows.sort_values(["_change", "_size", "function_name", "kernel"], kind="stable")
    return rows[COMPARE_COLUMNS]


def empty_comparison() -> pd.DataFrame:
    """The comparison's columns and dtypes with no rows."""
    counts = {f"{side}_{counted}": np.int64 for side in ("before", "after") for counted in ("kernels", "calls")}
    return empty_frame(COMPARE_COLUMNS, counts, _STRINGS)


def compare(a: ResultTables, b: ResultTables) -> pd.DataFrame:
    """Per-function, then per-(function, kernel) kernel time before (a) and after (b), largest change first.

    Parameters
    ----------
    a:
        The result before the change.
    b:
        The result after it.

    Returns
    -------
    pandas.DataFrame
        ``schema.COMPARE_COLUMNS``, ``function`` rows then ``kernel`` rows; what one side lacks has
        0 time and counts there. ``*_kernels`` counts activity rows (launches), ``*_calls`` the
        functional calls they ran in (each call once per row it launched into).

    Raises
    ------
    TypeError
        ``a`` or ``b`` is not a ProfileResult.
    """
    before, after = _activity(a, "a"), _activity(b, "b")
    if before.empty and after.empty:
        return empty_comparison()
    levels = [_level(before, after, ["function_name"], "function")]
    levels.append(_level(before, after, ["function_name", "kernel"], "kernel"))
    table = pd.concat(levels, ignore_index=True)
    names = [None if name == _NO_FUNCTION else name for name in table["function_name"]]
    table["function_name"] = pd.Series(names, index=table.index, dtype=object)
    return with_strings(table, _STRINGS)
