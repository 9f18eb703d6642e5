"""The per-rank view of a merged result (``results.views.ranks``' rank summary, functions across ranks and
collectives) as an HTML report section and as terminal text; empty for any other result, so single-rank
reports are unchanged.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..results import views
from ..results.views import ranks
from .templating import render
from .text import DEFAULT_WIDTH, Column, fixed_times, format_table

if TYPE_CHECKING:
    from ..results import ProfileResult

TOP_FUNCTIONS = 20
TOP_COLLECTIVES = 20
NO_VALUE = "\u2014"


def _share(value: float) -> str:
    return NO_VALUE if value is None or math.isnan(value) else f"{100.0 * value:.1f}%"


def _ratio(value: float) -> str:
    return NO_VALUE if value is None or math.isnan(value) else f"{value:.2f}\u00d7"


def _or_dash(value: object) -> str:
    return NO_VALUE if value is None or (isinstance(value, float) and math.isnan(value)) or value == "" else str(value)


def ranks_section(result: ProfileResult) -> str:
    """The ``<section id="ranks">`` of a merged result (ranks, the top functions by slowest rank, the top
    collectives); ``""`` for any other result.
    """
    if not ranks.is_merged(result):
        return ""
    functions = ranks.function_ranks(result)
    collectives = ranks.collectives(result)
    return render(
        "ranks.html.j2",
        summary=list(ranks.rank_summary(result).itertuples()),
        functions=list(functions.head(TOP_FUNCTIONS).itertuples()),
        functions_total=len(functions),
        collectives=list(collectives.head(TOP_COLLECTIVES).itertuples()),
        collectives_total=len(collectives),
        or_dash=_or_dash,
        percent=_share,
        ratio=_ratio,
    )


def rank_text(result: ProfileResult, top: int | None = 10, width: int = DEFAULT_WIDTH) -> str:
    """The per-rank table and the top ``top`` functions across ranks (None: every one), as terminal text;
    ``""`` unless merged."""
    top = views.check_top(top)
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
    functions = views.first_rows(ranks.function_ranks(result), top)
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
