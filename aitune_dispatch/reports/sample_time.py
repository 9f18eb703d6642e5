"""The HTML report's per-sample table: the distinct input samples that cost the most kernel time.

A section of its own (``ProfileResult.samples()``, top rows), hooked into the page by one line of
``html.py``. Self-contained markup in the page's table style; no torch.
"""

from __future__ import annotations

import html
import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..results import ProfileResult

TOP_SAMPLES = 20
_HEADERS = (
    ("function", False),
    ("sample", True),
    ("calls", True),
    ("modules", True),
    ("time (\u00b5s)", True),
    ("per call (\u00b5s)", True),
    ("share", True),
    ("signature", False),
)


def _number(value: float, digits: int) -> str:
    return "\u2014" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"


def _row(cells: list[str]) -> str:
    return (
        "<tr>"
        + "".join(
            f'<td class="num">{cell}</td>' if numeric else f"<td>{cell}</td>"
            for cell, (_, numeric) in zip(cells, _HEADERS)
        )
        + "</tr>"
    )


def sample_time_section(result: ProfileResult, top: int = TOP_SAMPLES) -> str:
    """The ``<section id="sample-time">`` of the ``top`` samples by kernel time.

    Parameters
    ----------
    result:
        The result the page shows.
    top:
        How many samples to list.

    Returns
    -------
    str
        Escaped HTML; a note instead of the table where no sample was collected or the result's
        calls carry no sample links.
    """
    table = result.samples()
    title = (
        "<h2>Kernel time per sample <small>top samples by attributed kernel time; "
        "aitune_dispatch.benchmark() replays them</small></h2>"
    )
    if table.empty:
        return f'<section id="sample-time">{title}<p>No samples were collected.</p></section>'
    if table["kernel_us"].isna().all():
        note = "This result's functional calls carry no sample links (it was saved before they had them)."
        return f'<section id="sample-time">{title}<p>{html.escape(note)}</p></section>'
    rows = [
        _row(
            [
                f"<code>{html.escape(str(r.function_name))}</code>",
                str(int(r.sample)),
                _number(float(r.calls), 0),
                _number(float(r.num_modules), 0),
                _number(float(r.kernel_us), 1),
                _number(float(r.kernel_us_per_call), 1),
                f"{_number(float(r.time_spent_pct), 1)}%",
                f"<code>{html.escape(str(r.signature))}</code>",
            ]
        )
        for r in table.head(int(top)).itertuples()
    ]
    head = "".join(
        f'<th class="num">{html.escape(t)}</th>' if num else f"<th>{html.escape(t)}</th>" for t, num in _HEADERS
    )
    shown = f"<p>{min(int(top), len(table))} of {len(table)} samples.</p>"
    body = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    return f'<section id="sample-time">{title}{shown}{body}</section>'
