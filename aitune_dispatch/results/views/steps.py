"""Steps of a recording (``recording(...).step()``): which step each activity row belongs to, and each
kernel's, call's or module's time per step with its median, minimum, maximum and spread.

A row belongs to the step during which the host began the op that launched it (an op's start, on the
host clock that the step bounds use), not to when the device ran it: a kernel queued in step 3 that
runs after ``step()`` returned is step 3's. A row no op claimed falls back to its own start. Results
with no step bounds (``profile()``, a recording without ``step()``) are one step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.compute as pc

from ... import encoded, schema
from .accounting import ResultTables
from .frames import with_strings

STEP_COLUMNS = ["steps", "launches_per_step", "median_us", "min_us", "max_us", "spread_pct", "total_us"]
STEP_KEYS = ("kernel", "function_name", "module_name", "op")


def step_bounds(result: ResultTables) -> np.ndarray:
    """The host-clock bounds of the recorded steps.

    Parameters
    ----------
    result:
        A finished result.

    Returns
    -------
    numpy.ndarray
        ``len(steps) + 1`` int64 values (``perf_counter_ns``), or none where the result has no steps.
    """
    text = result.metadata.get(schema.META_STEP_BOUNDS, "")
    return np.array([int(v) for v in text.split(",") if v], dtype=np.int64)


def step_count(result: ResultTables) -> int:
    """How many recorded steps ``result`` has (1 without step bounds)."""
    return max(len(step_bounds(result)) - 1, 1)


def first_step(result: ResultTables) -> int:
    """The number of the first recorded step (a schedule's ``wait + warmup``), 0 without steps."""
    return int(result.metadata.get(schema.META_FIRST_STEP, "0") or 0)


def row_steps(result: ResultTables) -> np.ndarray:
    """The step number of every activity row.

    Parameters
    ----------
    result:
        A finished result.

    Returns
    -------
    numpy.ndarray
        One int64 per activity row: its step (numbered from the recording's first step, the schedule's
        ``wait + warmup``), -1 for a row outside every step (after the last ``step()``); all the first
        step where the result has no step bounds.
    """
    rows = result.activity.num_rows
    bounds = step_bounds(result)
    if len(bounds) < 2:
        return np.full(rows, first_step(result), dtype=np.int64)
    start = np.asarray(result.activity["start_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
    op_ids = result.activity["op_id"]
    if result.ops.num_rows and op_ids.null_count < rows:
        ids = np.asarray(result.ops["op_id"].to_numpy(zero_copy_only=False), dtype=np.int64)
        begun = np.asarray(result.ops["start_ns"].to_numpy(zero_copy_only=False), dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        wanted = np.asarray(pc.fill_null(op_ids, -1).to_numpy(zero_copy_only=False), dtype=np.int64)
        at = np.clip(np.searchsorted(ids[order], wanted), 0, len(ids) - 1)
        found = (wanted >= 0) & (ids[order][at] == wanted)
        start = np.where(found, begun[order][at], start)
    index = np.searchsorted(bounds, start, side="right") - 1
    inside = (index >= 0) & (index < len(bounds) - 1)
    return np.where(inside, index + first_step(result), -1)


def step_table(result: ResultTables, by: str = "kernel") -> pd.DataFrame:
    """Per ``by`` value (a kernel name, ``function_name``, ``module_name`` or ``op``), its time over the
    recorded steps: how many steps ran it, its activity rows per step (median; kernel launches,
    copies, sets or CPU ops), the median, minimum and maximum of its per-step time (a step that did
    not run it counts 0 us), the spread ``(max - min) / median`` in percent, and its total; most total
    time first.

    Parameters
    ----------
    result:
        A finished result; ``profile()``'s and a recording's without ``step()`` have one step.
    by:
        One of ``"kernel"``, ``"function_name"``, ``"module_name"``, ``"op"``.

    Returns
    -------
    pandas.DataFrame
        ``by`` then ``STEP_COLUMNS``; rows outside every step are left out.
    """
    if by not in STEP_KEYS:
        raise ValueError(f"by must be one of {', '.join(map(repr, STEP_KEYS))}; got {by!r}")
    steps = row_steps(result)
    frame = pd.DataFrame(
        {
            by: encoded.decoded(result.activity.select([by])).column(0).to_pylist(),
            "step": steps,
            "kernel_us": result.activity["kernel_us"].to_numpy(zero_copy_only=False),
        }
    )
    frame = frame[frame["step"] >= 0]
    if frame.empty:
        return with_strings(pd.DataFrame(columns=[by, *STEP_COLUMNS]), [by])
    count, first = step_count(result), first_step(result)
    per_step = frame.groupby([by, "step"], dropna=False)["kernel_us"].agg(["sum", "size"]).reset_index()
    rows = []
    for key, group in per_step.groupby(by, dropna=False, sort=False):
        times = np.zeros(count)
        launches = np.zeros(count)
        where = (group["step"].to_numpy() - first).clip(0, count - 1)
        times[where] = group["sum"].to_numpy()
        launches[where] = group["size"].to_numpy()
        median = float(np.median(times))
        spread = (times.max() - times.min()) / median * 100.0 if median > 0 else float("nan")
        rows.append(
            (key, int((launches > 0).sum()), float(np.median(launches)), median, float(times.min()),
             float(times.max()), spread, float(times.sum()))
        )  # fmt: skip
    table = pd.DataFrame(rows, columns=[by, *STEP_COLUMNS]).sort_values("total_us", ascending=False, kind="stable")
    return with_strings(table.reset_index(drop=True), [by])
