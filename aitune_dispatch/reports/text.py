"""Plain-text tables for a terminal: the summary, the coverage line and a comparison.

Pure functions of a result (or of ``compare()``'s table) that return text, so the CLI only prints.
Times are in one human unit per column (µs, ms or s, chosen by the column's largest value), counts
have thousands separators, kernel names are shortened (:func:`~.base.short_kernel_name`) and the
one flexible column of a table (the function or kernel name) is cut with ``…`` so that every line
fits ``width`` characters. No colour and no box drawing: the text pastes anywhere.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from .. import schema
from ..results import views
from .base import human_time, short_kernel_name, time_unit

if TYPE_CHECKING:
    from ..results import ProfileResult

DEFAULT_WIDTH = 100
NO_VALUE = "-"
GAP = "  "


@dataclass(frozen=True)
class Column:
    """One text column: a title, right-aligned (numbers) or not, and whether it may be cut to fit."""

    title: str
    numeric: bool = True
    flexible: bool = False


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "\u2026"


def cut_middle(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters, so that both ends of a path stay readable."""
    if len(text) <= width:
        return text
    if width < 3:
        return text[:width]
    head = (width - 1) // 2
    return text[:head] + "\u2026" + text[len(text) - (width - 1 - head) :]


def format_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int = DEFAULT_WIDTH) -> str:
    """Rows of cell text as aligned columns under a title line and a rule.

    Parameters
    ----------
    columns:
        The columns, in order; at most one should be ``flexible``.
    rows:
        Cell text, one sequence per row, as many cells as columns.
    width:
        The most characters per line; the flexible column is cut (``…``) to fit, down to 8 characters.

    Returns
    -------
    str
        The table, lines joined with ``\\n`` (no trailing newline).
    """
    widths = [max([len(c.title), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    excess = sum(widths) + len(GAP) * (len(columns) - 1) - width
    for i, column in enumerate(columns):
        if column.flexible and excess > 0:
            widths[i] = max(widths[i] - excess, min(widths[i], 8))
    lines = []
    for cells in [[c.title for c in columns], *rows]:
        parts = []
        for cell, column, size in zip(cells, columns, widths):
            text = _cut(cell, size)
            parts.append(text.rjust(size) if column.numeric else text.ljust(size))
        lines.append(GAP.join(parts).rstrip())
    lines.insert(1, GAP.join("-" * size for size in widths))
    return "\n".join(lines)


def _count(value: float) -> str:
    return NO_VALUE if value is None or (isinstance(value, float) and math.isnan(value)) else f"{int(value):,}"


def _unit_column(values: Sequence[float]) -> tuple[str, list[str]]:
    unit = time_unit(max((abs(v) for v in values), default=0.0))
    digits = 1 if unit.scale == 1.0 else 2
    return unit.symbol, [f"{v / unit.scale:,.{digits}f}" for v in values]


def summary_text(result: ProfileResult, top_k: int = 10, width: int = DEFAULT_WIDTH) -> str:
    """``describe(top_k)`` as a readable table, shares over all kernel time, then the coverage line.

    Parameters
    ----------
    result:
        The result to summarise.
    top_k:
        The most functions listed.
    width:
        The most characters per line.

    Returns
    -------
    str
        The table and one line ``coverage …``.
    """
    summary = result.describe(top_k)
    total = result.total_us
    symbol, times = _unit_column([float(v) for v in summary["time_spent_us"]])
    rows = [
        [
            str(r.function_name),
            _count(r.calls),
            _count(r.num_distinct_samples),
            _count(r.num_modules),
            time,
            f"{100 * r.time_spent_us / total:.1f}%" if total > 0 else NO_VALUE,
            f"{r.tensor_size_MB:,.3f}",
        ]
        for r, time in zip(summary.itertuples(), times)
    ]
    columns = [
        Column("function", numeric=False, flexible=True),
        Column("calls"),
        Column("samples"),
        Column("modules"),
        Column(f"time ({symbol})"),
        Column("share"),
        Column("tensors (MB)"),
    ]
    table = format_table(columns, rows, width) if rows else "no functional call launched a kernel"
    return "\n".join([table, *textwrap.wrap(coverage_line(result), width, subsequent_indent="  ")])


def coverage_line(result: ProfileResult) -> str:
    """``coverage 92.3%: 214.7 µs of 232.7 µs kernel time attributed (72 of 82 activity rows)``."""
    if result.activity.num_rows == 0:
        return "coverage n/a: nothing ran in the recorded pass"
    share = f"{result.coverage:.1%}" if result.total_us > 0 else "n/a"
    rows = f"{result.attributed().num_rows:,} of {result.activity.num_rows:,} activity rows"
    times = f"{human_time(result.attributed_us)} of {human_time(result.total_us)}"
    return f"coverage {share}: {times} kernel time attributed ({rows})"


def unattributed_text(result: ProfileResult, top: int = 3, width: int = DEFAULT_WIDTH) -> str:
    """The largest unattributed ops, one line each, then what to do, once per reason; empty at full coverage.

    Parameters
    ----------
    result:
        The result.
    top:
        The most ops listed.
    width:
        The most characters per line (hints wrap).

    Returns
    -------
    str
        Lines such as ``not attributed: aten::add in blocks.0, 6.7 µs (2.9%): a raw torch op …`` and
        ``hint: profile with functions="all" …``.
    """
    table = views.unattributed_table(result, top=top)
    lines = []
    for r in table.itertuples():
        where = f"{r.op or 'no op'} in {r.module or 'no profiled module'}"
        lines.append(_cut(f"not attributed: {where}, {human_time(r.total_us)} ({r.share:.1%})", width))
    for hint in dict.fromkeys(table["hint"]):
        lines += textwrap.wrap(f"hint: {hint}", width, subsequent_indent="  ")
    return "\n".join(lines)


def _change(before: float, after: float) -> str:
    if before > 0:
        return f"{100.0 * (after - before) / before:+.1f}%"
    return "new" if after > 0 else NO_VALUE


def comparison_text(table: pd.DataFrame, level: str, top: int = 20, width: int = DEFAULT_WIDTH) -> str:
    """One level of ``compare()``'s table (``function`` or ``kernel``) as text, largest change first.

    Parameters
    ----------
    table:
        ``compare(a, b)``.
    level:
        ``"function"`` or ``"kernel"``.
    top:
        The most rows listed.
    width:
        The most characters per line; kernel names are shortened, then cut to fit.

    Returns
    -------
    str
        A title line ``per kernel, largest change first (20 of 31):`` and the table, with the
        time before and after, the difference and the change in percent (``new`` when absent before).
    """
    rows_of_level = table[table["level"] == level]
    shown = rows_of_level.head(top)
    values = [float(v) for column in ("before_us", "after_us", "delta_us") for v in shown[column]]
    unit = time_unit(max((abs(v) for v in values), default=0.0))
    digits = 1 if unit.scale == 1.0 else 2

    def time(us: float, signed: bool = False) -> str:
        return f"{us / unit.scale:{'+' if signed else ''},.{digits}f}"

    rows = []
    for r in shown.itertuples():
        name = r.function_name if isinstance(r.function_name, str) else "(no functional call)"
        cells = [name] + ([short_kernel_name(str(r.kernel))] if level == "kernel" else [])
        cells += [time(r.before_us), time(r.after_us), time(r.delta_us, True), _change(r.before_us, r.after_us)]
        rows.append(cells)
    columns = [Column("function", numeric=False, flexible=level == "function")]
    if level == "kernel":
        columns.append(Column("kernel", numeric=False, flexible=True))
    symbol = unit.symbol
    columns += [
        Column(f"before ({symbol})"),
        Column(f"after ({symbol})"),
        Column(f"delta ({symbol})"),
        Column("change"),
    ]
    title = f"per {level}, largest change first ({len(shown)} of {len(rows_of_level)}):"
    return title + ("\n" + format_table(columns, rows, width) if rows else "\n(none)")


def mismatch_warning(a: ProfileResult, b: ProfileResult) -> str | None:
    """A one-line warning when two results come from different activity sources or devices, else None."""

    def where(result: ProfileResult) -> str:
        device = result.metadata.get(schema.META_DEVICE)
        return f"{result.source} on {device}" if device and device != result.source else result.source

    sources_differ = a.source.split("/")[0] != b.source.split("/")[0]
    devices_differ = a.metadata.get(schema.META_DEVICE) != b.metadata.get(schema.META_DEVICE)
    if not (sources_differ or devices_differ):
        return None
    return (
        f"comparing {where(a)} with {where(b)}: kernel names and times differ by nature "
        "(CUDA kernels vs cpu:: ops), so the difference is not a like-for-like change"
    )
