"""Kernel time per kernel name, whatever launched it: the first table a profiler user reads.

``kernel_table`` splits a kernel over every (op, call, module pattern) that launched it, so a kernel
that many layers launch can rank below one launched from a single place; the roll-up adds them up
first, as ``torch.profiler``'s ``key_averages()`` and HTA's kernel breakdown do.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ... import encoded
from ...schema import ROLLUP_COLUMNS
from .accounting import ResultTables, total_us
from .frames import STRING_DTYPE
from .kernel_names import short_names
from .top import check_top, first_rows

__all__ = ["ROLLUP_COLUMNS", "kernel_rollup"]


def kernel_rollup(result: ResultTables, top: int | None = None) -> pd.DataFrame:
    """Every launch of each kernel name added up, largest total first.

    Parameters
    ----------
    result:
        A finished (or loaded) result.
    top:
        Keep only the first ``top`` rows (a positive integer); None keeps all.

    Returns
    -------
    pandas.DataFrame
        ``ROLLUP_COLUMNS``: the kernel's name and kind (``kernel``, ``memcpy``, ``memset``,
        ``cpu_op``), its launches (``count``, int64), their total, mean, shortest and longest time in µs,
        ``share`` of all activity time of the run (0..1), and the kernel's ``short_name``
        (``kernel_names.short_name``: ``vectorized_elementwise_kernel``). Ties on the total go by name.

    Raises
    ------
    ValueError
        ``top`` is neither None nor a positive integer.
    """
    top = check_top(top)
    activity = result.activity
    if activity.num_rows == 0:
        return _empty()
    names = encoded.objects(activity["kernel"])
    kinds = encoded.objects(activity["kind"])
    times = np.asarray(activity["kernel_us"].to_numpy(zero_copy_only=False), np.float64)
    frame = pd.DataFrame({"kernel": names, "kind": kinds, "us": times})
    frame["kernel"] = frame["kernel"].fillna("")
    frame["kind"] = frame["kind"].fillna("")
    grouped = frame.groupby(["kernel", "kind"], sort=False)["us"].agg(["size", "sum", "mean", "min", "max"])
    table = grouped.reset_index()
    table.columns = ["kernel", "kind", "count", "total_us", "mean_us", "min_us", "max_us"]
    total = total_us(activity)
    table["share"] = table["total_us"] / total if total > 0 else 0.0
    table = table.sort_values(["total_us", "kernel"], ascending=[False, True], kind="stable").reset_index(drop=True)
    table["count"] = table["count"].astype(np.int64)
    table["short_name"] = short_names(table["kernel"])
    for column in ("kernel", "kind", "short_name"):
        table[column] = table[column].astype(STRING_DTYPE)
    table = table[ROLLUP_COLUMNS]
    return first_rows(table, top)


def _empty() -> pd.DataFrame:
    kinds = {"kernel": STRING_DTYPE, "kind": STRING_DTYPE, "count": np.int64, "short_name": STRING_DTYPE}
    return pd.DataFrame({c: pd.Series([], dtype=kinds.get(c, np.float64)) for c in ROLLUP_COLUMNS})
