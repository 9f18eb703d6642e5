"""A self-contained HTML report: one file, inline CSS, JS and SVG, data embedded as JSON.

Sections: headline numbers, a bar chart of kernel time per functional call beside the summary table
(``describe()``), an icicle of kernel time over the module tree (a module's width includes its
descendants; unattributed time is hatched grey), coverage with the unattributed kernels, the
distinct input samples of every function, and run metadata. Tables are rendered here (escaped);
the two charts are drawn by the inline script from the embedded JSON, which writes
``<div id="render-ok">`` when done and ``<div id="render-error">`` on failure.
No torch import: sample tensors are read by duck typing (``shape``, ``dtype``, ``stride``).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from .. import schema
from ..joining import attributed_mask
from ._html_assets import CSS, JS
from .base import Renderer, module_labels
from .sample_time import sample_time_section

if TYPE_CHECKING:
    from ..results import ProfileResult

BAR_ROWS = 14
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


# -- sample values as text (duck typing: torch tensors and saved tensor metadata alike) ------------------
def is_tensor_like(value: Any) -> bool:
    """Whether ``value`` looks like a tensor or tensor metadata (has ``shape`` and ``dtype``)."""
    return not isinstance(value, type) and hasattr(value, "shape") and hasattr(value, "dtype")


def _stride(value: Any) -> tuple[int, ...] | None:
    stride = getattr(value, "stride", None)
    try:
        stride = stride() if callable(stride) else stride
        return None if stride is None else tuple(int(s) for s in stride)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):  # sparse / nested tensors
        return None


def tensor_text(value: Any) -> str:
    """``float32[4, 64] stride (64, 1)``: dtype, shape and strides of a tensor-like value."""
    dtype = str(value.dtype).removeprefix("torch.")
    shape = ", ".join(str(int(size)) for size in value.shape)
    stride = _stride(value)
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


# -- data for the charts -----------------------------------------------------------------------------
def function_colors(summary: pd.DataFrame) -> dict[str, str]:
    """One palette colour per function, in order of kernel time (shared by both charts and the table)."""
    return {str(name): PALETTE[rank % len(PALETTE)] for rank, name in enumerate(summary["function_name"])}


def bar_rows(summary: pd.DataFrame, total_us: float, attributed_us: float) -> list[dict[str, Any]]:
    """The bar chart's rows: the top functions by kernel time, then the unattributed time."""
    rows = [
        {
            "name": str(row.function_name),
            "us": float(row.time_spent_us),
            "pct": 100.0 * float(row.time_spent_us) / total_us if total_us > 0 else 0.0,
            "unattributed": False,
        }
        for row in summary.head(BAR_ROWS).itertuples()
    ]
    rest = total_us - attributed_us
    if rest > 0:
        rows.append({"name": "(unattributed)", "us": rest, "pct": 100.0 * rest / total_us, "unattributed": True})
    return rows


def _per_module_function(activity: pa.Table) -> dict[int, list[tuple[str | None, float]]]:
    if activity.num_rows == 0:
        return {}
    attributed = pc.greater_equal(activity["call_id"], 0)
    names = pc.if_else(attributed, activity["function_name"], pa.scalar(None, pa.string()))
    table = pa.table({"module_id": activity["module_id"], "function_name": names, "us": activity["kernel_us"]})
    grouped = table.group_by(["module_id", "function_name"]).aggregate([("us", "sum")]).to_pydict()
    out: dict[int, list[tuple[str | None, float]]] = {}
    for module_id, name, us in zip(grouped["module_id"], grouped["function_name"], grouped["us_sum"]):
        out.setdefault(module_id, []).append((name, float(us)))
    return out


def _leaves(parts: list[tuple[str | None, float]]) -> list[dict[str, Any]]:
    named = sorted((p for p in parts if p[0] is not None), key=lambda p: -p[1])
    leaves = [{"name": name, "kind": "function", "total_us": us, "children": []} for name, us in named]
    no_call = sum(us for name, us in parts if name is None)
    if no_call > 0:
        leaves.append({"name": "(no functional call)", "kind": "nocall", "total_us": no_call, "children": []})
    return leaves


def _module_nodes(result: ProfileResult, parts: dict[int, list[tuple[str | None, float]]]) -> dict[int, dict[str, Any]]:
    labels = module_labels(result)
    nodes = {}
    for module_id, (label, module_type) in labels.items():
        own = parts.get(module_id, [])
        nodes[module_id] = {
            "name": label,
            "type": module_type,
            "kind": "module",
            "module_id": module_id,
            "self_us": sum(us for _, us in own),
            "no_call_us": sum(us for name, us in own if name is None),
            "children": [],
            "leaves": _leaves(own),
        }
    return nodes


def _link_and_total(nodes: dict[int, dict[str, Any]], parents: Mapping[int, int]) -> list[dict[str, Any]]:
    roots = []
    for module_id in sorted(nodes):
        parent = parents.get(module_id, schema.NO_MODULE)
        (nodes[parent]["children"] if parent in nodes else roots).append(nodes[module_id])
    order, stack = [], list(roots)
    while stack:  # iterative: module trees can be deeper than the recursion limit allows
        node = stack.pop()
        order.append(node)
        stack.extend(node["children"])
    for node in reversed(order):  # children before parents
        node["children"] = node["children"] + node.pop("leaves")
        node["total_us"] = node["self_us"] + sum(c["total_us"] for c in node["children"] if c["kind"] == "module")
    return roots


def module_tree(result: ProfileResult) -> dict[str, Any]:
    """Kernel time over the module tree: ``total_us`` of a module includes its descendants.

    Each module's children are its submodules, then one leaf per functional call made directly in
    it, then ``(no functional call)`` for its own kernels outside any call. The top node
    ``all activity`` also holds ``(outside profiled modules)``; its ``total_us`` is every kernel's.
    """
    parts = _per_module_function(result.activity)
    nodes = _module_nodes(result, parts)
    modules = result.modules.to_pydict()
    roots = _link_and_total(nodes, dict(zip(modules["module_id"], modules["parent_module_id"])))
    outside = sum(us for module_id, rows in parts.items() if module_id not in nodes for _, us in rows)
    children = sorted(roots, key=lambda n: -n["total_us"])
    if outside > 0:
        children.append({"name": "(outside profiled modules)", "kind": "outside", "total_us": outside, "children": []})
    return {
        "name": "all activity",
        "kind": "all",
        "total_us": sum(c["total_us"] for c in children),
        "children": children,
    }


def report_data(result: ProfileResult, summary: pd.DataFrame) -> dict[str, Any]:
    """What the inline script draws: bar rows, function colours and the module tree."""
    return {
        "bars": bar_rows(summary, result.total_us, result.attributed_us),
        "function_colors": function_colors(summary),
        "tree": module_tree(result),
    }


def embed_json(value: Any) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</script>``, ``<!--`` or ``&``)."""
    text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    for raw in ("<", ">", "&", "\u2028", "\u2029"):
        text = text.replace(raw, f"\\u{ord(raw):04x}")
    return text


# -- HTML pieces ----------------------------------------------------------------------------------------
def _table(headers: Iterable[tuple[str, bool]], rows: Iterable[Iterable[str]]) -> str:
    """An HTML table; ``headers`` are (title, numeric), cells are HTML already escaped."""
    heads = list(headers)
    head = "".join(f'<th class="num">{esc(t)}</th>' if num else f"<th>{esc(t)}</th>" for t, num in heads)
    cell = '<td class="num">{}</td>', "<td>{}</td>"
    body = "".join(
        "<tr>" + "".join(cell[0 if num else 1].format(c) for c, (_, num) in zip(row, heads)) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _card(label: str, value: str, note: str, meter: float | None = None) -> str:
    bar = "" if meter is None else f'<div class="meter"><div class="bar" style="width:{100 * meter:.1f}%"></div></div>'
    return (
        f'<div class="card"><div class="label">{esc(label)}</div><div class="value">{esc(value)}</div>'
        f'<div class="note">{esc(note)}</div>{bar}</div>'
    )


def _cards(result: ProfileResult, summary: pd.DataFrame) -> str:
    coverage = result.coverage
    known = not math.isnan(coverage)
    kinds = pd.Series(result.activity["kind"].to_pylist(), dtype=object).value_counts()
    kind_note = ", ".join(f"{count} {kind}" for kind, count in kinds.items()) or "none"
    cards = [
        _card("kernel time", _fmt_us(result.total_us), f"{result.activity.num_rows} activity rows"),
        _card(
            "coverage",
            f"{coverage:.1%}" if known else NO_VALUE,
            f"{_fmt_us(result.attributed_us)} attributed",
            coverage if known else None,
        ),
        _card("activity", f"{result.activity.num_rows:,}", kind_note),
        _card("functions", f"{len(summary)}", f"{result.calls.num_rows:,} functional calls"),
        _card("aten ops", f"{result.ops.num_rows:,}", "dispatched in the recorded pass"),
        _card("modules", f"{result.modules.num_rows:,}", f"{result.module_calls.num_rows:,} forwards"),
    ]
    return f'<div class="cards">{"".join(cards)}</div>'


def _fmt_us(us: float) -> str:
    for scale, unit in ((1e6, "s"), (1e3, "ms")):
        if us >= scale:
            return f"{us / scale:,.2f} {unit}"
    return f"{us:,.1f} \u00b5s"


def _summary_section(summary: pd.DataFrame) -> str:
    headers = [
        ("function", False),
        ("calls", True),
        ("samples", True),
        ("modules", True),
        ("time (\u00b5s)", True),
        ("share", True),
        ("tensors (MB)", True),
    ]
    colors = function_colors(summary)
    rows = [
        [
            f'<span class="fn"><span class="swatch" style="background:{colors[r.function_name]}"></span>'
            f"<code>{esc(r.function_name)}</code></span>",
            _number(r.calls, 0),
            _number(r.num_distinct_samples, 0),
            _number(r.num_modules, 0),
            _number(float(r.time_spent_us), 1),
            f"{_number(float(r.time_spent_pct), 1)}%",
            _number(float(r.tensor_size_MB), 3),
        ]
        for r in summary.itertuples()
    ]
    note = "describe(); share of attributed time, samples = distinct inputs"
    return f'<section id="summary"><h2>Summary <small>{esc(note)}</small></h2>{_table(headers, rows)}</section>'


def _charts(summary: pd.DataFrame) -> str:
    bars = (
        '<section id="functions"><h2>Kernel time per functional call <small>share of all kernel time, '
        'unattributed included</small></h2><div id="bar-chart"></div></section>'
    )
    return f'<div class="grid2 wide-right row">{bars}{_summary_section(summary)}</div>'


def _icicle_section() -> str:
    legend = (
        '<div class="legend"><span><span class="swatch" style="background:#c9d4e1"></span>module (width includes '
        'submodules)</span><span><span class="swatch" style="background:#f28e2b"></span>functional call made '
        'directly in the module (colour as in the bar chart)</span><span><span class="swatch" '
        'style="background:#b8bec7"></span>unattributed: outside any functional call or profiled module</span></div>'
    )
    return (
        '<section id="modules"><h2>Module tree <small>kernel time; click a box to zoom in, click it again to zoom '
        f'out; hover for details</small></h2>{legend}<div id="icicle"></div></section>'
    )


def _reason(op_id: int | None, module_id: int, call_id: int) -> str:
    if op_id is None:
        return "no op claimed the kernel"
    return "outside profiled modules" if module_id < 0 else "no functional call" if call_id < 0 else "attributed"


def _unattributed_rows(result: ProfileResult) -> list[list[str]]:
    rows = result.activity.filter(pc.invert(attributed_mask(result.activity)))
    if rows.num_rows == 0:
        return []
    labels = module_labels(result)
    frame = rows.select(["op_id", "op", "module_id", "call_id", "kernel_us"]).to_pandas()
    frame["op_id"] = frame["op_id"].astype(object).where(frame["op_id"].notna(), None)
    frame["reason"] = [_reason(o, m, c) for o, m, c in zip(frame["op_id"], frame["module_id"], frame["call_id"])]
    frame["module"] = [labels.get(m, (NO_VALUE, ""))[0] for m in frame["module_id"]]
    frame["op"] = frame["op"].fillna(NO_VALUE)
    grouped = frame.groupby(["reason", "op", "module"], sort=False)["kernel_us"].agg(["count", "sum"])
    grouped = grouped.sort_values("sum", ascending=False).head(UNATTRIBUTED_ROWS).reset_index()
    return [
        [esc(r.reason), _code(r.op), _code(r.module), _number(r.count, 0), _number(r.sum, 1)]
        for r in grouped.itertuples()
    ]


def _coverage_section(result: ProfileResult) -> str:
    rows = _unattributed_rows(result)
    share = 1.0 - result.coverage if result.total_us > 0 else 0.0
    text = (
        f"{_fmt_us(result.total_us - result.attributed_us)} of {_fmt_us(result.total_us)} kernel time "
        f"({share:.1%}) has no enclosing profiled module and functional call; the spec's profiling_df leaves it out."
    )
    headers = [("reason", False), ("op", False), ("module", False), ("kernels", True), ("kernel time (\u00b5s)", True)]
    table = _table(headers, rows) if rows else "<p>Every kernel was attributed.</p>"
    title = "<h2>Coverage <small>unattributed kernels by op and module</small></h2>"
    return f'<section id="coverage">{title}<p>{esc(text)}</p>{table}</section>'


def _metadata_section(result: ProfileResult) -> str:
    items: list[tuple[str, Any]] = [("activity source", result.source), ("schema version", schema.SCHEMA_VERSION)]
    items += [(str(key), value) for key, value in result.metadata.items()]
    items += [("dropped activity records", result.dropped_records)]
    rows = [[esc(key), _code(value)] for key, value in items]
    rows += [['<span class="warn">warning</span>', esc(text)] for text in result.warnings]
    return f'<section id="metadata"><h2>Run</h2>{_table([("key", False), ("value", False)], rows)}</section>'


def _code(value: Any) -> str:
    return f"<code>{esc(value)}</code>"


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


def _samples_section(result: ProfileResult, summary: pd.DataFrame) -> str:
    order = [name for name in summary["function_name"] if name in result.function_data]
    order += [name for name in result.function_data if name not in set(order)]
    blocks = [_samples_block(name, result.function_data[name], pos == 0) for pos, name in enumerate(order)]
    title = "<h2>Distinct input samples <small>per function; tensors as dtype[shape] stride</small></h2>"
    return f'<section id="samples">{title}{"".join(blocks) or "<p>No samples were collected.</p>"}</section>'


def _header(result: ProfileResult, title: str) -> str:
    device = result.metadata.get("device", "")
    subtitle = f"{result.source} activity source" + (f" \u00b7 device {device}" if device else "")
    subtitle += "".join(f" \u00b7 {key} {value}" for key, value in result.metadata.items() if key == "torch")
    return f"<header><h1>{esc(title)}</h1><p>{esc(subtitle)}</p></header>"


class HtmlRenderer(Renderer):
    """One self-contained HTML page: tables, charts, samples and metadata."""

    extension = ".html"

    def __init__(self, *, title: str = "aitune_dispatch profile") -> None:
        self.title = title

    def render(self, result: ProfileResult) -> str:
        """The whole page."""
        summary = result.describe(top_k=ALL_FUNCTIONS)
        body = (
            _header(result, self.title)
            + _cards(result, summary)
            + _charts(summary)
            + _icicle_section()
            + f'<div class="grid2 row">{_coverage_section(result)}{_metadata_section(result)}</div>'
            + sample_time_section(result)
            + _samples_section(result, summary)
        )
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(self.title)}</title><style>{CSS}</style></head><body><main>{body}</main>"
            f'<script type="application/json" id="report-data">{embed_json(report_data(result, summary))}</script>'
            f"<script>{JS}</script></body></html>\n"
        )


def write_report(result: ProfileResult, path: str | Path, *, title: str = "aitune_dispatch profile") -> Path:
    """Write the self-contained HTML report of ``result`` to ``path`` and return the path."""
    return HtmlRenderer(title=title).write(result, path)
