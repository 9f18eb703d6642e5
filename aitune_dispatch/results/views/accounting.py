"""Where the kernel time went: attributed or not, in total, per kind, and the headline, in pure
Arrow over any object with the result's tables, so every share is over all kernel time and a live
and a loaded result read the same (``docs/design.md``, "Layout")."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ... import schema
from .top import check_top

BAR_ROWS = 14
UNATTRIBUTED = "(not attributed)"


class ResultTables(Protocol):
    """What the views read of a result, read-only.

    Attributes
    ----------
    activity, ops, calls, modules, module_calls:
        The result's Arrow tables (``schema.ACTIVITY``, ``OPS``, ...).
    """

    @property
    def activity(self) -> pa.Table: ...
    @property
    def ops(self) -> pa.Table: ...
    @property
    def calls(self) -> pa.Table: ...
    @property
    def modules(self) -> pa.Table: ...
    @property
    def module_calls(self) -> pa.Table: ...
    @property
    def function_data(self) -> Mapping[str, Any]: ...
    @property
    def source(self) -> str: ...
    @property
    def metadata(self) -> Mapping[str, str]: ...


def is_result(value: Any) -> bool:
    """A ``ProfileResult``, read by its fields (the views and persist do not import the class)."""
    if isinstance(value, type) or not dataclasses.is_dataclass(value) or not hasattr(value, "function_data"):
        return False
    return all(isinstance(getattr(value, name, None), pa.Table) for name in schema.RESULT_TABLES)


def attributed_mask(activity: pa.Table) -> pa.ChunkedArray:
    """Rows the spec reports: a profiled module and a functional call both enclose the op.

    Parameters
    ----------
    activity:
        A joined activity table.

    Returns
    -------
    pyarrow.ChunkedArray
        One boolean per row: ``module_id >= 0`` and ``call_id >= 0``.
    """
    return pc.and_(pc.greater_equal(activity["module_id"], 0), pc.greater_equal(activity["call_id"], 0))


def attributed(activity: pa.Table) -> pa.Table:
    """The rows of ``activity`` that :func:`attributed_mask` keeps.

    Parameters
    ----------
    activity:
        A joined activity table.

    Returns
    -------
    pyarrow.Table
        The rows ``profiling_df`` reports.
    """
    return activity.filter(attributed_mask(activity))


def unattributed(activity: pa.Table) -> pa.Table:
    """The rows of ``activity`` that :func:`attributed_mask` leaves out.

    Parameters
    ----------
    activity:
        A joined activity table.

    Returns
    -------
    pyarrow.Table
        Its rows outside the hierarchy or outside any functional call.
    """
    return activity.filter(pc.invert(attributed_mask(activity)))


def total_us(activity: pa.Table) -> float:
    """Kernel time of every row of ``activity``.

    Parameters
    ----------
    activity:
        An activity table.

    Returns
    -------
    float
        The sum of ``kernel_us``, µs (0.0 when empty).
    """
    return float(pc.sum(activity["kernel_us"]).as_py() or 0.0)


def attributed_us(activity: pa.Table) -> float:
    """Kernel time of the attributed rows.

    Parameters
    ----------
    activity:
        A joined activity table.

    Returns
    -------
    float
        µs.
    """
    return total_us(attributed(activity))


def coverage(activity: pa.Table) -> float:
    """Attributed kernel time over all kernel time.

    Parameters
    ----------
    activity:
        A joined activity table.

    Returns
    -------
    float
        0 to 1; NaN when nothing ran.
    """
    total = total_us(activity)
    return attributed_us(activity) / total if total > 0 else math.nan


def activity_kinds(result: ResultTables) -> dict[str, int]:
    """Activity rows per kind (``schema.ACTIVITY_KINDS``), most first.

    Parameters
    ----------
    result:
        A result.

    Returns
    -------
    dict of str to int
        ``{"kernel": 78, "memset": 4}``; empty when nothing ran.
    """
    if result.activity.num_rows == 0:
        return {}
    counts = pc.value_counts(result.activity["kind"]).to_pylist()
    pairs = sorted(((c["values"], c["counts"]) for c in counts), key=lambda p: (-p[1], str(p[0])))
    return {str(kind): int(count) for kind, count in pairs}


def bar_rows(
    summary: pd.DataFrame, total: float, attributed_total: float, rows: int = BAR_ROWS
) -> list[dict[str, Any]]:
    """Kernel time per functional call, top ``rows`` first, then the unattributed time.

    Parameters
    ----------
    summary:
        ``describe()`` over every function.
    total, attributed_total:
        All kernel time and the attributed kernel time, microseconds.
    rows:
        The most functions listed.

    Returns
    -------
    list[dict]
        ``{name, us, pct, unattributed}`` per bar, ``pct`` over all kernel time; the last bar
        (``UNATTRIBUTED``) holds the rest.
    """
    bars = [
        {
            "name": str(row.function_name),
            "us": float(row.time_spent_us),
            "pct": 100.0 * float(row.time_spent_us) / total if total > 0 else 0.0,
            "unattributed": False,
        }
        for row in summary.head(rows).itertuples()
    ]
    rest = total - attributed_total
    if rest > 1e-9:
        bars.append({"name": UNATTRIBUTED, "us": rest, "pct": 100.0 * rest / total, "unattributed": True})
    return bars


@dataclass(frozen=True)
class Headline:
    """The run in a few numbers, shown first by a notebook cell or a summary line.

    Attributes
    ----------
    source, device:
        The activity source and ``metadata["device"]`` ("" if unknown).
    activity_rows, attributed_rows, kernels:
        Activity rows, those ``profiling_df()`` reports, and distinct kernel names.
    total_us, attributed_us, coverage:
        All kernel time, attributed kernel time (µs) and their ratio (NaN when nothing ran).
    top_functions:
        ``(function_name, kernel µs)`` of the most expensive functional calls, largest first.
    """

    source: str
    device: str
    activity_rows: int
    attributed_rows: int
    kernels: int
    total_us: float
    attributed_us: float
    coverage: float
    top_functions: tuple[tuple[str, float], ...]


def _top_functions(rows: pa.Table, top: int | None) -> tuple[tuple[str, float], ...]:
    if rows.num_rows == 0:
        return ()
    sums = rows.group_by("function_name").aggregate([("kernel_us", "sum")]).to_pydict()
    pairs = sorted(zip(sums["function_name"], sums["kernel_us_sum"]), key=lambda p: (-p[1], p[0]))
    return tuple((str(name), float(us)) for name, us in pairs[:top])


def headline(result: ResultTables, top: int | None = 3) -> Headline:
    """The headline numbers of ``result``.

    Parameters
    ----------
    result:
        A finished or loaded result.
    top:
        How many functional calls ``top_functions`` names (a positive integer); None: every one.

    Returns
    -------
    Headline

    Raises
    ------
    ValueError
        ``top`` is neither None nor a positive integer.
    """
    top = check_top(top)
    activity = result.activity
    kept = attributed(activity)
    total, kept_us = total_us(activity), total_us(kept)
    return Headline(
        source=result.source,
        device=str(result.metadata.get(schema.META_DEVICE, "")),
        activity_rows=activity.num_rows,
        attributed_rows=kept.num_rows,
        kernels=len(pc.unique(activity["kernel"])) if activity.num_rows else 0,
        total_us=total,
        attributed_us=kept_us,
        coverage=kept_us / total if total > 0 else math.nan,
        top_functions=_top_functions(kept, top),
    )
