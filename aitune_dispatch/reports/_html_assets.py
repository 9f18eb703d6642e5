"""The inline stylesheet and script of the HTML report (kept as text so the page needs no files)."""

from __future__ import annotations

CSS = """
:root { --ink: #1f2933; --muted: #5f6b7a; --line: #e3e7ed; --card: #ffffff; --bg: #f4f6f9;
        --accent: #4e79a7; --grey: #b8bec7; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--ink);
       font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main { max-width: 1360px; margin: 0 auto; padding: 22px 24px 40px; }
header h1 { font-size: 22px; margin: 0 0 2px; }
header p { margin: 0; color: var(--muted); }
h2 { font-size: 16px; margin: 0 0 10px; }
h3 { font-size: 14px; margin: 18px 0 8px; }
h2 small, h3 small, .note { color: var(--muted); font-weight: normal; font-size: 12.5px; }
.cards { display: grid; grid-template-columns: repeat(7, 1fr); gap: 12px; margin: 16px 0; }
.cards.devices { grid-template-columns: repeat(auto-fill, minmax(220px, 1fr)); margin: 8px 0 12px; }
.cards.devices .card { background: #fafbfc; }
.reading { margin: 0 0 4px; }
.card, section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; }
.card { padding: 10px 14px; }
.card .value { font-size: 20px; font-weight: 600; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
section { padding: 14px 16px; margin-bottom: 16px; overflow-x: auto; }
.grid2 { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 16px; }
.grid2.wide-right { grid-template-columns: minmax(0, 9fr) minmax(0, 11fr); }
.fn { white-space: nowrap; }  /* the swatch stays with the name (a <wbr> of code.name still breaks it when narrow) */
.grid2 > section { margin-bottom: 0; min-width: 0; }
.row { margin-bottom: 16px; }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { padding: 5px 7px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { color: var(--muted); font-weight: 600; font-size: 12px; background: #fafbfc; }
td code { overflow-wrap: break-word; }
code.name wbr { display: none; }  /* a short name stays whole in a wide window ... */
td .note { font-size: 12px; }
.tree details { border: 0; padding: 0; }
details.kernel { border: 0; padding: 0; }  /* a kernel's short name; a click shows its full name under it */
details.kernel summary { font-weight: normal; }
details.kernel code.full { display: block; margin-top: 4px; color: var(--muted); }
.tree summary { font-weight: normal; }
.tree ul { margin: 4px 0 2px; padding-left: 18px; }
table.kv td:first-child { color: var(--muted); white-space: nowrap; width: 1%; }
table.kv thead { display: none; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
table.summary th.num { white-space: normal; }  /* its titles wrap in the narrow side panel */
tr:hover td { background: #f7f9fc; }
th button.sort { background: none; border: 0; padding: 0; margin: 0; font: inherit; color: inherit; cursor: pointer;
                 text-align: inherit; white-space: inherit; }
th button.sort:hover, th button.sort:focus-visible { color: var(--ink); text-decoration: underline; }
th[aria-sort="ascending"] button.sort::after { content: " \\25B2"; font-size: 9px; }
th[aria-sort="descending"] button.sort::after { content: " \\25BC"; font-size: 9px; }
code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12px; }
.swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 6px; }
.bar { height: 8px; border-radius: 4px; background: var(--accent); }
.meter { background: #e9edf2; border-radius: 4px; height: 8px; margin-top: 6px; }
details { border-top: 1px solid var(--line); padding: 6px 0; }
summary { cursor: pointer; font-weight: 600; }
summary .note { margin-left: 8px; }
.args div { white-space: pre-wrap; word-break: break-word; }
.legend { display: flex; gap: 18px; color: var(--muted); font-size: 12.5px; margin-bottom: 8px; }
.legend span { display: inline-flex; align-items: center; }
svg text { font-family: inherit; }
.icicle rect { cursor: pointer; stroke: #fff; stroke-width: 1; }
.icicle rect:hover { stroke: var(--ink); }
.warn { color: #9a3b00; }
#render-error { color: #b00020; font-weight: 600; padding: 12px; }
@media (max-width: 960px) { code.name wbr { display: inline; } }  /* ... and wraps at its break points below */
@media (max-width: 1100px) {
  main { padding: 16px 14px 32px; }
  .grid2, .grid2.wide-right { grid-template-columns: minmax(0, 1fr); }
  .grid2 > section { margin-bottom: 16px; }
  .cards { grid-template-columns: repeat(4, 1fr); }
}
@media (max-width: 640px) { .cards { grid-template-columns: repeat(2, 1fr); } }
"""

JS = r"""
(function () {
  "use strict";
  function mark(id, message) {
    var node = document.getElementById(id) || document.createElement("div");
    node.id = id;
    if (message) { node.textContent = message; } else { node.hidden = true; }
    document.body.appendChild(node);
    return node;
  }
  window.addEventListener("error", function (event) { mark("render-error", "report script error: " + event.message); });
  var NS = "http://www.w3.org/2000/svg";
  var GREY = "#b8bec7";
  var MODULE_SHADES = ["#e7ecf2", "#d8e0ea", "#c9d4e1", "#bac8d8", "#abbccf", "#9cb0c6"];
  var data = JSON.parse(document.getElementById("report-data").textContent);

  function svgEl(tag, attrs, parent) {
    var node = document.createElementNS(NS, tag);
    Object.keys(attrs).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (parent) { parent.appendChild(node); }
    return node;
  }
  function svgText(parent, x, y, str, attrs) {
    var node = svgEl("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    node.textContent = str;
    return node;
  }
  var UNIT = data.unit ? [data.unit.scale, data.unit.symbol] : [1, "\u00b5s"];  // the page's one unit
  function fmt(us) {
    var v = us / UNIT[0];
    return v.toLocaleString("en-US", { maximumFractionDigits: v < 10 ? 2 : v < 100 ? 1 : 0 }) + " " + UNIT[1];
  }
  function share(us) { return (100 * us / (data.total_us || 1)).toFixed(1) + "%"; }
  function niceStep(max, count) {
    var raw = max / count, step = Math.pow(10, Math.floor(Math.log10(raw))), err = raw / step;
    return step * (err >= 7.5 ? 10 : err >= 3.5 ? 5 : err >= 1.5 ? 2 : 1);
  }
  function colorOf(name) {
    return Object.prototype.hasOwnProperty.call(data.function_colors, name) ? data.function_colors[name] : GREY;
  }
  function isDark(hex) {
    var n = parseInt(hex.slice(1), 16), r = (n >> 16) & 255, g = (n >> 8) & 255, b = n & 255;
    return 0.299 * r + 0.587 * g + 0.114 * b < 150;
  }
  function hatch(svg, id) {
    var defs = svgEl("defs", {}, svg);
    var pattern = svgEl("pattern", { id: id, width: 6, height: 6, patternUnits: "userSpaceOnUse",
                                     patternTransform: "rotate(45)" }, defs);
    svgEl("rect", { width: 6, height: 6, fill: "#d5dae1" }, pattern);
    svgEl("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#9aa3ae", "stroke-width": 2 }, pattern);
    return "url(#" + id + ")";
  }
  function tooltip(node, str) { svgEl("title", {}, node).textContent = str; }
  function fits(label, width) { return width > 7 * label.length + 10; }
  function clip(label, width) {
    var room = Math.floor((width - 10) / 7);
    if (room >= label.length) { return label; }
    return room > 3 ? label.slice(0, room - 1) + "\u2026" : "";
  }

  function drawBars(host) {
    host.textContent = "";
    var rows = data.bars, width = Math.max(host.clientWidth, 320);
    var labelW = Math.min(210, Math.round(width * 0.32)), right = 118;
    var rowH = 26, top = 8, plotW = Math.max(width - labelW - right, 60), height = top + rows.length * rowH + 48;
    var max = Math.max.apply(null, rows.map(function (r) { return r.us; }).concat([1e-9]));
    var ticks = Math.max(2, Math.min(6, Math.floor(plotW / 70)));
    var step = niceStep(max, ticks), axisMax = Math.ceil(max / step) * step;
    var svg = svgEl("svg", { width: width, height: height, role: "img",
                             "aria-label": "kernel time per function" }, host);
    var fillUn = hatch(svg, "hatch-bars");
    var x = function (us) { return labelW + (us / axisMax) * plotW; };
    for (var t = 0; t <= axisMax + step / 2; t += step) {
      svgEl("line", { x1: x(t), x2: x(t), y1: top, y2: top + rows.length * rowH, stroke: "#e3e7ed" }, svg);
      svgText(svg, x(t), top + rows.length * rowH + 16,
              (t / UNIT[0]).toLocaleString("en-US", { maximumFractionDigits: 3 }),
              { "text-anchor": "middle", "font-size": 11, fill: "#5f6b7a" });
    }
    svgText(svg, labelW + plotW / 2, height - 8, "kernel time (" + UNIT[1] + ")",
            { "text-anchor": "middle", "font-size": 12, fill: "#1f2933" });
    rows.forEach(function (row, i) {
      var y = top + i * rowH;
      var fill = row.unattributed ? fillUn : colorOf(row.name);
      var bar = svgEl("rect", { x: labelW, y: y + 4, width: Math.max(x(row.us) - labelW, 1), height: rowH - 8,
                                rx: 3, fill: fill }, svg);
      tooltip(bar, row.name + ": " + fmt(row.us) + " (" + row.pct.toFixed(1) + "% of all kernel time)");
      svgText(svg, labelW - 8, y + rowH / 2 + 4, clip(row.name, labelW - 4),
              { "text-anchor": "end", "font-size": 12.5, fill: row.unattributed ? "#5f6b7a" : "#1f2933",
                "font-style": row.unattributed ? "italic" : "normal" });
      svgText(svg, x(row.us) + 6, y + rowH / 2 + 4, fmt(row.us) + "  " + row.pct.toFixed(1) + "%",
              { "font-size": 11.5, fill: "#5f6b7a" });
    });
  }

  function layout(node, x0, x1, depth, out, parent) {
    var item = { node: node, x0: x0, x1: x1, depth: depth, parent: parent };
    out.push(item);
    var cursor = x0, scale = node.total_us > 0 ? (x1 - x0) / node.total_us : 0;
    (node.children || []).forEach(function (child) {
      var next = cursor + child.total_us * scale;
      layout(child, cursor, next, depth + 1, out, item);
      cursor = next;
    });
    return out;
  }
  function icicleFill(item, fillUn) {
    var kind = item.node.kind;
    if (kind === "outside" || kind === "nocall") { return fillUn; }
    if (kind === "function") { return colorOf(item.node.name); }
    if (kind === "all") { return "#f1f3f6"; }
    return MODULE_SHADES[Math.min(item.depth - 1, MODULE_SHADES.length - 1)];
  }
  function icicleTip(node) {
    var lines = [(node.path || node.name) + (node.type ? " (" + node.type + ")" : ""),
                 fmt(node.total_us) + " \u2014 " + share(node.total_us) + " of all kernel time"];
    if (node.kind === "module") {
      lines.push("own kernels: " + fmt(node.self_us) + ", outside any functional call: " + fmt(node.no_call_us));
    }
    return lines.join("\n");
  }
  function drawIcicle(host, focus) {
    host.textContent = "";
    var items = layout(data.tree, 0, 1, 0, [], null), width = Math.max(host.clientWidth, 320), rowH = 30;
    var depth = Math.max.apply(null, items.map(function (i) { return i.depth; })) + 1;
    var svg = svgEl("svg", { width: width, height: depth * rowH + 2, class: "icicle", role: "img",
                             "aria-label": "module tree of kernel time" }, host);
    var fillUn = hatch(svg, "hatch-tree");
    var f = focus || items[0], span = (f.x1 - f.x0) || 1;
    items.forEach(function (item) {
      var a = Math.max(0, (item.x0 - f.x0) / span) * width, b = Math.min(1, (item.x1 - f.x0) / span) * width;
      if (b - a < 0.5 || item.x1 <= f.x0 || item.x0 >= f.x1) { return; }
      var g = svgEl("g", {}, svg);
      var rect = svgEl("rect", { x: a, y: item.depth * rowH, width: b - a, height: rowH - 2, rx: 2,
                                 fill: icicleFill(item, fillUn) }, g);
      tooltip(rect, icicleTip(item.node));
      var label = item.node.name + "  " + fmt(item.node.total_us);
      var shown = fits(label, b - a) ? label : clip(item.node.name, b - a);
      var dark = item.node.kind === "function" && isDark(colorOf(item.node.name));
      if (shown) {
        svgText(g, a + 5, item.depth * rowH + rowH / 2 + 3, shown,
                { "font-size": 12, fill: dark ? "#ffffff" : "#1f2933", "pointer-events": "none" });
      }
      rect.addEventListener("click", function () {
        zoom = item === f ? item.parent : item;
        drawIcicle(host, zoom);
      });
    });
  }
  var zoom = null;

  // Sortable tables: a header's button sorts its table's body rows by that column, ascending, then
  // descending on the next click (aria-sort says which). Numeric columns (th.num) sort by each cell's
  // data-sort, the raw value the page wrote beside the formatted text; text columns by data-sort or
  // the cell's text. Missing values go last either way; ties keep their order.
  function sortKey(cell, numeric) {
    var raw = cell ? cell.getAttribute("data-sort") : null;
    if (numeric) {
      var value = parseFloat(raw !== null ? raw : cell ? cell.textContent.replace(/[^0-9eE.+-]/g, "") : "");
      return isNaN(value) ? null : value;
    }
    var text = raw !== null ? raw : cell ? cell.textContent : "";
    text = text.trim();
    return text === "" || text === "\u2014" ? null : text;
  }
  function compare(a, b, numeric) {
    if (numeric) { return a - b; }
    return a.localeCompare(b, "en", { numeric: true, sensitivity: "base" });
  }
  function sortTable(table, th) {
    var index = th.cellIndex, numeric = th.classList.contains("num");
    var ascending = th.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(th.parentNode.cells, function (other) { other.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.map.call(body.rows, function (row, i) {
      return { row: row, key: sortKey(row.cells[index], numeric), i: i };
    });
    rows.sort(function (a, b) {
      if (a.key === null || b.key === null) { return (a.key === null) - (b.key === null) || a.i - b.i; }
      var order = compare(a.key, b.key, numeric);
      return (ascending ? order : -order) || a.i - b.i;
    });
    rows.forEach(function (item) { body.appendChild(item.row); });
  }
  function makeSortable() {
    Array.prototype.forEach.call(document.querySelectorAll("main table:not(.kv)"), function (table) {
      if (!table.tHead || !table.tBodies.length || table.tBodies[0].rows.length < 2) { return; }
      Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
        if (!th.textContent.trim()) { return; }
        var button = document.createElement("button");
        button.type = "button";
        button.className = "sort";
        button.title = "sort by " + th.textContent.trim();
        while (th.firstChild) { button.appendChild(th.firstChild); }
        th.appendChild(button);
        button.addEventListener("click", function () { sortTable(table, th); });
      });
    });
  }

  function overflowing() {  // sections whose content is wider than the section: clipped or scrolled
    var out = [];
    Array.prototype.forEach.call(document.querySelectorAll("section"), function (section) {
      if (section.scrollWidth > section.clientWidth + 1) { out.push(section.id || "?"); }
    });
    return out.join(" ");
  }
  function drawAll() {  // a chart whose section the page leaves out is skipped
    var bars = document.getElementById("bar-chart"), icicle = document.getElementById("icicle");
    if (bars) { drawBars(bars); }
    if (icicle) { drawIcicle(icicle, zoom); }
  }

  var sortable = false;
  function render() {
    try {
      if (!sortable) { makeSortable(); sortable = true; }
      drawAll();
      mark("render-ok").setAttribute("data-overflow", overflowing());
    } catch (err) {
      mark("render-error", "report script error: " + (err && err.message ? err.message : String(err)));
    }
  }
  var pending = null, lastWidth = window.innerWidth;
  window.addEventListener("resize", function () {  // redraw the charts at the new width
    if (window.innerWidth === lastWidth) { return; }
    lastWidth = window.innerWidth;
    zoom = null;  // the layout is recomputed: start from the whole tree
    clearTimeout(pending);
    pending = setTimeout(render, 120);
  });
  render();
})();
"""
