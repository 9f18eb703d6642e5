"""``compare(a, b)``: kernel time per functional call and per kernel, before (a) and after (b), over
every activity row (those outside any call under ``function_name = None``), so each level sums to
the results' ``total_us`` and two saved results compare anywhere without torch.

The noise estimate: where both results have recorded steps (two or more each), each row's per-step
times on either side are resampled with replacement (a percentile bootstrap, :data:`RESAMPLES`
times, seeded so that a comparison is reproducible) and the 2.5th and 97.5th percentiles of the
difference of the means are its 95% interval; a change is ``outside_noise`` where that interval
leaves out 0. A step that did not run the kernel counts 0 us there. With fewer steps there is no
noise estimate: the columns are NaN and ``outside_noise`` None."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import encoded
from ...schema import COMPARE_COLUMNS
from .accounting import ResultTables, is_result
from .frames import empty_frame, with_strings
from .steps import first_step, row_steps, step_count

RESAMPLES = 2000  # bootstrap resamples per row
CONFIDENCE = 0.95

_NO_FUNCTION = "\x00no functional call"  # stands in for None while grouping and merging
_STRINGS = ("level", "function_name", "kernel")


def _activity(result: ResultTables, name: str) -> pd.DataFrame:
    if not is_result(result):
        raise TypeError(f"compare() needs two ProfileResults; {name} is a {type(result).__name__}")
    frame = encoded.decoded(result.activity.select(["function_name", "kernel", "kernel_us", "call_id"])).to_pandas()
    frame["function_name"] = frame["function_name"].astype(object).fillna(_NO_FUNCTION)
    frame["step"] = row_steps(result) - first_step(result)
    return frame


def _per_step(activity: pd.DataFrame, keys: list[str], steps: int) -> pd.DataFrame:
    """Each key's time in each step (columns 0 .. steps-1), 0 where a step did not run it."""
    inside = activity[(activity["step"] >= 0) & (activity["step"] < steps)]
    table = inside.groupby([*keys, "step"], sort=False)["kernel_us"].sum().unstack("step", fill_value=0.0)
    return table.reindex(columns=range(steps), fill_value=0.0).astype(float)


def _intervals(before: pd.DataFrame, after: pd.DataFrame, keys: list[str], steps: tuple[int, int]) -> pd.DataFrame:
    """``step_delta_us`` and its bootstrap interval per key (``_level``'s index), from both sides' steps."""
    a, b = _per_step(before, keys, steps[0]), _per_step(after, keys, steps[1])
    index = a.index.union(b.index)
    a = a.reindex(index, fill_value=0.0).to_numpy()
    b = b.reindex(index, fill_value=0.0).to_numpy()
    rng = np.random.default_rng(0)
    picks_a = rng.integers(0, steps[0], size=(RESAMPLES, steps[0]))
    picks_b = rng.integers(0, steps[1], size=(RESAMPLES, steps[1]))
    deltas = b[:, picks_b].mean(axis=2) - a[:, picks_a].mean(axis=2)  # keys x resamples
    tail = (1.0 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(deltas, [tail, 100 - tail], axis=1)
    frame = pd.DataFrame(
        {"step_delta_us": b.mean(axis=1) - a.mean(axis=1), "step_delta_low_us": low, "step_delta_high_us": high},
        index=index,
    )
    frame["outside_noise"] = (frame["step_delta_low_us"] > 0) | (frame["step_delta_high_us"] < 0)
    return frame


def _totals(activity: pd.DataFrame, keys: list[str], side: str) -> pd.DataFrame:
    grouped = activity.groupby(keys, sort=False)["kernel_us"]
    in_calls = activity[activity["call_id"] >= 0].drop_duplicates([*keys, "call_id"])
    calls = in_calls.groupby(keys, sort=False).size()
    totals = {f"{side}_us": grouped.sum().astype(float), f"{side}_kernels": grouped.size()}
    return pd.DataFrame(totals).join(calls.rename(f"{side}_calls"))


def _level(
    before: pd.DataFrame, after: pd.DataFrame, keys: list[str], level: str, steps: tuple[int, int]
) -> pd.DataFrame:
    rows = _totals(before, keys, "before").join(_totals(after, keys, "after"), how="outer")
    if min(steps) >= 2:
        rows = rows.join(_intervals(before, after, keys, steps))
        rows["outside_noise"] = rows["outside_noise"].astype("boolean")
    else:
        for column in ("step_delta_us", "step_delta_low_us", "step_delta_high_us"):
            rows[column] = np.nan
        rows["outside_noise"] = pd.array([pd.NA] * len(rows), dtype="boolean")
    rows = rows.reset_index()
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
    return empty_frame(COMPARE_COLUMNS, {**counts, "outside_noise": "boolean"}, _STRINGS)


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
        functional calls they ran in (each call once per row it launched into). ``step_delta_us`` and
        its interval, and ``outside_noise``, where both results have recorded steps (module docstring).

    Raises
    ------
    TypeError
        ``a`` or ``b`` is not a ProfileResult.
    """
    before, after = _activity(a, "a"), _activity(b, "b")
    if before.empty and after.empty:
        return empty_comparison()
    steps = (step_count(a), step_count(b))
    levels = [_level(before, after, ["function_name"], "function", steps)]
    levels.append(_level(before, after, ["function_name", "kernel"], "kernel", steps))
    table = pd.concat(levels, ignore_index=True)
    names = [None if name == _NO_FUNCTION else name for name in table["function_name"]]
    table["function_name"] = pd.Series(names, index=table.index, dtype=object)
    return with_strings(table, _STRINGS)
