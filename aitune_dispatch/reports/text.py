"""Plain-text tables for a terminal, returned as text so that the CLI only prints.

Each time column has one unit (µs, ms or s, by its largest value) and that unit's fixed decimals, so
the points line up; the flexible (name) columns are cut with ``…`` so every line fits ``width``, names
staying distinct (:func:`distinct_cuts`); there is no colour or box drawing, so the text pastes
anywhere. ``rich`` lays the tables out (:func:`format_table`); what is ours is what goes in them.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from .. import schema
from ..results import views
from ..results.views.origins import kernel_origins
from .base import Renderer, human_time, kernel_labels, time_unit

if TYPE_CHECKING:
    from ..results import ProfileResult

DEFAULT_WIDTH = 100
NO_VALUE = "-"
KERNEL_CHARS = 120  # a kernel's name before the table cuts it: long enough to keep what tells kernels apart
GAP = "  "


KERNEL_LEAST = 40  # a kernel name is never cut shorter (half the width on a terminal under 80 columns)


@dataclass(frozen=True)
class Column:
    """One text column: a title, right-aligned (numbers) or not, and whether it may be cut to fit.

    ``least`` is the fewest characters a flexible column is cut to (its title's length where that is
    longer; the whole name where it is shorter); ``drop`` marks a column the table may leave out where
    the line does not fit otherwise (the lowest ``drop`` first; 0: always shown); ``wrap`` folds a
    flexible column's long names onto more lines instead of cutting them.
    """

    title: str
    numeric: bool = True
    flexible: bool = False
    least: int = 8
    drop: int = 0
    wrap: bool = False


def kernel_column(title: str = "kernel", width: int = DEFAULT_WIDTH, wrap: bool = False) -> Column:
    """The flexible column of kernel names: never cut below ``KERNEL_LEAST`` characters (half of ``width``
    where that is less), folded onto more lines with ``wrap`` (full names)."""
    return Column(title, numeric=False, flexible=True, least=min(KERNEL_LEAST, max(width // 2, 8)), wrap=wrap)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(width - 1, 0)] + "\u2026"


def distinct_cuts(names: Sequence[str], width: int) -> list[str]:
    """``names`` cut to ``width`` characters so that different names stay different where they can.

    A name that fits is kept. The others lose their end (``…``), as a reader scans from the start; where
    that makes two different names read the same (kernels such as ``elementwise_kernel<128, 2, …``
    differ only deep inside), each of them keeps a tail instead, the shortest that tells them apart
    and at least two thirds of the width: ``elementwis…Functor_add<float>>>``. Where no tail does (the
    difference lies in the middle of long names), each keeps a window from where it first differs from
    the name most like it: ``head…window…``.
    Equal names stay equal.
    """
    width = max(width, 1)
    cuts = {name: _cut(name, width) for name in dict.fromkeys(names)}
    groups: dict[str, list[str]] = {}
    for name, cut in cuts.items():
        groups.setdefault(cut, []).append(name)
    for group in (group for group in groups.values() if len(group) > 1):
        cuts.update(_told_apart(group, width))
    return [cuts[name] for name in names]


def _told_apart(group: list[str], width: int) -> dict[str, str]:
    """Cuts of the (different) names of ``group``, all ``width`` long, that differ from each other."""
    already_cut = any(name.endswith("\u2026") for name in group)  # their ends are where a cut fell
    for tail in range(1, 0 if already_cut else width - 1):  # a head, "…" and the shortest telling tail
        if len({name[len(name) - tail :] for name in group}) == len(group):
            base = _template_head(group)  # a kernel's base name (elementwise_kernel<) stays whole where it can
            keep = base if base and base <= width // 2 and width - 1 - base >= tail else max(width // 3, 1)
            tail = max(tail, width - 1 - keep)  # else two thirds for the tail, to read it
            return {name: _head_tail(name, width, tail) for name in group}
    head = max(width // 3, 1)
    window = max(width - head - 2, 1)
    cuts = {}
    for name in group:  # from where it first differs from the name most like it, a little before
        differs = max(_common_prefix(name, other) for other in group if other != name)
        start = max(differs - window // 4, min(head, differs))
        cuts[name] = name[: min(head, start)] + "\u2026" + _cut(name[start:], window + 1)
    return cuts


def _template_head(group: list[str]) -> int:
    """The length of the name up to its first ``<`` (included) where every name of ``group`` shares it, else 0."""
    first = group[0].find("<")
    if first <= 0 or any(not name.startswith(group[0][: first + 1]) for name in group):
        return 0
    return first + 1


def _head_tail(name: str, width: int, tail: int) -> str:
    if len(name) <= width:
        return name
    return name[: width - 1 - tail] + "\u2026" + name[len(name) - tail :]


def _common_prefix(a: str, b: str) -> int:
    for index, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return index
    return min(len(a), len(b))


def cut_middle(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters, so that both ends of a path stay readable."""
    if len(text) <= width:
        return text
    if width < 3:
        return text[:width]
    head = (width - 1) // 2
    return text[:head] + "\u2026" + text[len(text) - (width - 1 - head) :]


def _floor(column: Column, cells: Iterable[str]) -> int:
    """The fewest characters ``column`` takes: a fixed one all of its cells, a flexible one its ``least``."""
    natural = max([len(column.title), *(len(cell) for cell in cells)])
    return min(natural, max(len(column.title), column.least)) if column.flexible else natural


def shown_columns(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int = DEFAULT_WIDTH) -> list[int]:
    """The indexes of the ``columns`` that :func:`format_table` shows at ``width``: every one where the
    narrowest line fits, else without the droppable ones (``Column.drop``, lowest first) until it fits."""
    floors = [_floor(column, [row[i] for row in rows]) for i, column in enumerate(columns)]
    shown = list(range(len(columns)))
    for index in sorted((i for i, c in enumerate(columns) if c.drop), key=lambda i: columns[i].drop):
        if sum(floors[i] for i in shown) + len(GAP) * (len(shown) - 1) <= width:
            break
        shown.remove(index)
    return shown


def left_out(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int = DEFAULT_WIDTH) -> str:
    """`` (left out to fit N columns: mean (µs), top module)``: what :func:`shown_columns` drops, or ``""``."""
    shown = shown_columns(columns, rows, width)
    dropped = [column.title for i, column in enumerate(columns) if i not in shown]
    return f" (left out to fit {width} columns: {', '.join(dropped)})" if dropped else ""


def format_table(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int = DEFAULT_WIDTH) -> str:
    """Rows of cell text as aligned columns under a title line and a rule, at most ``width`` per line.

    ``rich`` lays the table out (imported here, on the first table): numeric columns right-aligned,
    two spaces between columns, and where the line is too wide the flexible columns shrink, widest
    first, none below its title or its ``least`` (8 characters, a kernel's 40), after the droppable
    columns are left out (:func:`shown_columns`; a line of many fixed columns can still be wider).
    Each flexible column's names are cut to the width it gets by :func:`distinct_cuts`, or folded onto
    more lines where the column wraps.
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    shown = shown_columns(columns, rows, width)
    columns = [columns[i] for i in shown]
    rows = [[row[i] for i in shown] for row in rows]
    table = Table(box=None, show_edge=False, pad_edge=False, padding=(0, len(GAP), 0, 0), show_header=True)
    widths = _widths(columns, rows, width)
    least = len(GAP) * (len(columns) - 1) + sum(widths)
    for column, column_width in zip(columns, widths):
        table.add_column(
            Text(column.title, no_wrap=True, overflow="ellipsis"),
            justify="right" if column.numeric else "left",
            no_wrap=not column.wrap,
            width=column_width,
        )
    cut = [_Names([row[i] for row in rows]) if c.flexible and not c.wrap else None for i, c in enumerate(columns)]
    table.add_row(*(_Rule() for _ in columns))
    for index, row in enumerate(rows):
        cells = [Text(cell, overflow="fold") if names is None else names.cell(index) for cell, names in zip(row, cut)]
        table.add_row(*cells)
    console = Console(
        file=io.StringIO(),
        width=max(width, least),  # rich would squeeze numbers out of sight: a wider line reads better
        color_system=None,
        force_terminal=False,
        force_jupyter=False,
        no_color=True,
        highlight=False,
        markup=False,
        emoji=False,
        soft_wrap=False,
        legacy_windows=False,
    )
    with console.capture() as captured:
        console.print(table)
    return "\n".join(line.rstrip() for line in captured.get().rstrip("\n").splitlines())


def _widths(columns: Sequence[Column], rows: Sequence[Sequence[str]], width: int) -> list[int]:
    """Each column's width: its longest cell, the flexible ones shrunk, widest first, none below its floor
    (:func:`_floor`), until the line fits ``width`` (or every one is at its floor)."""
    naturals = [max([len(c.title), *(len(row[i]) for row in rows)]) for i, c in enumerate(columns)]
    floors = [_floor(c, [row[i] for row in rows]) for i, c in enumerate(columns)]
    flexible = [i for i, c in enumerate(columns) if c.flexible]
    room = width - len(GAP) * (len(columns) - 1) - sum(naturals[i] for i, c in enumerate(columns) if not c.flexible)
    if sum(naturals[i] for i in flexible) <= room:
        return naturals
    folded = [i for i in flexible if columns[i].wrap]  # full names: the others whole where the rest still fits
    rest = room - sum(naturals[i] for i in flexible if i not in folded)
    if folded and rest >= sum(floors[i] for i in folded):
        shares = [rest // len(folded) + (k < rest % len(folded)) for k in range(len(folded))]
        return [shares[folded.index(i)] if i in folded else naturals[i] for i in range(len(columns))]

    def at(level: int) -> list[int]:
        return [max(floors[i], min(naturals[i], level)) if i in flexible else naturals[i] for i in range(len(columns))]

    level = max((naturals[i] for i in flexible), default=0)
    while level > 0 and sum(at(level)[i] for i in flexible) > room:
        level -= 1
    widths = at(level)
    spare = room - sum(widths[i] for i in flexible)
    for i in flexible:  # what the level leaves over goes, a character each, to the columns it cut
        if spare > 0 and widths[i] < naturals[i] and widths[i] == level:
            widths[i] += 1
            spare -= 1
    return widths


class _Rule:
    """A rule cell: dashes across the column, whatever width it gets (it asks for none)."""

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.text import Text

        yield Text("-" * options.max_width)

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        return Measurement(1, 1)


class _Names:
    """A flexible column's names, cut together by :func:`distinct_cuts` to the width the layout gives."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        self._cuts: dict[int, list[str]] = {}

    def cut(self, index: int, width: int) -> str:
        if width not in self._cuts:
            self._cuts[width] = distinct_cuts(self.names, width)
        return self._cuts[width][index]

    def cell(self, index: int) -> _Name:
        return _Name(self, index)


class _Name:
    """One name of a :class:`_Names` column: asks for its whole length, shows its cut."""

    def __init__(self, names: _Names, index: int) -> None:
        self.names, self.index = names, index

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.text import Text

        yield Text(self.names.cut(self.index, options.max_width), no_wrap=True, overflow="crop")

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        length = len(self.names.names[self.index])
        return Measurement(min(length, 1), length).with_maximum(options.max_width)


def _count(value: float) -> str:
    return NO_VALUE if value is None or (isinstance(value, float) and math.isnan(value)) else f"{int(value):,}"


def fixed_times(values: Sequence[float], signed: bool = False, like: str | None = None) -> tuple[str, list[str]]:
    """One unit for ``values`` (by the largest, or the one whose symbol is ``like``) and each value in it.

    µs keep one decimal, ms and s three (µs and ms resolution), so every cell of a column has as many
    decimals and the points line up; NaN reads ``-``.
    """
    units = {unit.symbol: unit for unit in (time_unit(0.0), time_unit(1e3), time_unit(1e6))}
    unit = units[like] if like else time_unit(max((abs(v) for v in values if v == v), default=0.0))
    decimals = 1 if unit.scale == 1.0 else 3
    sign = "+" if signed else ""
    return unit.symbol, [NO_VALUE if v != v else f"{v / unit.scale:{sign},.{decimals}f}" for v in values]


def summary_text(result: ProfileResult, top_k: int | None = 10, width: int = DEFAULT_WIDTH) -> str:
    """``describe(top_k)`` as a table, shares over all kernel time, then the coverage line (``top_k`` by
    ``views.check_top``'s rule: None lists every function)."""
    summary = result.describe(top_k)
    total = result.total_us
    symbol, times = fixed_times([float(v) for v in summary["time_spent_us"]])
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


def unattributed_text(result: ProfileResult, top: int | None = 3, width: int = DEFAULT_WIDTH) -> str:
    """The largest unattributed ops, one line each, then a hint per reason; empty at full coverage."""
    table = views.unattributed_table(result, top=top)
    lines = []
    for r in table.itertuples():
        where = f"{_named(r.op, 'no op')} in {_named(r.module, 'no profiled module')}"
        lines.append(_cut(f"not attributed: {where}, {human_time(r.total_us)} ({r.share:.1%})", width))
    for hint in dict.fromkeys(table["hint"]):
        lines += textwrap.wrap(f"hint: {hint}", width, subsequent_indent="  ")
    return "\n".join(lines)


def _share_cell(share: float) -> str:
    return NO_VALUE if share != share else f"{100 * share:.1f}%"


def _named(value: object, missing: str) -> str:
    return value if isinstance(value, str) and value else missing  # a missing name is NaN in the one string dtype


def kernels_text(
    result: ProfileResult, top: int | None = 10, width: int = DEFAULT_WIDTH, full_names: bool = False
) -> str:
    """The ``top`` kernel names by total time (``kernel_rollup``), each with the functional call and the
    module pattern that spent most of its time (``views.origins.kernel_origins``); empty where nothing ran.

    Kernels go by their short name (``kernel_labels``), never cut below ``KERNEL_LEAST`` characters:
    where the line does not fit, ``mean``, then ``top module``, then ``top call`` are left out (the
    title says which). ``full_names`` shows each full name instead, folded onto as many lines as it takes.
    """
    top = views.check_top(top)
    rollup = views.kernel_rollup(result)
    if rollup.empty:
        return ""
    shown = views.first_rows(rollup, top)
    origins = kernel_origins(result).set_index(["kernel", "kind"])
    totals, means = [float(v) for v in shown["total_us"]], [float(v) for v in shown["mean_us"]]
    symbol, times = fixed_times(totals + means)
    names = _kernel_cells(shown["kernel"], shown["short_name"], full_names)
    rows = []
    for index, r in enumerate(shown.itertuples()):
        origin = origins.loc[(r.kernel, r.kind)] if (r.kernel, r.kind) in origins.index else None
        call = NO_VALUE if origin is None else _named(origin["top_function"], "(no call)")
        module = NO_VALUE if origin is None else _named(origin["top_module"], "(no module)")
        cells = [names[index], _count(r.count), times[index], times[len(totals) + index]]
        rows.append([*cells, _share_cell(float(r.share)), str(call), str(module)])
    columns = [
        kernel_column("kernel", width, wrap=full_names),
        Column("launches"),
        Column(f"total ({symbol})"),
        Column(f"mean ({symbol})", drop=1),
        Column("share"),
        Column("top call", numeric=False, flexible=True, drop=3),
        Column("top module", numeric=False, flexible=True, drop=2),
    ]
    title = f"top kernels ({len(shown)} of {len(rollup)}), with the call and module pattern that spent most of each"
    title += left_out(columns, rows, width) + ":"
    return "\n".join([wrap_title(title, width), format_table(columns, rows, width)])


def _kernel_cells(kernels: Iterable[object], shorts: Iterable[object], full_names: bool) -> list[str]:
    """The kernel column's cells: each full name (``full_names``), else ``kernel_labels``."""
    if full_names:
        return [kernel if isinstance(kernel, str) else "" for kernel in kernels]
    return kernel_labels(list(kernels), list(shorts), KERNEL_CHARS)


def gpu_time_text(result: ProfileResult, top: int | None = 10, width: int = DEFAULT_WIDTH) -> str:
    """Each device's (and stream's) busy time over the passes' wall time (``device_busy``), then the
    ``top`` longest stretches it ran nothing (``idle_gaps``) with the modules the host ran then.

    One line instead where the result has no device activity (the CPU source): no figure to show.
    """
    top = views.check_top(top)
    busy = views.device_busy(result)
    if busy.empty:
        return f"GPU busy/idle: no GPU activity in this result ({result.source} activity source)"
    passes = len(views.pass_windows(result))
    devices = busy[busy["stream"].isna()]
    streams = busy[busy["stream"].notna()]
    shown = []
    for device in devices.itertuples():
        own = streams[streams["device"] == device.device]
        label = str(int(own["stream"].iloc[0])) if len(own) == 1 else "all"
        shown.append((device, label))
        if len(own) > 1:
            shown += [(stream, str(int(stream.stream))) for stream in own.itertuples()]
    values = [float(getattr(r, c)) for c in ("wall_us", "busy_us", "idle_us") for r, _ in shown]
    symbol, times = fixed_times(values)
    n = len(shown)
    rows = [
        [str(int(r.device)), label, times[i], times[n + i], _share_cell(float(r.busy_share)), times[2 * n + i]]
        + [_count(r.launches)]
        for i, (r, label) in enumerate(shown)
    ]
    columns = [
        Column("device"),
        Column("stream"),
        Column(f"wall ({symbol})"),
        Column(f"busy ({symbol})"),
        Column("busy"),
        Column(f"idle ({symbol})"),
        Column("launches"),
    ]
    title = f"GPU busy time in the profiled passes (wall time summed over {passes} pass{'es' if passes != 1 else ''}):"
    parts = [wrap_title(title, width), format_table(columns, rows, width)]
    return "\n".join([*parts, "", _gaps_text(views.idle_gaps(result), top, width)])


def _gaps_text(gaps: pd.DataFrame, top: int | None, width: int) -> str:
    if gaps.empty:
        return "no GPU idle stretch of 5 µs or more in the passes"
    shown = views.first_rows(gaps, top)
    symbol, times = fixed_times([float(v) for v in shown["start_us"]] + [float(v) for v in shown["gap_us"]])
    n = len(shown)
    rows = [
        [str(int(r.device)), _count(r.sample), times[i], times[n + i], str(r.host_modules) or NO_VALUE]
        for i, r in enumerate(shown.itertuples())
    ]
    columns = [
        Column("device"),
        Column("sample"),
        Column(f"from ({symbol})"),
        Column(f"idle ({symbol})"),
        Column("modules the host ran then", numeric=False, flexible=True),
    ]
    title = f"longest GPU idle stretches ({len(shown)} of {len(gaps)}; from: time into the pass):"
    return "\n".join([wrap_title(title, width), format_table(columns, rows, width)])


def worth_text(result: ProfileResult, top: int | None = 10, width: int = DEFAULT_WIDTH) -> str:
    """The ``top`` sampled calls by the time the GPU's limits say could be saved (``worth_optimizing``).

    Empty for a CPU-source result or one without samples; one line where the GPU's limits are unknown.
    """
    top = views.check_top(top)
    if not result.function_data or result.source == "cpu":
        return ""
    limits = views.device_limits(result.metadata)
    if limits is None:
        name = result.metadata.get(schema.META_GPU_NAME) or "this GPU"
        return f"worth optimizing: the limits of {name} are not known (aitune_dispatch/results/limits.py)"
    ranked = result.worth_optimizing(top=None)
    if ranked.empty:
        return "worth optimizing: no sampled call's work is known here (counting FLOPs needs torch)"
    shown = views.first_rows(ranked, top)
    symbol, times = fixed_times([float(v) for v in shown["kernel_us"]] + [float(v) for v in shown["worth_us"]])
    n = len(shown)
    rows = [
        [str(r.function_name), str(r.signature), _count(r.calls), times[i], _named(r.bound, NO_VALUE)]
        + [_share_cell(float(r.fraction_of_bound)), times[n + i]]
        for i, r in enumerate(shown.itertuples())
    ]
    columns = [
        Column("function", numeric=False, flexible=True),
        Column("signature", numeric=False, flexible=True),
        Column("calls"),
        Column(f"time ({symbol})"),
        Column("bound", numeric=False),
        Column("of bound"),
        Column(f"could save ({symbol})"),
    ]
    title = (
        f"worth optimizing ({len(shown)} of {len(ranked)} samples; could save = time x (1 - fraction of the "
        f"{limits.name}'s bound)):"
    )
    return "\n".join([wrap_title(title, width), format_table(columns, rows, width)])


def wrap_title(line: str, width: int = DEFAULT_WIDTH) -> str:
    """``line`` wrapped to ``width``, continuation lines indented (a long title or path kept whole)."""
    return "\n".join(textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False)) or line


class TextRenderer(Renderer):
    """The summary of a result as terminal text: a title, the summary table and coverage, the hints.

    What the CLI prints for a run or a saved result (``report``), and what a ``.txt`` file written
    with it holds. Not in ``reports.RENDERERS``: its width is the terminal's, not a file format's.

    Parameters
    ----------
    top_k:
        The most rows per table (:func:`summary_text`, the kernels, idle stretches and samples worth
        optimizing): a positive integer; None lists every row.
    width:
        The most characters per line.
    title:
        A first line (wrapped to ``width``, :func:`wrap_title`); None: no title.
    full_names:
        The kernel table shows each kernel's full name, folded onto as many lines as it takes, instead of
        its short name (:func:`kernels_text`).
    """

    extension = ".txt"

    def __init__(
        self, *, top_k: int | None = 10, width: int = DEFAULT_WIDTH, title: str | None = None, full_names: bool = False
    ) -> None:
        self.top_k, self.width, self.title = views.check_top(top_k, "top_k"), width, title
        self.full_names = full_names

    def render(self, result: ProfileResult) -> str:
        """The title, :func:`summary_text` and :func:`unattributed_text` (where there is any), one per line.

        Parameters
        ----------
        result:
            The result to summarise.

        Returns
        -------
        str
            The text, without a trailing newline.
        """
        parts = [] if self.title is None else [wrap_title(self.title, self.width)]
        parts.append(summary_text(result, self.top_k, self.width))
        hints = unattributed_text(result, width=self.width)
        if hints:
            parts.append(hints)
        kernels = kernels_text(result, self.top_k, self.width, self.full_names)
        if kernels:
            parts += ["", kernels]
        parts += ["", gpu_time_text(result, self.top_k, self.width)]
        worth = worth_text(result, self.top_k, self.width)
        if worth:
            parts += ["", worth]
        return "\n".join(parts)


def _change(before: float, after: float) -> str:
    if before > 0:
        return f"{100.0 * (after - before) / before:+.1f}%"
    return "new" if after > 0 else NO_VALUE


def comparison_text(
    table: pd.DataFrame, level: str, top: int | None = 20, width: int = DEFAULT_WIDTH, full_names: bool = False
) -> str:
    """One level of ``compare()``'s table (``function`` or ``kernel``) under a title, largest change first
    (the first ``top``; None: every row).

    Kernels go by their short name (``kernel_labels``; ``full_names``: the full name, folded), never cut
    below ``KERNEL_LEAST`` characters: where the line does not fit, the per-step column, then ``after``,
    then ``before`` are left out (the title says which).
    """
    top = views.check_top(top)
    rows_of_level = table[table["level"] == level]
    shown = views.first_rows(rows_of_level, top)
    n = len(shown)
    symbol, times = fixed_times([float(v) for column in ("before_us", "after_us") for v in shown[column]])
    _, deltas = fixed_times([float(v) for v in shown["delta_us"]], signed=True, like=symbol)
    noise = "step_delta_us" in shown and bool(shown["step_delta_us"].notna().any())
    kernels = []
    if level == "kernel":
        kernels = _kernel_cells(shown["kernel"], views.short_names(shown["kernel"]), full_names)
    rows = []
    for i, r in enumerate(shown.itertuples()):
        name = r.function_name if isinstance(r.function_name, str) else "(no functional call)"
        cells = [name] + ([kernels[i]] if level == "kernel" else [])
        cells += [times[i], times[n + i], deltas[i], _change(r.before_us, r.after_us)]
        if noise:
            cells.append(_step_interval(r.step_delta_us, r.step_delta_low_us, r.step_delta_high_us, r.outside_noise))
        rows.append(cells)
    columns = [Column("function", numeric=False, flexible=True)]
    if level == "kernel":
        columns.append(kernel_column("kernel", width, wrap=full_names))
    columns += [
        Column(f"before ({symbol})", drop=3),
        Column(f"after ({symbol})", drop=2),
        Column(f"delta ({symbol})"),
        Column("change"),
    ]
    if noise:
        columns.append(Column("per step, 95% (us)", drop=1))
    title = f"per {level}, largest change first ({len(shown)} of {len(rows_of_level)}){left_out(columns, rows, width)}:"
    text = wrap_title(title, width) + ("\n" + format_table(columns, rows, width) if rows else "\n(none)")
    if rows and noise:
        note = "* outside the noise: the step-to-step bootstrap interval of the change leaves out 0"
        text += "\n" + wrap_title(note, width)
    elif rows:
        note = "no noise estimate: a side has one step (record several: recording(...) with rec.step())"
        text += "\n" + wrap_title(note, width)
    return text


def _step_interval(delta: float, low: float, high: float, outside: object) -> str:
    """The change of the mean per step with its interval, starred where outside the noise."""
    if delta != delta:  # NaN: no steps for this row
        return NO_VALUE
    return f"{delta:+.1f} [{low:+.1f}, {high:+.1f}]" + (" *" if outside is not pd.NA and bool(outside) else "")


def mismatch_warning(a: ProfileResult, b: ProfileResult) -> str | None:
    """A one-line warning when two results come from different activity sources or devices, else None.

    Devices differ when one ran on CUDA and the other on the CPU, or both name their GPU and the names differ.
    """

    def where(result: ProfileResult) -> str:
        device = result.metadata.get(schema.META_GPU_NAME) or result.metadata.get(schema.META_DEVICE)
        return f"{result.source} on {device}" if device and device != result.source else result.source

    sources_differ = a.source.split("/")[0] != b.source.split("/")[0]
    devices_differ = a.metadata.get(schema.META_DEVICE) != b.metadata.get(schema.META_DEVICE)
    gpus = (a.metadata.get(schema.META_GPU_NAME), b.metadata.get(schema.META_GPU_NAME))
    gpus_differ = all(gpus) and gpus[0] != gpus[1]
    if sources_differ or devices_differ:
        why = "kernel names and times differ by nature (CUDA kernels vs cpu:: ops)"
    elif gpus_differ:
        why = "another GPU runs other kernels (names, tile sizes) at other speeds"
    else:
        return None
    return f"comparing {where(a)} with {where(b)}: {why}, so the difference is not a like-for-like change"


def _flag(value: object, true: str = "yes", false: str = "no") -> str:
    """``true`` / ``false`` text for a boolean cell, ``-`` where there is none (NA, NaN, None)."""
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return NO_VALUE
    return true if bool(value) else false


def _ratio(value: float) -> str:
    return NO_VALUE if value is None or math.isnan(value) else f"{value:,.2f}x"


def _error(value: float) -> str:
    """An error with a fixed mantissa (``1.2e-06``: the points align), ``0`` where there is none."""
    if value is None or math.isnan(value):
        return NO_VALUE
    return "0" if value == 0 else f"{value:.1e}"


def bench_text(table: pd.DataFrame, width: int = DEFAULT_WIDTH) -> str:
    """``benchmark()``'s table as text: one row per (function, sample, implementation), times in one unit."""
    if table.empty:
        return "(no samples replayed)"
    n = len(table)
    values = [float(v) for column in ("recorded_us_per_call", "us_per_call", "replay_iqr_us") for v in table[column]]
    symbol, times = fixed_times(values)
    rows = [
        [
            str(r.function_name),
            _count(r.sample),
            str(r.implementation),
            _count(r.calls),
            times[i],
            times[n + i],
            times[2 * n + i],
            _ratio(float(r.speedup)),
            _flag(r.kernels_match, "same", "differ"),
            _error(float(r.max_abs_error)),
            _flag(r.ok),
        ]
        for i, r in enumerate(table.itertuples())
    ]
    columns = [
        Column("function", numeric=False, flexible=True),
        Column("sample"),
        Column("variant", numeric=False, flexible=True),
        Column("calls"),
        Column(f"recorded ({symbol})"),
        Column(f"replayed ({symbol})"),
        Column(f"IQR ({symbol})"),
        Column("speedup"),
        Column("kernels", numeric=False),
        Column("max error"),
        Column("ok", numeric=False),
    ]
    return format_table(columns, rows, width)


def weighted_text(totals: pd.DataFrame, width: int = DEFAULT_WIDTH) -> str:
    """``weighted_totals()`` as text: per function and implementation, Σ calls × time per call."""
    if totals.empty:
        return "(no samples replayed)"
    symbol, times = fixed_times([float(v) for v in totals["weighted_us"]])
    rows = [
        [str(r.function_name), str(r.implementation), _count(r.samples), _count(r.calls), _count(r.fallbacks), t]
        + [_ratio(float(r.speedup))]
        for r, t in zip(totals.itertuples(), times)
    ]
    columns = [
        Column("function", numeric=False, flexible=True),
        Column("variant", numeric=False, flexible=True),
        Column("samples"),
        Column("calls"),
        Column("fallbacks"),
        Column(f"weighted ({symbol})"),
        Column("speedup"),
    ]
    return format_table(columns, rows, width)


BENCH_CSV_DIGITS = {"recorded_us_per_call": 3, "us_per_call": 3, "replay_iqr_us": 3, "speedup": 6}


def bench_csv_frame(table: pd.DataFrame) -> pd.DataFrame:
    """``benchmark()``'s table rounded for CSV: times to the ns, speedups to 6 places, errors to 6 digits."""
    frame = table.round(BENCH_CSV_DIGITS)
    frame["max_abs_error"] = [v if v != v else float(f"{v:.6g}") for v in frame["max_abs_error"].astype(float)]
    return frame
