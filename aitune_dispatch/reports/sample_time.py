"""The HTML report's per-sample section: the distinct input samples that cost the most kernel time, in the
page's unit and as shares of all kernel time like the rest of the page (``docs/design.md``, "The HTML report").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .base import TimeUnit, human_time, time_unit
from .templating import render

if TYPE_CHECKING:
    from ..results import ProfileResult

TOP_SAMPLES = 20


def _number(value: float, digits: int) -> str:
    return "\u2014" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


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

    def share(us: float) -> str:
        return f"{_number(100.0 * float(us) / total, 1)}%" if total > 0 else "\u2014"

    return render(
        "sample_time.html.j2",
        unit=unit,
        basis=f"times in {unit.symbol}; shares of all kernel time ({human_time(total)})",
        rows=list(table.head(int(top)).itertuples()),
        total=len(table),
        time=lambda us: _time(float(us), unit),
        share=share,
    )
