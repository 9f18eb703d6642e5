"""The HTML comparison page of two results: ``compare()``'s rows, before, after, delta and, where both
results recorded steps, the change per step with its 95% interval, marked where it is outside the noise.

The page is the report's (one self-contained file: the same stylesheet, script and macros, Jinja2 templates
in ``reports/templates/``), but of two results, so :class:`ComparisonRenderer` is not a
:class:`.base.Renderer` (a renderer of one result, which the CLI picks by the file's name from
``RENDERERS``): it takes both results and writes the same file endings through the same atomic write.
It lays out what :func:`aitune_dispatch.results.views.compare` computed (the per-step change, its
bootstrap interval and ``outside_noise`` included) and computes no statistic of its own
(``docs/design.md``, "The HTML report").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from ..results import atomic, compare
from ..results.views.comparison import CONFIDENCE, RESAMPLES
from ..results.views.kernel_names import short_names
from ..results.views.steps import step_count
from ..schema import COMPARE_COLUMNS
from . import templating
from ._html_assets import CSS, JS
from .base import TimeUnit, human_time, kernel_labels, time_unit
from .html import Capped, Card, HtmlRenderer, embed_json
from .templating import NO_VALUE, missing, render
from .text import mismatch_warning

if TYPE_CHECKING:
    from ..results import ProfileResult

__all__ = ["ComparisonRenderer", "write_comparison"]

COMPARE_ROWS = 30  # rows of each level shown at once; up to MORE_COMPARE_ROWS more behind "show more"
MORE_COMPARE_ROWS = 500
TITLE = "aitune_dispatch comparison"
LABELS = ("before", "after")

COMPARISON_CSS = """
tr.outside-noise td { background: #fff6e8; }
tr.outside-noise:hover td { background: #ffefd6; }
table[class^="compare-"] th.num { white-space: normal; }  /* the titles wrap: twelve columns fit 800 px */
tr.outside-noise td.noise { color: #9a3b00; font-weight: 600; }
tr.within-noise td.noise { color: var(--muted); }
p.noise-note { margin: 8px 0 0; color: var(--muted); font-size: 12.5px; }
p.noise-note.none { color: #9a3b00; }
.cards.compare { grid-template-columns: repeat(5, 1fr); }
@media (max-width: 1100px) { .cards.compare { grid-template-columns: repeat(3, 1fr); } }
"""


@dataclass(frozen=True)
class Side:
    """One of the two results as the page names it: its label (a path, ``before``), kernel time, source, steps."""

    label: str
    total_us: float
    source: str
    steps: int

    @classmethod
    def of(cls, result: ProfileResult, label: str) -> Side:
        """``result``'s side of the page."""
        return cls(label, float(result.total_us), str(result.source), step_count(result))


@dataclass(frozen=True)
class ComparisonPage:
    """One comparison page's state: both sides, ``compare()``'s table, the page's one time unit and whether
    the table holds a noise estimate (both sides recorded two or more steps)."""

    before: Side
    after: Side
    table: pd.DataFrame
    unit: TimeUnit
    warning: str | None

    @classmethod
    def of(
        cls, before: ProfileResult, after: ProfileResult, labels: Sequence[str], table: pd.DataFrame
    ) -> ComparisonPage:
        """The page state of ``table``, the comparison of ``before`` with ``after``."""
        sides = (Side.of(before, labels[0]), Side.of(after, labels[1]))
        table = _with_kernel_labels(table)
        times = [sides[0].total_us, sides[1].total_us, *table["before_us"], *table["after_us"]]
        return cls(*sides, table, time_unit(max(map(abs, times), default=0.0)), mismatch_warning(before, after))

    @property
    def noise(self) -> bool:
        """Whether ``compare()`` gave any row a per-step change (both sides have two or more steps)."""
        return bool(self.table["step_delta_us"].notna().any())

    def time(self, us: float) -> str:
        """``us`` in the page unit, no symbol (as the report writes it: µs with 2 decimals below 10)."""
        if missing(us):
            return NO_VALUE
        us = float(us)
        return self.unit(us, 2 if self.unit.scale == 1.0 and abs(us) < 10 else self.unit.decimals(us))

    def signed(self, us: float) -> str:
        """``us`` as :meth:`time` with its sign, ``+1.25`` (a change)."""
        text = self.time(us)
        return text if missing(us) or float(us) <= 0 or text == NO_VALUE else f"+{text}"

    def basis(self) -> str:
        """The sentence under each table's title: the unit and the order."""
        return f"times in {self.unit.symbol}; largest change first"

    def rows(self, level: str) -> Capped:
        """``level``'s rows (``function`` or ``kernel``), in ``compare()``'s order, the first ones shown."""
        return Capped.of(self.table[self.table["level"] == level], COMPARE_ROWS, MORE_COMPARE_ROWS)

    def outside(self, level: str) -> int:
        """How many of ``level``'s rows ``compare()`` found outside the noise."""
        rows = self.table[self.table["level"] == level]["outside_noise"]
        return int(rows.fillna(False).astype(bool).sum())

    def noise_note(self) -> str:
        """What the noise marks mean, or why there are none."""
        if self.noise:
            return (
                f"\u2605 outside the noise: the {CONFIDENCE:.0%} percentile-bootstrap interval of the change of the "
                f"mean time per step ({RESAMPLES:,} resamples of the {self.before.steps} and {self.after.steps} "
                "recorded steps, seeded) leaves out 0; the other rows' change is within the step-to-step noise."
            )
        if min(self.before.steps, self.after.steps) >= 2:
            return "No noise estimate: no row ran inside the recorded steps."
        return (
            f"No noise estimate: a side has one step (before {self.before.steps}, after {self.after.steps}), so "
            "the change per step has no interval; record several on both sides: recording(...) with rec.step()."
        )

    def cards(self) -> list[Card]:
        """Headline figures: each side's kernel time, the change, the noise estimate and the rows outside it."""
        delta = self.after.total_us - self.before.total_us
        change = change_text(self.before.total_us, self.after.total_us)
        sign = "+" if delta > 0 else "-" if delta < 0 else ""
        steps = f"{self.before.steps} and {self.after.steps} steps"
        cards = [
            Card("before", human_time(self.before.total_us), f"kernel time ({self.before.source})", id="card-before"),
            Card("after", human_time(self.after.total_us), f"kernel time ({self.after.source})", id="card-after"),
            Card("delta", f"{sign}{human_time(abs(delta))}", f"{change} of the kernel time", id="card-delta"),
        ]
        if self.noise:
            cards.append(Card("noise estimate", f"{CONFIDENCE:.0%}", f"bootstrap over {steps}", id="card-noise"))
            kernels, functions = self.outside("kernel"), self.outside("function")
            note = f"and {functions:,} functions: changes the steps' noise cannot explain"
            cards.append(Card("outside the noise", f"{kernels:,} kernels", note, id="card-outside"))
        else:
            cards.append(Card("noise estimate", NO_VALUE, f"none: {steps} (two or more a side)", id="card-noise"))
        return cards


def change_text(before_us: float, after_us: float, ratio: float | None = None) -> str:
    """The change in percent of the before time: ``+12.3%``, ``new`` where there was none before.

    Parameters
    ----------
    before_us, after_us:
        The time on either side.
    ratio:
        ``compare()``'s ``after_us / before_us`` of the row (NaN where ``before_us`` is 0); None: computed
        from the two times.

    Returns
    -------
    str
        One decimal and a sign; ``new`` where only the after side ran it, ``—`` where neither did.
    """
    if ratio is None:
        ratio = after_us / before_us if before_us > 0 else float("nan")
    if missing(ratio):
        return "new" if after_us > 0 else NO_VALUE
    return f"{100.0 * (float(ratio) - 1.0):+.1f}%"


def noise_key(outside: Any) -> int | None:
    """The sort key of a row's noise cell: 1 outside the noise, 0 within, None where unknown."""
    return None if missing(outside) else int(bool(outside))


def _with_kernel_labels(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with ``kernel_label``: what the page shows of each kernel row (``base.kernel_labels``)."""
    kernel_rows = table["level"] == "kernel"
    kernels = table.loc[kernel_rows, "kernel"]
    labels = pd.Series(None, index=table.index, dtype=object)
    labels[kernel_rows] = kernel_labels(list(kernels), list(short_names(kernels)))
    return table.assign(kernel_label=labels)


def _check_table(table: pd.DataFrame) -> pd.DataFrame:
    if not isinstance(table, pd.DataFrame) or list(table.columns) != COMPARE_COLUMNS:
        raise ValueError(
            "table must be compare(before, after)'s DataFrame (schema.COMPARE_COLUMNS); pass table=None to "
            "have the page compute it"
        )
    return table


class ComparisonRenderer:
    """The HTML comparison page of two results (opens offline): ``compare()``'s function and kernel rows.

    Parameters
    ----------
    title:
        The page title.
    labels:
        What the page calls the two results (their paths, say), before first.
    """

    extension = HtmlRenderer.extension
    extensions = HtmlRenderer.extensions

    def __init__(self, *, title: str = TITLE, labels: Sequence[str] = LABELS) -> None:
        if isinstance(labels, str) or len(labels) != 2:
            raise ValueError(
                f"labels names the two results, before first, e.g. ('a.parquet', 'b.parquet'); got {labels!r}"
            )
        self.title = title
        self.labels = (str(labels[0]), str(labels[1]))

    @classmethod
    def accepted(cls) -> tuple[str, ...]:
        """Every file ending the page is written to, ``.html`` first (the HTML report's).

        Returns
        -------
        tuple of str
            ``(".html", ".htm")``.
        """
        return HtmlRenderer.accepted()

    def render(self, before: ProfileResult, after: ProfileResult, table: pd.DataFrame | None = None) -> str:
        """The whole page.

        Parameters
        ----------
        before:
            The result before the change.
        after:
            The result after it.
        table:
            ``compare(before, after)`` where the caller has it already (the CLI prints it too); None:
            computed here.

        Returns
        -------
        str
            One HTML document with its CSS and script inline.

        Raises
        ------
        TypeError
            ``before`` or ``after`` is not a ProfileResult.
        ValueError
            ``table`` is not a comparison's table.
        """
        table = compare(before, after) if table is None else _check_table(table)
        page = ComparisonPage.of(before, after, self.labels, table)
        body = render("comparison.html.j2", title=self.title, page=page, change_text=change_text, noise_key=noise_key)
        data = {"unit": {"symbol": page.unit.symbol, "scale": page.unit.scale}, "total_us": page.before.total_us}
        return (
            render(
                "report.html.j2",
                title=self.title,
                sections=[templating.markup(body)],
                css=templating.markup(CSS + COMPARISON_CSS),
                js=templating.markup(JS),
                data=templating.markup(embed_json(data)),
            )
            + "\n"
        )

    def write(
        self, before: ProfileResult, after: ProfileResult, path: str | Path, table: pd.DataFrame | None = None
    ) -> Path:
        """Render the comparison into ``path`` (parent folders are created) and return the path.

        The file is written beside ``path`` and put there only when complete, as the HTML report is
        (``results.atomic.write_bytes``): a failed write leaves the previous file as it was.

        Parameters
        ----------
        before:
            The result before the change.
        after:
            The result after it.
        path:
            The output file; it must end in ``.html`` (or ``.htm``). A symlink is followed.
        table:
            ``compare(before, after)`` where the caller has it already; None: computed here.

        Returns
        -------
        pathlib.Path
            The path written.

        Raises
        ------
        OSError
            The disk refused (a full disk: ``ENOSPC``); the message names ``path`` and what was kept.
        ValueError
            ``path`` does not end in ``.html`` or ``.htm``, or ``table`` is not a comparison's table.
        """
        target = HtmlRenderer.check_path(path)
        return atomic.write_bytes(target, self.render(before, after, table).encode("utf-8"))


def write_comparison(
    before: ProfileResult,
    after: ProfileResult,
    path: str | Path,
    *,
    title: str = TITLE,
    labels: Sequence[str] = LABELS,
) -> Path:
    """Write the self-contained HTML comparison page of two results.

    Parameters
    ----------
    before:
        The result before the change (a fresh one or one loaded with ``aitune_dispatch.load``).
    after:
        The result after it.
    path:
        The file to write; it must end in ``.html`` (or ``.htm``). Parent folders are created.
    title:
        The page title.
    labels:
        What the page calls the two results, before first.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    return ComparisonRenderer(title=title, labels=labels).write(before, after, path)
