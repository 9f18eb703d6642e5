"""The self-contained HTML report: one file, inline CSS, JS and SVG, the chart data embedded as JSON.

The page is a sequence of section functions of one :class:`Page` (the result, its summary, one time unit,
the function colours), so a section is added without touching the others. Each section gathers its rows
from the views here and lays them out in its Jinja2 template (``reports/templates/<section>.html.j2``,
shared pieces in ``_macros.html.j2``); no torch import (sample tensors are read by duck typing).
Sections, charts and the window widths the layout was fitted to:
``docs/design.md``, "The HTML report".
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .. import schema
from ..results import views
from ..results.views import UNATTRIBUTED, module_tree
from ..schema import seconds_key
from ..tensors import is_tensor_like, size_text, tensor_shape, tensor_strides
from . import roofline_plot, templating
from ._html_assets import CSS, JS
from .base import Renderer, TimeUnit, human_time, kernel_labels, time_unit
from .ranks import ranks_section
from .sample_time import sample_time_section
from .templating import NO_VALUE, missing, render

if TYPE_CHECKING:
    from ..results import ProfileResult

ROLLUP_ROWS = 15  # kernel names shown at once; up to MORE_KERNEL_ROWS more behind "show more"
KERNEL_ROWS = 15  # (kernel, op, call, module) groups shown at once; up to MORE_KERNEL_ROWS more likewise
MORE_KERNEL_ROWS = 200
MODULE_ROWS = 300
MAX_SAMPLES_SHOWN = 50
MAX_VALUE_CHARS = 160
UNATTRIBUTED_ROWS = 12
IDLE_GAP_ROWS = 12  # the longest idle gaps shown; up to MORE_KERNEL_ROWS more behind "show more"
IDLE_GAP_MIN_US = 5.0  # shorter gaps are launch latency, not worth a row
HOST_BOUND_BELOW = 0.5  # a device busy for less of the pass than this waited on the host most of it
COMPUTE_BOUND_FROM = 0.9  # ... and one busy for at least this much was seldom kept waiting
PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#86bcb6")
GREY = "#b8bec7"


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
        summary = result.describe(top_k=None)
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

    @functools.cached_property
    def gpu(self) -> GpuTime:
        """The devices' busy and idle time in the profiled passes (computed once, for the card and the section)."""
        return GpuTime.of(self.result)


def percent(share: float) -> str:
    """A share (0..1) as the page writes it: ``2.9%``.

    Parameters
    ----------
    share:
        A fraction, ``busy_share`` of ``views.device_busy``.

    Returns
    -------
    str
        One decimal and a percent sign; ``—`` where missing.
    """
    return NO_VALUE if missing(share) else f"{100.0 * float(share):.1f}%"


def busy_reading(share: float) -> tuple[str, str]:
    """What a device's busy share says about the pass: waiting on the host (launch-bound) or not.

    Parameters
    ----------
    share:
        The device's busy time over the passes' wall time (0..1).

    Returns
    -------
    tuple of str
        The verdict (``launch-bound``) and what it means, for the card and the section's first sentence.
    """
    if share < HOST_BOUND_BELOW:
        return "launch-bound", "the GPU waited on the host for most of it"
    if share < COMPUTE_BOUND_FROM:
        return "partly launch-bound", "the GPU waited on the host for part of it"
    return "compute-bound", "the GPU was busy for nearly all of it"


@dataclass(frozen=True)
class GpuTime:
    """Each device's busy and idle time in the profiled passes, or why the result has none.

    ``devices`` and ``streams`` are the per-device and per-stream rows of ``views.device_busy``, ``gaps``
    the longest rows of ``views.idle_gaps``; ``absent`` is the plain sentence shown instead of figures
    where there are none to show (the CPU activity source, no device activity, no pass times).
    """

    devices: list[Any]
    streams: list[Any]
    gaps: Capped
    absent: str
    absent_note: str = ""  # the same, in a few words, for the card

    @classmethod
    def of(cls, result: ProfileResult) -> GpuTime:
        """The busy and idle time of ``result``'s devices."""
        busy = views.device_busy(result)
        nothing = Capped([], [], 0)
        if busy.empty:
            cpu = result.source == "cpu" or str(result.metadata.get(schema.META_DEVICE, "")) == "cpu"
            why = (
                f"No GPU activity: this result's activity source is {result.source}, which times aten ops on the "
                'host, so there is no GPU busy or idle time to show. Profile with device="cuda" to see them.'
                if cpu
                else "No device activity was recorded in the profiled passes, so there is no busy or idle time to show."
            )
            note = "no GPU activity: the CPU activity source times ops on the host" if cpu else "no device activity"
            return cls([], [], nothing, why, note)
        if not (busy["wall_us"] > 0).any():
            why = "The result recorded no module call times, so the passes' wall time, and the busy share, is unknown."
            return cls([], [], nothing, why, "no pass times recorded")
        gaps = Capped.of(views.idle_gaps(result, min_gap_us=IDLE_GAP_MIN_US), IDLE_GAP_ROWS, MORE_KERNEL_ROWS)
        per_device = busy["stream"].isna()
        return cls(list(busy[per_device].itertuples()), list(busy.itertuples()), gaps, "")

    def card(self) -> Card:
        """The headline card: the busy share of the pass (the range where several devices ran) and its reading."""
        if self.absent:
            return Card("GPU busy", NO_VALUE, self.absent_note, id="card-gpu-busy")
        shares = [float(row.busy_share) for row in self.devices]
        low, high = min(shares), max(shares)
        value = percent(low) if len(shares) == 1 else f"{percent(low)}\u2013{percent(high)}"
        wall = human_time(float(self.devices[0].wall_us))
        idle = human_time(max(float(row.idle_us) for row in self.devices))
        gpus = "" if len(shares) == 1 else f" on the idlest of {len(shares)} GPUs"
        note = f"{busy_reading(low)[0]}: idle {idle} of the passes' {wall}{gpus}"
        return Card("GPU busy", value, note, low, id="card-gpu-busy")

    def sentence(self) -> str:
        """The section's first line: how busy each device was, what that says, and the tracer's caveat."""
        if self.absent:
            return self.absent
        parts = [
            f"GPU {int(row.device)} was busy {percent(row.busy_share)} of the passes' wall time "
            f"({human_time(float(row.busy_us))} of {human_time(float(row.wall_us))})"
            for row in self.devices
        ]
        verdict, meaning = busy_reading(min(float(row.busy_share) for row in self.devices))
        return (
            "; ".join(parts) + f", so the pass is {verdict}: {meaning}. The tracer adds host time to every op "
            "and call, so an unprofiled pass keeps the GPU somewhat busier."
        )


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


@dataclass(frozen=True)
class Capped:
    """The first rows of a long table, the next ones (behind "show more") and how many there were."""

    shown: list[Any]
    rest: list[Any]
    total: int

    @classmethod
    def of(cls, table: pd.DataFrame, first: int, more: int = 0) -> Capped:
        """``table``'s first ``first`` rows (as named tuples), then up to ``more`` more."""
        rows = list(table.head(first + more).itertuples())
        return cls(rows[:first], rows[first:], len(table))

    @property
    def note(self) -> str:
        """``first 15 of 30`` where rows were left off the page, else ``""``."""
        shown = len(self.shown) + len(self.rest)
        return f"first {shown:,} of {self.total:,}" if self.total > shown else ""

    @property
    def rest_label(self) -> str:
        """The "show more" line: ``15 more``, ``200 more (of 1,234)``."""
        hidden = self.total - len(self.shown)
        return f"{len(self.rest):,} more" + (f" (of {hidden:,})" if hidden > len(self.rest) else "")


@dataclass(frozen=True)
class Card:
    """A headline figure: its label, value, a note under it and an optional meter (0..1)."""

    label: str
    value: str
    note: str = ""
    meter: float | None = None
    id: str | None = None


def header_section(page: Page) -> str:
    """The title and the run in one line: device, activity source, torch."""
    result = page.result
    device = {"cuda": "CUDA", "cpu": "CPU"}.get(str(result.metadata.get(schema.META_DEVICE, "")), "")
    parts = [f"{device} run" if device else "run", f"{result.source} activity source"]
    if result.metadata.get(schema.META_TORCH):
        parts.append(f"torch {result.metadata[schema.META_TORCH]}")
    return render("header.html.j2", title=page.title, line=" \u00b7 ".join(parts))


def headline_cards(page: Page) -> list[Card]:
    """Headline numbers: kernel time, GPU busy share, coverage, distinct kernels, functions, ops, modules."""
    result, head = page.result, views.headline(page.result)
    known = not math.isnan(head.coverage)
    kinds = ", ".join(f"{count:,} {kind}" for kind, count in views.activity_kinds(result).items()) or "none"
    return [
        Card("kernel time", human_time(result.total_us), f"{result.activity.num_rows:,} activity rows ({kinds})"),
        page.gpu.card(),
        Card(
            "coverage",
            f"{head.coverage:.1%}" if known else NO_VALUE,
            f"{human_time(result.attributed_us)} in a module and a functional call",
            head.coverage if known else None,
        ),
        Card("kernels", f"{head.kernels:,}", "distinct names"),
        Card("functions", f"{len(page.summary):,}", f"{result.calls.num_rows:,} functional calls"),
        Card("aten ops", f"{result.ops.num_rows:,}", "dispatched in the recorded pass"),
        Card("modules", f"{result.modules.num_rows:,}", f"{result.module_calls.num_rows:,} forwards"),
    ]


def cards_section(page: Page) -> str:
    """The row of headline cards."""
    return render("cards.html.j2", cards=headline_cards(page))


def functions_section(page: Page) -> str:
    """Kernel time per functional call: the bar chart beside the summary table, one unit, one share base."""
    rest = page.result.total_us - page.result.attributed_us
    rows = list(page.summary.itertuples())
    return render(
        "functions.html.j2",
        page=page,
        rows=rows,
        rest_us=rest if rest > 1e-9 else 0.0,
        GREY=GREY,
        UNATTRIBUTED=UNATTRIBUTED,
    )


def kernels_section(page: Page) -> str:
    """The kernels: first every launch of each name added up (``views.kernel_rollup``: launches, total, mean,
    min, max, share), costliest first, so a kernel many layers launch leads; then each kernel split by the
    op, functional call and module that launched it (``views.kernel_table``). Kernels go by their short
    name (``base.kernel_labels``), the full name on hover and in the cell a click opens.
    """
    rollup = Capped.of(_labelled(views.kernel_rollup(page.result)), ROLLUP_ROWS, MORE_KERNEL_ROWS)
    detail = Capped.of(_labelled(views.kernel_table(page.result)), KERNEL_ROWS, MORE_KERNEL_ROWS)
    return render("kernels.html.j2", page=page, rollup=rollup, detail=detail)


def _labelled(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (with ``kernel`` and ``short_name``) with a ``label`` column: what a table shows for each
    kernel (``base.kernel_labels``: the short name, template arguments kept where short names collide)."""
    return table.assign(label=kernel_labels(list(table["kernel"]), list(table["short_name"])))


def gpu_section(page: Page) -> str:
    """GPU busy and idle: per device and stream, busy time over the passes' wall time (``views.device_busy``),
    and the longest idle gaps with the modules the host ran meanwhile (``views.idle_gaps``); a plain sentence
    instead where the result has no GPU activity.
    """
    return render("gpu.html.j2", page=page, gpu=page.gpu, percent=percent, min_gap=human_time(IDLE_GAP_MIN_US))


WORTH_ROWS = 12


@dataclass(frozen=True)
class Roofline:
    """The report's "worth optimizing" part: a sentence on the limits used, the chart, the ranking."""

    sentence: str
    chart: roofline_plot.RooflineChart | None
    rows: Capped

    @classmethod
    def of(cls, result: ProfileResult) -> Roofline:
        """The roofline of ``result``'s samples (empty, with the reason, where it cannot be read)."""
        nothing = Capped([], [], 0)
        if not result.function_data:
            return cls("No samples were collected (function_names=set()), so no call can be placed.", None, nothing)
        limits = views.device_limits(result.metadata)
        try:
            samples = result.samples(roofline=True)
        except ImportError:
            return cls("Counting a call's FLOPs needs torch, which is not installed here.", None, nothing)
        if limits is None:
            what = result.metadata.get(schema.META_GPU_NAME) or "the CPU activity source"
            why = f"The limits of {what} are not known (results/limits.py), so no fraction of a bound can be given."
            return cls(why, None, nothing)
        ranked = views.worth_optimizing(samples)
        sentence = (
            f"Limits: {limits.name}, {limits.bandwidth / 1e12:g} TB/s and its dense peaks per dtype ({limits.source}). "
            f"The sampled calls could save {human_time(float(ranked['worth_us'].sum()))} of their "
            f"{human_time(float(samples['kernel_us'].sum()))} at their bounds."
        )
        return cls(sentence, roofline_plot.chart(samples), Capped.of(ranked, WORTH_ROWS))


def roofline_section(page: Page) -> str:
    """Worth optimizing: the sampled calls on the GPU's roofline (``views.roofline_samples``) and ranked by
    the time their bound says could be saved (``views.worth_optimizing``)."""
    return render("roofline.html.j2", page=page, roof=Roofline.of(page.result), percent=percent, GREY=GREY)


def modules_section(page: Page) -> str:
    """The module table (repeated layers grouped, expandable) and the icicle of the module tree."""
    modules = Capped.of(views.module_table(page.result), MODULE_ROWS)
    return render("modules.html.j2", page=page, modules=modules, GREY=GREY)


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
    rows = list(views.unattributed_table(page.result, top=UNATTRIBUTED_ROWS).itertuples())
    return render("coverage.html.j2", page=page, rows=rows, sentence=_coverage_sentence(page))


def _split_sample(sample: Any) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(sample, (tuple, list)) and len(sample) == 2 and isinstance(sample[1], Mapping):
        args, kwargs = sample
        return (list(args) if isinstance(args, (tuple, list)) else [args]), dict(kwargs)
    return [sample], {}


@dataclass(frozen=True)
class SampleRow:
    """One distinct sample as text: its index, how many calls had it, its arguments."""

    index: int
    count: int
    args: list[str]
    kwargs: list[str]


def _sample_block(name: str, entries: list[tuple[int, Any]]) -> dict[str, Any]:
    calls = sum(int(count) for count, _ in entries)
    note = f"{calls:,} calls, {len(entries):,} distinct samples"
    if len(entries) > MAX_SAMPLES_SHOWN:
        note += f" (first {MAX_SAMPLES_SHOWN} shown)"
    rows = []
    for index, (count, sample) in enumerate(entries[:MAX_SAMPLES_SHOWN]):
        args, kwargs = _split_sample(sample)
        kw_texts = [f"{key}={value_text(value)}" for key, value in kwargs.items()]
        rows.append(SampleRow(index, int(count), [value_text(arg) for arg in args], kw_texts))
    return {"name": name, "note": note, "rows": rows}


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
_INTERCEPTIONS = {"objects": "at the function objects (vectorcall hooks)", "mode": "through a TorchFunctionMode"}
_DECODERS = {
    "native": "native (compiled C decoder)",
    "python": "cupti-python",
    "none": "none (the CPU activity source reads no CUPTI records)",
}
_CORRELATIONS = {
    "launch": "at each launch (the CUPTI launch callback reads the launching thread's op)",
    "push": "through op and scope ids pushed to CUPTI",
    "none": "none (the CPU activity source times ops on the host)",
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
    schema.META_INTERCEPTION: ("functional calls seen", lambda v: _INTERCEPTIONS.get(v, v)),
    schema.META_GPU_SMS: ("streaming multiprocessors", str),
    schema.META_DECODER: ("CUPTI record decoder", lambda v: _DECODERS.get(v, v)),
    schema.META_THREADS_TRACED: ("threads traced", str),
    schema.META_CORRELATION: ("launches linked to ops", lambda v: _CORRELATIONS.get(v, v)),
    schema.META_CORRELATION_PUSHES: ("op and scope ids pushed (to CUPTI, or to the launch callback's stack)", str),
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
    schema.META_STEP_BOUNDS: ("recorded steps", lambda v: f"{max(v.count(','), 1)} (recording(...).step())"),
    schema.META_FIRST_STEP: ("first recorded step", str),
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
    return render("run.html.j2", rows=metadata_rows(page.result), warnings=list(page.result.warnings))


def samples_section(page: Page) -> str:
    """The distinct input samples of every function, as dtype[shape] stride."""
    result, summary = page.result, page.summary
    order = [name for name in summary["function_name"] if name in result.function_data]
    order += [name for name in result.function_data if name not in set(order)]
    return render("samples.html.j2", blocks=[_sample_block(name, result.function_data[name]) for name in order])


SECTIONS: tuple[Section, ...] = (
    header_section,
    cards_section,
    functions_section,
    kernels_section,
    gpu_section,
    roofline_section,
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
        and returns HTML (the built-in ones render a template of ``reports/templates``).
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
        sections = [templating.markup(section(page)) for section in self.sections]
        data = templating.markup(embed_json(report_data(result, page.summary, page.unit)))
        css, js = templating.markup(CSS), templating.markup(JS)
        return render("report.html.j2", title=self.title, sections=sections, css=css, js=js, data=data) + "\n"


NOTEBOOK_CSS = (
    ".aitune-nb table{border-collapse:collapse;font-size:12.5px}.aitune-nb td,.aitune-nb th{padding:3px 8px;"
    "border-bottom:1px solid #e3e7ed;text-align:left}.aitune-nb td.num,.aitune-nb th.num{text-align:right}"
    ".aitune-nb .note{color:#5f6b7a}"
)
NOTEBOOK_ROWS = 8
NOTEBOOK_KERNELS = 5


def notebook_html(result: ProfileResult) -> str:
    """The fragment (no script, inline style) Jupyter shows for a ``ProfileResult``: the headline with the GPU
    busy share, the functions, the costliest kernels over all their launches, and what was not attributed.
    """
    page = Page.of(result, "")
    head = views.headline(result)
    return render(
        "notebook.html.j2",
        page=page,
        head=head,
        busy=page.gpu.card(),
        kernels=list(_labelled(views.kernel_rollup(result, top=NOTEBOOK_KERNELS)).itertuples()),
        css=templating.markup(NOTEBOOK_CSS),
        coverage=NO_VALUE if math.isnan(head.coverage) else f"{head.coverage:.1%}",
        rows=list(page.summary.head(NOTEBOOK_ROWS).itertuples()),
        missing_rows=list(views.unattributed_table(result, top=3).itertuples()),
    )


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
