"""Kernel time per (kernel, op, functional call, module pattern): the report's kernel table."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...schema import KERNEL_COLUMNS
from .accounting import ResultTables, total_us
from .frames import empty_frame, with_strings
from .kernel_names import short_names
from .modules import activity_frame, modules_frame, pattern_labels
from .top import check_top, first_rows

_STRINGS = ("kernel", "kind", "op", "function_name", "module", "short_name")


def kernel_table(result: ResultTables, top: int | None = None) -> pd.DataFrame:
    """Kernel time per (kernel, op, functional call, module pattern), largest first.

    Parameters
    ----------
    result:
        A finished (or loaded) result.
    top:
        Keep only the first ``top`` rows (a positive integer); None keeps all.

    Returns
    -------
    pandas.DataFrame
        ``KERNEL_COLUMNS``, one row per (kernel, op, functional call, layer pattern), attributed
        or not; ``short_name`` is the kernel's short name (``kernel_names.short_name``).

    Raises
    ------
    ValueError
        ``top`` is neither None nor a positive integer.
    """
    top = check_top(top)
    frame = activity_frame(result)
    total = total_us(result.activity)
    if frame.empty:
        return empty_frame(KERNEL_COLUMNS, {"modules": np.int64, "calls": np.int64}, _STRINGS)
    modules = modules_frame(result)
    patterns = pattern_labels(modules)
    frame["module"] = frame["module_id"].map(patterns).astype(object)
    frame["module"] = frame["module"].where(frame["module"].notna(), None)
    keys = ["kernel", "kind", "op", "function_name", "module"]
    frame["module_id"] = frame["module_id"].where(frame["module_id"] >= 0)  # outside the hierarchy: no module
    grouped = frame.groupby(keys, dropna=False, sort=False).agg(
        calls=("kernel_us", "size"), total_us=("kernel_us", "sum"), modules=("module_id", "nunique")
    )
    table = grouped.reset_index()
    table["short_name"] = short_names(table["kernel"])
    table = with_strings(table, _STRINGS)
    table["mean_us"] = table["total_us"] / table["calls"]
    table["share"] = table["total_us"] / total if total > 0 else 0.0
    table = table.sort_values(["total_us", "kernel"], ascending=[False, True], kind="stable")
    table = table[KERNEL_COLUMNS].reset_index(drop=True)
    return first_rows(table, top)


