"""Where each kernel name's time came from: the functional call and the module pattern that spent most of it.

``kernel_rollup`` says which kernels cost most; a reader's next question is who launched them. A kernel
that several calls or layers launch has one leader per question, picked by the time summed over all its
launches from that call (or pattern), not by a count of rows, so the answer is the place to look first.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...schema import ORIGIN_COLUMNS
from .accounting import ResultTables
from .frames import STRING_DTYPE
from .kernel_names import short_names
from .kernels import kernel_table

__all__ = ["ORIGIN_COLUMNS", "kernel_origins"]


def kernel_origins(result: ResultTables) -> pd.DataFrame:
    """Per kernel name, the functional call and the module pattern that spent most of its time.

    Parameters
    ----------
    result:
        A finished (or loaded) result.

    Returns
    -------
    pandas.DataFrame
        ``ORIGIN_COLUMNS``, one row per (kernel, kind), largest total time first (``kernel_rollup``'s
        order): ``top_function`` the functional call whose launches of the kernel add up to the most
        time (missing where that is the time outside any functional call), ``top_function_us`` that
        time, ``functions`` how many calls (the missing one included) launched the kernel; likewise
        ``top_module`` (a layer pattern such as ``blocks.*.fc1``; missing outside the module
        hierarchy), ``top_module_us`` and ``patterns``; the kernel's ``short_name`` last. Ties go by name.
        Empty where nothing ran.
    """
    table = kernel_table(result)
    if table.empty:
        return _empty()
    table = table.assign(kernel=table["kernel"].fillna(""), kind=table["kind"].fillna(""))
    totals = table.groupby(["kernel", "kind"], sort=False)["total_us"].sum().rename("total").reset_index()
    frame = totals.merge(_leader(table, "function_name"), on=["kernel", "kind"])
    frame = frame.merge(_leader(table, "module"), on=["kernel", "kind"])
    frame = frame.sort_values(["total", "kernel"], ascending=[False, True], kind="stable").reset_index(drop=True)
    frame = frame.rename(
        columns={
            "function_name": "top_function",
            "function_name_us": "top_function_us",
            "function_name_count": "functions",
            "module": "top_module",
            "module_us": "top_module_us",
            "module_count": "patterns",
        }
    )
    frame["short_name"] = short_names(frame["kernel"])
    for column in ("kernel", "kind", "top_function", "top_module", "short_name"):
        frame[column] = frame[column].astype(STRING_DTYPE)
    for column in ("functions", "patterns"):
        frame[column] = frame[column].astype(np.int64)
    return frame[ORIGIN_COLUMNS]


def _leader(table: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (kernel, kind): the ``column`` value with the most summed time, that time, and how many values."""
    sums = table.groupby(["kernel", "kind", column], dropna=False, sort=False)["total_us"].sum().reset_index()
    counts = sums.groupby(["kernel", "kind"], sort=False)[column].size().rename(f"{column}_count")
    sums["_name"] = sums[column].astype(object).where(sums[column].notna(), "\uffff")  # missing sorts last on a tie
    ranked = sums.sort_values(["kernel", "kind", "total_us", "_name"], ascending=[True, True, False, True])
    first = ranked.drop_duplicates(["kernel", "kind"], keep="first")
    first = first.rename(columns={"total_us": f"{column}_us"}).drop(columns="_name")
    return first.merge(counts.reset_index(), on=["kernel", "kind"])


def _empty() -> pd.DataFrame:
    dtypes = {c: STRING_DTYPE for c in ("kernel", "kind", "top_function", "top_module", "short_name")}
    dtypes |= {"functions": np.int64, "patterns": np.int64}
    dtypes.update({"top_function_us": np.float64, "top_module_us": np.float64})
    return pd.DataFrame({c: pd.Series([], dtype=dtypes.get(c, object)) for c in ORIGIN_COLUMNS})
