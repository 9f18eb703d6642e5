"""The per-rank view of a merged result (``results.views.ranks``' rank summary, functions across ranks and
collectives) as an HTML report section and as terminal text; empty for any other result, so single-rank
reports are unchanged.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..results.views import ranks
from .base import human_time, short_kernel_name
from .text import DEFAULT_WIDTH, Column, fixed_times, format_table

if TYPE_CHECKING:
    import pandas as pd

    from ..results import ProfileResult

TOP_FUNCTIONS = 20
TOP_COLLECTIVES = 20
NO_VALUE = "\u2014"


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def _share(value: float) -> str:
    return NO_VALUE if value is None or math.isnan(value) else f"{100.0 * value:.1f}%"


def _ratio(value: float) -> str:
    return NO_VALUE if value is None or math.isnan(value) else f"{value:.2f}\u00d7"


def _or_dash(value: object) -> str:
    return NO_VALUE if value is None or (isinstance(value, float) and math.isnan(value)) or value == "" else str(value)


def _html_table(headers: Sequence[tuple[str, bool]], rows: Sequence[Sequence[str]], css: str) -> str:
    """Cells are HTML already escaped; ``headers`` are (title, numeric)."""
    head = "".join(f'<th class="num">{_esc(t)}</th>' if num else f"<th>{_esc(t)}</th>" for t, num in headers)
    body = "".join(
        "<tr>"
        + "".join(f'<td class="num">{c}</td>' if num else f"<td>{c}</td>" for c, (_, num) in zip(row, headers))
        + "</tr>"
        for row in rows
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _summary_cells(table: pd.DataFrame) -> list[list[str]]:
    return [
        [
            str(int(r.rank)),
            _esc(_or_dash(r.host)),
            _esc(_or_dash(r.devices)),
            f"{int(r.activity_rows):,}",
            _esc(human_time(float(r.total_us))),
            _esc(human_time(float(r.attributed_us))),
            _share(float(r.coverage)),
            _esc(human_time(float(r.collective_us))),
        ]
        for r in table.itertuples()
    ]


def _function_cells(table: pd.DataFrame) -> list[list[str]]:
    return [
        [
            f"<code>{_esc(r.function_name)}</code>",
            str(int(r.ranks)),
            _esc(human_time(float(r.mean_us))),
            _esc(human_time(float(r.min_us))),
            _esc(human_time(float(r.max_us))),
            str(int(r.slowest_rank)),
            _ratio(float(r.imbalance)),
        ]
        for r in table.itertuples()
    ]


def _collective_cells(table: pd.DataFrame) -> list[list[str]]:
    return [
        [
            str(int(r.rank)),
            f"<code>{_esc(_or_dash(r.module_name))}</code>",
            f"<code>{_esc(_or_dash(r.op))}</code>",
            f'<code title="{_esc(r.kernel)}">{_esc(short_kernel_name(str(r.kernel)))}</code>',
            f"{int(r.calls):,}",
            _esc(human_time(float(r.total_us))),
        ]
        for r in table.itertuples()
    ]


SUMMARY_HEADERS = (
    ("rank", True),
    ("host", False),
    ("GPUs", False),
    ("activity rows", True),
    ("kernel time", True),
    ("attributed", True),
    ("coverage", True),
    ("collectives", True),
)
FUNCTION_HEADERS = (
    ("function", False),
    ("ranks", True),
    ("mean", True),
    ("min", True),
    ("max", True),
    ("slowest rank", True),
    ("max / mean", True),
)
COLLECTIVE_HEADERS = (
    ("rank", True),
    ("module", False),
    ("op", False),
    ("kernel", False),
    ("calls", True),
    ("time", True),
)


def ranks_section(result: ProfileResult) -> str:
    """The ``<section id="ranks">`` of a merged result (ranks, the top functions by slowest rank, the top
    collectives); ``""`` for any other result.
    """
    if not ranks.is_merged(result):
        return ""
    summary = ranks.rank_summary(result)
    functions = ranks.function_ranks(result)
    collectives = ranks.collectives(result)
    title = (
        f"<h2>Ranks <small>{len(summary)} ranks merged; kernel time per rank, and per functional call "
        "across ranks (a rank where it launched nothing counts 0)</small></h2>"
    )
    body = _html_table(SUMMARY_HEADERS, _summary_cells(summary), "ranks")
    if len(functions):
        shown = functions.head(TOP_FUNCTIONS)
        body += f"<h3>Functional calls across ranks <small>{len(shown)} of {len(functions)}, slowest first</small></h3>"
        body += _html_table(FUNCTION_HEADERS, _function_cells(shown), "rank-functions")
    if len(collectives):
        shown = collectives.head(TOP_COLLECTIVES)
        body += (
            f"<h3>Collectives <small>{len(shown)} of {len(collectives)} (rank, module, op, kernel) groups; "
            "the module and collective op that launched each kernel</small></h3>"
        )
        body += _html_table(COLLECTIVE_HEADERS, _collective_cells(shown), "collectives")
    return f'<section id="ranks">{title}{body}</section>'


def rank_text(result: ProfileResult, top: int = 10, width: int = DEFAULT_WIDTH) -> str:
    """The per-rank table and the top ``top`` functions across ranks, as terminal text; ``""`` unless merged."""
    if not ranks.is_merged(result):
        return ""
    summary = ranks.rank_summary(result)
    n = len(summary)
    symbol, times = fixed_times([float(v) for column in ("total_us", "collective_us") for v in summary[column]])
    rows = [
        [
            str(int(r.rank)),
            _or_dash(r.host).replace(NO_VALUE, "-"),
            _or_dash(r.devices).replace(NO_VALUE, "-"),
            f"{int(r.activity_rows):,}",
            times[i],
            _share(float(r.coverage)).replace(NO_VALUE, "-"),
            times[n + i],
        ]
        for i, r in enumerate(summary.itertuples())
    ]
    columns = [
        Column("rank"),
        Column("host", numeric=False, flexible=True),
        Column("GPUs", numeric=False),
        Column("rows"),
        Column(f"kernel time ({symbol})"),
        Column("coverage"),
        Column(f"collectives ({symbol})"),
    ]
    lines = [f"per rank ({len(summary)} ranks merged):", format_table(columns, rows, width)]
    functions = ranks.function_ranks(result).head(top)
    if len(functions):
        n = len(functions)
        symbol, times = fixed_times([float(v) for column in ("mean_us", "min_us", "max_us") for v in functions[column]])
        rows = [
            [
                str(r.function_name),
                str(int(r.ranks)),
                times[i],
                times[n + i],
                times[2 * n + i],
                str(int(r.slowest_rank)),
                _ratio(float(r.imbalance)).replace(NO_VALUE, "-"),
            ]
            for i, r in enumerate(functions.itertuples())
        ]
        columns = [
            Column("function", numeric=False, flexible=True),
            Column("ranks"),
            Column(f"mean ({symbol})"),
            Column(f"min ({symbol})"),
            Column(f"max ({symbol})"),
            Column("slowest"),
            Column("max/mean"),
        ]
        lines += ["", "per functional call across ranks, slowest first:", format_table(columns, rows, width)]
    return "\n".join(lines)
