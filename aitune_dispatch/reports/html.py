"""The self-contained HTML report: one file, inline CSS, JS and SVG, the chart data embedded as JSON.

The page is a sequence of section functions of one :class:`Page` (the result, its summary, one time unit,
the function colours), so a section is added without touching the others; no torch import (sample tensors
are read by duck typing). Sections, charts and the window widths the layout was fitted to:
``docs/design.md``, "The HTML report".
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .. import schema
from ..results import views
from ..results.views import UNATTRIBUTED, module_tree
from ..schema import seconds_key
from ..tensors import is_tensor_like, size_text, tensor_shape, tensor_strides
from ._html_assets import CSS, JS
from .base import Renderer, TimeUnit, human_time, short_kernel_name, time_unit
from .ranks import ranks_section
from .sample_time import sample_time_section

if TYPE_CHECKING:
    from ..results import ProfileResult

KERNEL_ROWS = 15  # shown at once; up to MORE_KERNEL_ROWS more behind "show more"
MORE_KERNEL_ROWS = 200
MODULE_ROWS = 300
MAX_SAMPLES_SHOWN = 50
MAX_VALUE_CHARS = 160
UNATTRIBUTED_ROWS = 12
ALL_FUNCTIONS = 1 << 30
NO_VALUE = "\u2014"
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6")
GREY = "#b8bec7"


def esc(value: Any) -> str:
    """Text as HTML, quotes included."""
    return html.escape(str(value), quote=True)


def _number(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NO_VALUE
    return f"{int(round(float(value))):,}" if digits == 0 else f"{float(value):,.{digits}f}"


def tensor_text(value: Any) -> str:
    """``float32[4, 64] stride (64, 1)``: dtype, shape and strides of a tensor-like value."""
    dtype = str(value.dtype).removeprefix("torch.")
    shape = ", ".join(map(size_text, tensor_shape(value)))
    stride = tensor_strides(value)
    text = f"{dtype}[{shape}]"
    return text if stride is None else f"{text} stride ({', '.join(map(str, stride))}{',' if len(stride) == 1 else ''})"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_VALUE_CHARS else text[: MAX_VALUE_CHARS - 1] + "\u2026"


def value_text(value: Any) -> str:
    """A sample argument as short text: tensors as dtype/shape/stride, containers element-wise."""
    if is_tensor_like(value):
        return tensor_text(value)
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        inner = ", ".join(value_text(item) for item in value)
        return _clip(f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})")
    if isinstance(value, dict):
        return _clip("{" + ", ".join(f"{key!r}: {value_text(item)}" for key, item in value.items()) + "}")
    return _clip(repr(value))


@dataclass(frozen=True)
class Page:
    """One report's shared state: the result, its full summary (not a top-k), the one time unit of every
    chart and table, and ``function_name -> colour`` shared by the bar chart, the summary table and the icicle.
    """

    result: ProfileResult
    title: str
    summary: pd.DataFrame
    unit: TimeUnit
    colors: Mapping[str, str]

    @classmethod
    def of(cls, result: ProfileResult, title: str) -> Page:
        """The page state of ``result``: its full summary and a unit fitting its largest function."""
        summary = result.describe(top_k=ALL_FUNCTIONS)
        largest = max([result.total_us - result.attributed_us, *summary["time_spent_us"].astype(float)], default=0.0)
        return cls(result, title, summary, time_unit(largest), function_colors(summary))

    @property
    def total_us(self) -> float:
        """All kernel time of the run: the base of every share on the page."""
        return self.result.total_us

    def share(self, us: float) -> str:
        """``us`` as a share of all kernel time, ``12.3%``."""
        return f"{100.0 * us / self.total_us:,.1f}%" if self.total_us > 0 else NO_VALUE

    def time(self, us: float) -> str:
        """``us`` in the page unit, no symbol (µs: 2 decimals below 10; ms and s: :meth:`TimeUnit.decimals`)."""
        return self.unit(us, 2 if self.unit.scale == 1.0 and us < 10 else self.unit.decimals(us))

    def basis(self) -> str:
        """The sentence that states the unit and the share base, shown under each section title."""
        return f"times in {self.unit.symbol}; shares of all kernel time ({human_time(self.total_us)})"


Section = Callable[[Page], str]


def function_colors(summary: pd.DataFrame) -> dict[str, str]:
    """One palette colour per function, in order of kernel time (shared by both charts and the table)."""
    return {str(name): PALETTE[rank % len(PALETTE)] for rank, name in enumerate(summary["function_name"])}


def report_data(result: ProfileResult, summary: pd.DataFrame, unit: TimeUnit | None = None) -> dict[str, Any]:
    """What the inline script draws: bar rows, function colours, the module tree and the page unit."""
    unit = unit or Page.of(result, "").unit
    return {
        "bars": views.bar_rows(summary, result.total_us, result.attributed_us),
        "function_colors": function_colors(summary),
        "tree": module_tree(result),
        "unit": {"symbol": unit.symbol, "scale": unit.scale},
        "total_us": result.total_us,
    }


def embed_json(value: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>``, ``<!--`` or ``&``)."""
    text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        text = text.replace(raw, f"\\u{ord(raw):04x}")
    return text


def _table(headers: Iterable[tuple[str, bool]], rows: Iterable[Iterable[str]], css: str = "") -> str:
    """An HTML table; ``headers`` are (title, numeric), cells are HTML already escaped."""
    heads = list(headers)
    head = "".join(f'<th class="num">{esc(t)}</th>' if num else f"<th>{esc(t)}</th>" for t, num in heads)
    cell = '<td class="num">{}</td>', "<td>{}</td>"
    body = "".join(
        "<tr>" + "".join(cell[0 if num else 1].format(c) for c, (_, num) in zip(row, heads)) + "</tr>" for row in rows
    )
    klass = f' class="{css}"' if css else ""
    return f"<table{klass}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _code(value: Any, title: str | None = None) -> str:
    hover = f' title="{esc(title)}"' if title else ""
    return f"<code{hover}>{esc(value)}</code>"


_BREAK_AFTER = (".", "_", "::", ", ", "<")
BREAK_CHARS = 24  # names longer than this may wrap inside table cells at any window width


def _breakable(value: Any, title: str | None = None, css: str | None = None) -> str:
    """Code text that may wrap after ``.``, ``_``, ``::``, ``, `` and ``<`` (names, ops, kernels), nowhere else."""
    text = esc(value)
    for mark in _BREAK_AFTER:
        text = text.replace(esc(mark), f"{esc(mark)}<wbr>")
    hover = f' title="{esc(title)}"' if title else ""
    kind = f' class="{css}"' if css else ""
    return f"<code{hover}{kind}>{text}</code>"


def _maybe_code(value: Any) -> str:
    """A name in a table cell (``—`` for none); short ones stay whole in a wide window (``code.name``)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NO_VALUE
    return _breakable(value) if len(str(value)) > BREAK_CHARS else _breakable(value, css="name")


def _section(section_id: str, title: str, note: str, body: str) -> str:
    return f'<section id="{section_id}"><h2>{esc(title)} <small>{esc(note)}</small></h2>{body}</section>'


def _card(label: str, value: str, note: str, meter: float | None = None) -> str:
    bar = "" if meter is None else f'<div class="meter"><div class="bar" style="width:{100 * meter:.1f}%"></div></div>'
    return (
        f'<div class="card"><div class="label">{esc(label)}</div><div class="value">{esc(value)}</div>'
        f'<div class="note">{esc(note)}</div>{bar}</div>'
    )


def _swatch(color: str) -> str:
    return f'<span class="swatch" style="background:{color}"></span>'


def header_section(page: Page) -> str:
    """The title and the run in one line: device, activity source, torch."""
    result = page.result
    device = {"cuda": "CUDA", "cpu": "CPU"}.get(str(result.metadata.get(schema.META_DEVICE, "")), "")
    parts = [f"{device} run" if device else "run", f"{result.source} activity source"]
    if result.metadata.get(schema.META_TORCH):
        parts.append(f"torch {result.metadata[schema.META_TORCH]}")
    return f"<header><h1>{esc(page.title)}</h1><p>{esc(' · '.join(parts))}</p></header>"


def cards_section(page: Page) -> str:
    """Headline numbers: kernel time, coverage, distinct kernels, functions, ops, modules."""
    result, head = page.result, views.headline(page.result)
    known = not math.isnan(head.coverage)
    kinds = ", ".join(f"{count:,} {kind}" for kind, count in views.activity_kinds(result).items()) or "none"
    cards = [
        _card("kernel time", human_time(result.total_us), f"{result.activity.num_rows:,} activity rows ({kinds})"),
        _card(
            "coverage",
            f"{head.coverage:.1%}" if known else NO_VALUE,
            f"{human_time(result.attributed_us)} in a module and a functional call",
            head.coverage if known else None,
        ),
        _card("kernels", f"{head.kernels:,}", "distinct names"),
        _card("functions", f"{len(page.summary):,}", f"{result.calls.num_rows:,} functional calls"),
        _card("aten ops", f"{result.ops.num_rows:,}", "dispatched in the recorded pass"),
        _card("modules", f"{result.modules.num_rows:,}", f"{result.module_calls.num_rows:,} forwards"),
    ]
    return f'<div class="cards">{"".join(cards)}</div>'


def _summary_rows(page: Page) -> list[list[str]]:
    rows = [
        [
            f'<span class="fn">{_swatch(page.colors[r.function_name])}{_maybe_code(r.function_name)}</span>',
            _number(r.calls, 0),
            _number(r.num_distinct_samples, 0),
            _number(r.num_modules, 0),
            page.time(float(r.time_spent_us)),
            page.share(float(r.time_spent_us)),
            _number(float(r.tensor_size_MB), 3),
        ]
        for r in page.summary.itertuples()
    ]
    rest = page.result.total_us - page.result.attributed_us
    if rest > 1e-9:
        label = f'<span class="fn">{_swatch(GREY)}<em>{esc(UNATTRIBUTED)}</em></span>'
        rows.append([label, NO_VALUE, NO_VALUE, NO_VALUE, page.time(rest), page.share(rest), NO_VALUE])
    return rows


def functions_section(page: Page) -> str:
    """Kernel time per functional call: the bar chart beside the summary table, one unit, one share base."""
    headers = [
        ("function", False),
        ("calls", True),
        ("samples", True),
        ("modules", True),
        (f"time ({page.unit.symbol})", True),
        ("share", True),
        ("tensors (MB)", True),
    ]
    bars = _section("functions", "Kernel time per functional call", page.basis(), '<div id="bar-chart"></div>')
    note = "describe(); samples = distinct inputs; the last row is what no functional call encloses"
    table = _section("summary", "Summary", note, _table(headers, _summary_rows(page), "summary"))
    return f'<div class="grid2 wide-right row">{bars}{table}</div>'


def _kernel_rows(page: Page, table: pd.DataFrame) -> list[list[str]]:
    return [
        [
            _breakable(short_kernel_name(r.kernel), title=r.kernel),
            _maybe_code(r.op),
            _maybe_code(r.function_name),
            _maybe_code(r.module),
            _number(r.calls, 0),
            page.time(float(r.total_us)),
            page.time(float(r.mean_us)),
            page.share(float(r.total_us)),
        ]
        for r in table.itertuples()
    ]


def kernels_section(page: Page) -> str:
    """The top kernels: shortened name (full name on hover), op, functional call, module, calls, time, share."""
    table = views.kernel_table(page.result)
    headers = [
        ("kernel", False),
        ("op", False),
        ("functional call", False),
        ("module", False),
        ("calls", True),
        (f"time ({page.unit.symbol})", True),
        (f"mean ({page.unit.symbol})", True),
        ("share", True),
    ]
    if table.empty:
        return _section("kernels", "Kernels", page.basis(), "<p>No kernels were recorded.</p>")
    body = _table(headers, _kernel_rows(page, table.head(KERNEL_ROWS)), "kernels")
    rest = table.iloc[KERNEL_ROWS : KERNEL_ROWS + MORE_KERNEL_ROWS]
    if len(rest):
        more = f"{len(rest):,} more" + (
            f" (of {len(table) - KERNEL_ROWS:,})" if len(table) > KERNEL_ROWS + len(rest) else ""
        )
        hidden = _table(headers, _kernel_rows(page, rest), "kernels-more")
        body += f'<details class="more"><summary>{esc(more)}</summary>{hidden}</details>'
    note = f"{len(table):,} (kernel, op, call, module) groups, largest first; layers grouped; {page.basis()}"
    return _section("kernels", "Kernels", note, body)


def _members(row: Any, page: Page) -> str:
    if row.instances <= 1:
        return _code(row.pattern)
    items = "".join(f"<li>{_code(name)} {esc(page.time(us))}</li>" for name, us in row.members)
    head = f'{_code(row.pattern)} <span class="note">\u00d7{row.instances}</span>'
    return f"<details><summary>{head}</summary><ul>{items}</ul></details>"


def _text_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None  # a missing string is NaN in pandas' str dtype


def modules_section(page: Page) -> str:
    """The module table (repeated layers grouped, expandable) and the icicle of the module tree."""
    table = views.module_table(page.result)
    shown = table.head(MODULE_ROWS)
    rows = [
        [
            f'<div class="tree" style="padding-left:{min(int(r.depth), 12) * 14}px">{_members(r, page)}</div>',
            esc(r.module_type),
            _number(r.forwards, 0),
            page.time(float(r.total_us)),
            page.share(float(r.total_us)),
            _maybe_code(_text_or_none(r.top_function)),
            page.time(float(r.self_us)),
            _maybe_code(_text_or_none(r.top_self_function)),
        ]
        for r in shown.itertuples()
    ]
    headers = [
        ("module", False),
        ("type", False),
        ("forwards", True),
        (f"time ({page.unit.symbol})", True),
        ("share", True),
        ("top call in time", False),
        (f"own ({page.unit.symbol})", True),
        ("top call in own", False),
    ]
    more = f" (first {len(shown)} of {len(table):,} rows)" if len(table) > len(shown) else ""
    note = (
        "time includes submodules, own is what the module launched directly; each top call is the "
        f"functional call with the most of that time; {page.basis()}{more}"
    )
    body = _table(headers, rows, "modules") if rows else "<p>No modules were profiled.</p>"
    return _section("module-table", "Modules", note, body) + _icicle_section()


def _icicle_section() -> str:
    legend = (
        '<div class="legend"><span><span class="swatch" style="background:#c9d4e1"></span>module (width includes '
        'submodules)</span><span><span class="swatch" style="background:#f28e2b"></span>functional call made '
        'directly in the module (colour as in the bar chart)</span><span><span class="swatch" '
        'style="background:#b8bec7"></span>not attributed: outside any functional call or profiled module</span></div>'
    )
    return (
        '<section id="modules"><h2>Module tree <small>kernel time; boxes show local names, hover for the full '
        f'name; click a box to zoom in, again to zoom out</small></h2>{legend}<div id="icicle"></div></section>'
    )


def _coverage_sentence(page: Page) -> str:
    result = page.result
    if result.activity.num_rows == 0:
        return "Nothing ran in the recorded pass."
    rest = result.total_us - result.attributed_us
    return (
        f"{human_time(rest)} of {human_time(result.total_us)} kernel time ({page.share(rest)}) was launched outside "
        "a profiled module or outside any functional call, so the spec's profiling_df leaves it out; "
        "ProfileResult.unattributed() lists it."
    )


def coverage_section(page: Page) -> str:
    """The largest unattributed ops with their modules, why they are unattributed and what to do."""
    table = views.unattributed_table(page.result, top=UNATTRIBUTED_ROWS)
    rows = [
        [
            _maybe_code(r.op),
            _maybe_code(r.module),
            _number(r.kernels, 0),
            page.time(float(r.total_us)),
            page.share(float(r.total_us)),
            f'<div>{esc(r.why)}</div><div class="note">{esc(r.hint)}</div>',
        ]
        for r in table.itertuples()
    ]
    headers = [
        ("op", False),
        ("module", False),
        ("kernels", True),
        (f"time ({page.unit.symbol})", True),
        ("share", True),
        ("why, and what to do", False),
    ]
    body = f"<p>{esc(_coverage_sentence(page))}</p>"
    body += _table(headers, rows, "coverage") if rows else "<p>Every kernel was attributed.</p>"
    return _section("coverage", "Coverage", "the largest unattributed ops", body)


def _lines(texts: Iterable[str]) -> str:
    cells = "".join(f"<div>{_code(text)}</div>" for text in texts)
    return f'<div class="args">{cells or NO_VALUE}</div>'


def _split_sample(sample: Any) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(sample, (tuple, list)) and len(sample) == 2 and isinstance(sample[1], Mapping):
        args, kwargs = sample
        return (list(args) if isinstance(args, (tuple, list)) else [args]), dict(kwargs)
    return [sample], {}


def _sample_rows(entries: list[tuple[int, Any]]) -> list[list[str]]:
    rows = []
    for index, (count, sample) in enumerate(entries[:MAX_SAMPLES_SHOWN]):
        args, kwargs = _split_sample(sample)
        kw_texts = (f"{key}={value_text(value)}" for key, value in kwargs.items())
        rows.append([str(index), _number(count, 0), _lines(map(value_text, args)), _lines(kw_texts)])
    return rows


def _samples_block(name: str, entries: list[tuple[int, Any]], is_open: bool) -> str:
    calls = sum(int(count) for count, _ in entries)
    note = f"{calls:,} calls, {len(entries):,} distinct samples"
    if len(entries) > MAX_SAMPLES_SHOWN:
        note += f" (first {MAX_SAMPLES_SHOWN} shown)"
    headers = [("#", True), ("calls", True), ("positional arguments", False), ("keyword arguments", False)]
    head = f'<summary>{_code(name)}<span class="note">{esc(note)}</span></summary>'
    return f"<details{' open' if is_open else ''}>{head}{_table(headers, _sample_rows(entries))}</details>"


def _seconds(text: str) -> str:
    try:
        return human_time(float(text) * 1e6)
    except ValueError:
        return text


def _per_device(text: str) -> str:
    """``0: NVIDIA H200, 1: NVIDIA H200`` from the ``gpu_properties`` JSON."""
    devices = sorted(json.loads(text).items())
    return ", ".join(f"{device}: {facts.get(schema.META_GPU_NAME, '?')}" for device, facts in devices)


_TRACERS = {"native": "native (a C++ RecordFunction callback)", "python": "Python (a TorchDispatchMode)"}
_FUNCTIONS = {"functional": "torch.nn.functional calls", "all": 'functional and torch-level calls (functions="all")'}
_DECODERS = {
    "native": "native (compiled C decoder)",
    "python": "cupti-python",
    "none": "none (the CPU activity source reads no CUPTI records)",
}
METADATA_WORDS: dict[str, tuple[str, Callable[[str], str]]] = {
    schema.META_DEVICE: ("device", lambda v: {"cuda": "CUDA GPU", "cpu": "CPU (aten ops timed on the host)"}.get(v, v)),
    schema.META_GPU_NAME: ("GPU", str),
    schema.META_GPU_CAPABILITY: ("compute capability", str),
    schema.META_GPU_MEMORY: ("GPU memory", lambda v: f"{int(v) / 2**30:,.1f} GiB" if v.isdigit() else v),
    schema.META_TORCH: ("PyTorch", str),
    schema.META_ALLOW_TF32: ("float32 matmuls on TF32 cores", lambda v: {"True": "yes", "False": "no"}.get(v, v)),
    schema.META_TRACER: ("aten op tracer", lambda v: _TRACERS.get(v, v)),
    schema.META_FUNCTIONS: ("attributed calls", lambda v: _FUNCTIONS.get(v, v)),
    schema.META_GPU_SMS: ("streaming multiprocessors", str),
    schema.META_DECODER: ("CUPTI record decoder", lambda v: _DECODERS.get(v, v)),
    schema.META_THREADS_TRACED: ("threads traced", str),
    schema.META_CORRELATION_PUSHES: ("op and scope ids pushed to CUPTI", str),
    seconds_key("warmup"): ("the warm-up passes", _seconds),
    seconds_key("start"): ("starting the activity collector and the tracer", _seconds),
    seconds_key("pass"): ("the recorded pass", _seconds),
    seconds_key("flush"): ("removing the tracer, flushing activity records", _seconds),
    seconds_key("decode"): ("decoding activity records", _seconds),
    seconds_key("join"): ("joining kernels to ops, calls and modules", _seconds),
    schema.META_CLOCK_OFFSET: ("activity clock minus host clock", lambda v: f"{v} ns"),
    schema.META_TICKS_PER_NS: ("activity clock ticks per ns", str),
    schema.GPU_DEVICES_KEY: ("GPUs used", str),
    schema.GPU_PROPERTIES_KEY: ("GPU per device", _per_device),
    schema.META_INDUCTOR: ("torch.compile (Inductor) kernels", str),
    schema.META_COMPILED_KERNELS: ("activity rows attributed from Inductor", str),
    schema.META_GRAPH_CAPTURE: ("CUDA graph captures", str),
    schema.META_GRAPH_KERNELS: ("activity rows replayed by CUDA graphs", str),
    schema.RANK_KEY: ("rank", str),
    schema.WORLD_SIZE_KEY: ("world size", str),
    schema.HOST_KEY: ("host", str),
    schema.LOCAL_RANK_KEY: ("local rank", str),
    schema.DISTRIBUTED_BACKEND_KEY: ("torch.distributed backend", str),
    schema.MERGED_RANKS_KEY: ("merged ranks", str),
    schema.RANK_METADATA_KEY: ("each rank's metadata", lambda v: f"{len(json.loads(v))} ranks; kept in the result"),
}


def metadata_rows(result: ProfileResult) -> list[tuple[str, str]]:
    """``(label, value)`` pairs describing the run in words, known keys first, then any others raw."""
    metadata = result.metadata
    items = [("activity source", result.source)]
    known = [key for key in METADATA_WORDS if key in metadata]
    items += [(METADATA_WORDS[key][0], METADATA_WORDS[key][1](str(metadata[key]))) for key in known]
    items += [(str(key), str(value)) for key, value in metadata.items() if key not in METADATA_WORDS]
    items += [
        ("dropped activity records", f"{result.dropped_records:,}"),
        ("result schema", f"version {schema.SCHEMA_VERSION}"),
    ]
    return items


def run_section(page: Page) -> str:
    """The run in words: device, torch, tracer, phase times; then the run's warnings."""
    rows = [[esc(label), esc(value)] for label, value in metadata_rows(page.result)]
    rows += [['<span class="warn">warning</span>', esc(text)] for text in page.result.warnings]
    return _section("metadata", "Run", "how this result was recorded", _table([("", False), ("", False)], rows, "kv"))


def samples_section(page: Page) -> str:
    """The distinct input samples of every function, as dtype[shape] stride."""
    result, summary = page.result, page.summary
    order = [name for name in summary["function_name"] if name in result.function_data]
    order += [name for name in result.function_data if name not in set(order)]
    blocks = [_samples_block(name, result.function_data[name], pos == 0) for pos, name in enumerate(order)]
    title = "<h2>Distinct input samples <small>per function; tensors as dtype[shape] stride</small></h2>"
    return f'<section id="samples">{title}{"".join(blocks) or "<p>No samples were collected.</p>"}</section>'


SECTIONS: tuple[Section, ...] = (
    header_section,
    cards_section,
    functions_section,
    kernels_section,
    modules_section,
    coverage_section,
    lambda page: ranks_section(page.result),  # merged results only: per rank, per function across ranks
    lambda page: sample_time_section(page.result, unit=page.unit),  # the most expensive distinct samples
    samples_section,
    run_section,
)


class HtmlRenderer(Renderer):
    """One self-contained HTML page (opens offline): tables, charts, samples and metadata.

    Parameters
    ----------
    title:
        The page title.
    sections:
        The section functions, in page order (default ``SECTIONS``); each takes the :class:`Page`
        and returns HTML.
    """

    extension = ".html"
    extensions = (".html", ".htm")
    default_name = "report.html"

    def __init__(self, *, title: str = "aitune_dispatch profile", sections: Sequence[Section] = SECTIONS) -> None:
        self.title = title
        self.sections = tuple(sections)

    def render(self, result: ProfileResult) -> str:
        """The whole page.

        Parameters
        ----------
        result:
            The result to render.

        Returns
        -------
        str
            One HTML document with its CSS, script and data inline.
        """
        page = Page.of(result, self.title)
        body = "".join(section(page) for section in self.sections)
        data = embed_json(report_data(result, page.summary, page.unit))
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(self.title)}</title><style>{CSS}</style></head><body><main>{body}</main>"
            f'<script type="application/json" id="report-data">{data}</script>'
            f"<script>{JS}</script></body></html>\n"
        )


NOTEBOOK_CSS = (
    ".aitune-nb table{border-collapse:collapse;font-size:12.5px}.aitune-nb td,.aitune-nb th{padding:3px 8px;"
    "border-bottom:1px solid #e3e7ed;text-align:left}.aitune-nb td.num,.aitune-nb th.num{text-align:right}"
    ".aitune-nb .note{color:#5f6b7a}"
)
NOTEBOOK_ROWS = 8


def notebook_html(result: ProfileResult) -> str:
    """The fragment (no script, inline style) Jupyter shows for a ``ProfileResult``: headline, functions, coverage."""
    page = Page.of(result, "")
    head = views.headline(result)
    coverage = NO_VALUE if math.isnan(head.coverage) else f"{head.coverage:.1%}"
    device = f" on {head.device}" if head.device else ""
    title = (
        f'<b>ProfileResult</b> <span class="note">{esc(result.source)}{esc(device)} \u00b7 '
        f"{head.activity_rows:,} activity rows \u00b7 {head.kernels:,} distinct kernels \u00b7 "
        f"{esc(human_time(result.total_us))} kernel time \u00b7 coverage {coverage}</span>"
    )
    headers = [("function", False), ("calls", True), (f"time ({page.unit.symbol})", True), ("share", True)]
    rows = [
        [_code(r.function_name), _number(r.calls, 0), page.time(float(r.time_spent_us)), page.share(r.time_spent_us)]
        for r in page.summary.head(NOTEBOOK_ROWS).itertuples()
    ]
    table = _table(headers, rows, "summary") if rows else "<p>No functional call launched a kernel.</p>"
    missing = views.unattributed_table(result, top=3)
    notes = "".join(
        f"<li>{_maybe_code(r.op)} in {_maybe_code(r.module)}: {esc(human_time(r.total_us))} "
        f'({page.share(r.total_us)}) <span class="note">{esc(r.hint)}</span></li>'
        for r in missing.itertuples()
    )
    unattributed = f"<p>Not attributed:</p><ul>{notes}</ul>" if notes else ""
    return f'<div class="aitune-nb"><style>{NOTEBOOK_CSS}</style><p>{title}</p>{table}{unattributed}</div>'


def write_report(result: ProfileResult, path: str | Path, *, title: str = "aitune_dispatch profile") -> Path:
    """Write the self-contained HTML report of ``result``.

    Parameters
    ----------
    result:
        The result to render (a fresh one or one loaded with ``aitune_dispatch.load``).
    path:
        The file to write; it must end in ``.html`` (or ``.htm``). Parent folders are created.
    title:
        The page title.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    return HtmlRenderer(title=title).write(result, path)
