"""The HTML report's per-sample section: the distinct input samples that cost the most kernel time, in the
page's unit and as shares of all kernel time like the rest of the page (``docs/design.md``, "The HTML report").
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

from .base import TimeUnit, human_time, time_unit

if TYPE_CHECKING:
    from ..results import ProfileResult

TOP_SAMPLES = 20


def _headers(unit: TimeUnit) -> tuple[tuple[str, bool], ...]:
    return (
        ("function", False),
        ("sample", True),
        ("calls", True),
        ("modules", True),
        (f"time ({unit.symbol})", True),
        (f"per call ({unit.symbol})", True),
        ("share", True),
        ("signature", False),
    )


def _number(value: float, digits: int) -> str:
    return "\u2014" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def _row(cells: list[str], headers: tuple[tuple[str, bool], ...]) -> str:
    return (
        "<tr>"
        + "".join(
            f'<td class="num">{cell}</td>' if numeric else f"<td>{cell}</td>"
            for cell, (_, numeric) in zip(cells, headers)
        )
        + "</tr>"
    )


def _name(value: object) -> str:
    """A function name that may wrap after ``_`` in a narrow window."""
    return "<code>" + html.escape(str(value)).replace("_", "_<wbr>") + "</code>"


def _time(us: float, unit: TimeUnit) -> str:
    if us is None or math.isnan(us):
        return "\u2014"
    return unit(us, 2 if unit.scale == 1.0 and us < 10 else unit.decimals(us))  # as Page.time


def sample_time_section(result: ProfileResult, top: int = TOP_SAMPLES, unit: TimeUnit | None = None) -> str:
    """The ``<section id="sample-time">`` of the ``top`` samples by kernel time (a note where none were linked)."""
    table = result.samples()
    if unit is None:
        unit = time_unit(float(table["kernel_us"].max()) if table["kernel_us"].notna().any() else 0.0)
    total = result.total_us
    basis = f"times in {unit.symbol}; shares of all kernel time ({human_time(total)})"
    title = (
        "<h2>Kernel time per sample <small>top samples by attributed kernel time; "
        f"aitune_dispatch.benchmark() replays them; {html.escape(basis)}</small></h2>"
    )
    if table.empty:
        return f'<section id="sample-time">{title}<p>No samples were collected.</p></section>'
    headers = _headers(unit)
    rows = [
        _row(
            [
                _name(r.function_name),
                str(int(r.sample)),
                _number(float(r.calls), 0),
                _number(float(r.num_modules), 0),
                _time(float(r.kernel_us), unit),
                _time(float(r.kernel_us_per_call), unit),
                f"{_number(100.0 * float(r.kernel_us) / total, 1)}%" if total > 0 else "\u2014",
                f"<code>{html.escape(str(r.signature))}</code>",
            ],
            headers,
        )
        for r in table.head(int(top)).itertuples()
    ]
    head = "".join(
        f'<th class="num">{html.escape(t)}</th>' if num else f"<th>{html.escape(t)}</th>" for t, num in headers
    )
    shown = f"<p>{min(int(top), len(table))} of {len(table)} samples.</p>"
    body = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f'<section id="sample-time">{title}{shown}{body}</section>'
